"""VerifierCritic: documented rules on TextWorld-like and Python-tool results."""

import numpy as np
import pytest

from prm_critic.critic import check_critic
from prm_critic.text import TextStep, format_tool_step
from prm_critic.text.verifier import VerifierCritic, result_text

OK = format_tool_step("go", {"direction": "north"}, "You are in the kitchen. There is a fridge.")
ERR = format_tool_step("python", {"code": "1/0"}, "Traceback (most recent call last):\nZeroDivisionError: division by zero")
HUH = format_tool_step("act", "dance wildly", "I don't understand that.")
WON = format_tool_step("act", "eat meal", "You eat the meal. Delicious!\n\n*** The End ***")
LOST = format_tool_step("act", "eat knife", "You eat the knife. Not a great idea.\n\n*** You lost! ***")


def test_rules():
    v = VerifierCritic()
    steps = [TextStep("cook", (), OK), TextStep("cook", (OK,), ERR), TextStep("cook", (OK,), HUH),
             TextStep("cook", (OK, OK), WON), TextStep("cook", (OK,), LOST), TextStep("cook", (OK, LOST), OK)]
    out = check_critic(v, steps)
    np.testing.assert_allclose(out.success, [0.5, 0.2, 0.2, 1.0, 0.0, 0.0])
    assert out.extra["error"].tolist() == [0, 1, 1, 0, 0, 0]
    assert out.extra["won"].tolist() == [0, 0, 0, 1, 0, 0]
    assert out.extra["lost"].tolist() == [0, 0, 0, 0, 1, 1]  # a loss earlier ends the game
    assert out.progress[3] == 1.0
    # progress heuristic: distinct non-error steps n_ok / (n_ok + 10)
    assert out.progress[0] == pytest.approx(1 / 11)
    assert out.progress[1] == pytest.approx(1 / 11)  # the error step does not count


def test_patterns_only_look_at_the_result():
    v = VerifierCritic()
    # the call arguments mention an error, the result is fine
    step = format_tool_step("search", {"q": "ValueError: how to fix"}, "3 results found")
    assert not v.is_error(step)
    assert result_text(step) == "3 results found"
    assert v.is_error("error: file not found")  # a bare result text


def test_explicit_feedback_overrides_patterns():
    v = VerifierCritic()
    s = [TextStep("t", (), OK), TextStep("t", (), ERR), TextStep("t", (), OK)]
    out = v.score(s, feedback=[{"won": True}, {"error": False, "score": 3, "max_score": 4}, {"lost": True, "progress": 0.4}])
    np.testing.assert_allclose(out.success, [1.0, 0.5, 0.0])
    np.testing.assert_allclose(out.progress, [1.0, 0.75, 0.4])


def test_configurable_patterns():
    v = VerifierCritic(error_patterns=[r"^nope"], won_patterns=[r"DONE"], error_success=0.1)
    out = v.score([TextStep("t", (), "result: nope, not here"), TextStep("t", (), ERR), TextStep("t", (), "result: DONE")])
    np.testing.assert_allclose(out.success, [0.1, 0.5, 1.0])


def test_errors():
    v = VerifierCritic()
    with pytest.raises(ValueError, match=r"error_patterns\[0\]: invalid regex '\('"):
        VerifierCritic(error_patterns=["("])
    with pytest.raises(TypeError, match=r"won_patterns: expected a sequence of regex strings, got str"):
        VerifierCritic(won_patterns="The End")
    with pytest.raises(ValueError, match=r"error_success: expected a float in \[0, 1\], got 1.5"):
        VerifierCritic(error_success=1.5)
    with pytest.raises(ValueError, match=r"feedback: expected None or a sequence of 1 mappings \(one per step\), got 2 items"):
        v.score([TextStep("t", (), OK)], feedback=[{}, {}])
    with pytest.raises(ValueError, match=r"feedback\[0\]: unknown key\(s\) \['win'\]"):
        v.score([TextStep("t", (), OK)], feedback=[{"win": True}])
    with pytest.raises(TypeError, match=r"feedback\[0\]\['won'\]: expected a bool, got 'yes'"):
        v.score([TextStep("t", (), OK)], feedback=[{"won": "yes"}])
    with pytest.raises(ValueError, match=r"feedback\[0\]: expected 0 <= score <= max_score"):
        v.score([TextStep("t", (), OK)], feedback=[{"score": 5, "max_score": 4}])
    with pytest.raises(ValueError, match=r"steps: expected a non-empty batch"):
        v.score([])
    with pytest.raises(TypeError, match=r"steps\[0\]: expected TextStep, got str"):
        v.score([OK])
