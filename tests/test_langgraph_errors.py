"""Bad input to the LangGraph integration: one clear error naming the parameter and the value."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("langgraph")

from fakes import KeywordCritic  # noqa: E402

from prm_critic.critic import BaseCritic, StepScores  # noqa: E402
from prm_critic.langgraph import (  # noqa: E402
    PRMBestOfNMiddleware,
    PRMStepScoringMiddleware,
    StepCriticNode,
    build_beam_search_graph,
    critic_router,
)

CRITIC = KeywordCritic([("x", 0.5, 0.5)])


def expand(state, history, k):
    return []


@pytest.mark.parametrize("kwargs, exc, pattern", [
    ({"threshold": "0.5"}, TypeError, r"threshold: expected a float in \[0, 1\], got str '0.5'"),
    ({"threshold": 1.5}, ValueError, r"threshold: expected a float in \[0, 1\], got 1.5"),
    ({"max_revisions": 2.0}, TypeError, r"max_revisions: expected an int >= 0, got float 2.0"),
    ({"max_revisions": -1}, ValueError, r"max_revisions: expected an int >= 0, got -1"),
    ({"max_revisions": True}, TypeError, r"max_revisions: expected an int >= 0, got bool True"),
    ({"messages_key": 3}, TypeError, r"messages_key: expected a non-empty str, got int 3"),
    ({"prompt_key": ""}, TypeError, r"prompt_key: expected a non-empty str or None, got str ''"),
    ({"head": None}, TypeError, r"head: expected 'progress', 'success'"),
    ({"on_reject": "delete"}, ValueError, r"on_reject: expected one of \['remove', 'mark'\], got 'delete'"),
    ({"feedback": 5}, TypeError, r"feedback: expected a format str or None, got int 5"),
    ({"dead_end_threshold": 0.9}, ValueError, r"dead_end_threshold: expected <= threshold \(0.5\), got 0.9"),
])
def test_node_settings(kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern):
        StepCriticNode(CRITIC, **kwargs)


def test_critic_type_checked_everywhere():
    for make in (lambda c: StepCriticNode(c), lambda c: PRMBestOfNMiddleware(c),
                 lambda c: PRMStepScoringMiddleware(c), lambda c: build_beam_search_graph(expand, c)):
        with pytest.raises(TypeError, match=r"critic: expected a prm_critic.BaseCritic .* got str"):
            make("gpt-judge")


@pytest.mark.parametrize("make, exc, pattern", [
    (lambda: PRMBestOfNMiddleware(CRITIC, n=0), ValueError, r"n: expected an int >= 1, got 0"),
    (lambda: PRMBestOfNMiddleware(CRITIC, n="4"), TypeError, r"n: expected an int >= 1, got str '4'"),
    (lambda: PRMBestOfNMiddleware(CRITIC, accept_threshold=2), ValueError, r"accept_threshold: expected a float in \[0, 1\], got 2"),
    (lambda: PRMStepScoringMiddleware(CRITIC, on_low="stop"), ValueError, r"on_low: expected one of \['record', 'flag', 'end'\], got 'stop'"),
    (lambda: PRMStepScoringMiddleware(CRITIC, block_below="low"), TypeError, r"block_below: expected a float in \[0, 1\] or None, got str 'low'"),
    (lambda: build_beam_search_graph("expand", CRITIC), TypeError, r"expand: expected a callable"),
    (lambda: build_beam_search_graph(expand, CRITIC, beam_width=0), ValueError, r"beam_width: expected an int >= 1, got 0"),
    (lambda: build_beam_search_graph(expand, CRITIC, budget=2.5), TypeError, r"budget: expected an int or None >= 1, got float 2.5"),
    (lambda: build_beam_search_graph(expand, CRITIC, aggregate="max"), ValueError, r"aggregate: expected one of \['last', 'mean', 'min', 'product'\], got 'max'"),
    (lambda: build_beam_search_graph(expand, CRITIC, is_terminal=True), TypeError, r"is_terminal: expected a callable"),
    (lambda: build_beam_search_graph(expand, CRITIC, dead_end_threshold=-0.1), ValueError, r"dead_end_threshold: expected a float in \[0, 1\], got -0.1"),
    (lambda: critic_router(min_remaining_steps=1), ValueError, r"min_remaining_steps: expected an int >= 2, got 1"),
    (lambda: StepCriticNode(CRITIC, min_remaining_steps=1), ValueError, r"min_remaining_steps: expected an int >= 2, got 1"),
    (lambda: StepCriticNode(CRITIC, max_untrusted_chars=0), ValueError, r"max_untrusted_chars: expected an int >= 1, got 0"),
])
def test_other_settings(make, exc, pattern):
    with pytest.raises(exc, match=pattern):
        make()


def test_bad_expand_output_and_bad_critic_output_are_named():
    from langgraph.checkpoint.memory import InMemorySaver

    def bad_expand(state, history, k):
        return [("step", 1)] * (k + 1)

    g = build_beam_search_graph(bad_expand, CRITIC, branch_factor=2).compile(checkpointer=InMemorySaver())
    with pytest.raises(ValueError, match=r"expand: asked for at most k=2 proposals, got 3"):
        g.invoke({"prompt": "p", "root": 0}, {"configurable": {"thread_id": "1"}})

    class ShortCritic(BaseCritic):
        def score(self, steps):
            return StepScores(np.zeros(len(steps) + 1), np.zeros(len(steps) + 1))

    g = build_beam_search_graph(lambda s, h, k: [("a", 1)], ShortCritic()).compile()
    with pytest.raises(ValueError, match=r"critic.score: expected 1 scores \(one per step\), got 2"):
        g.invoke({"prompt": "p", "root": 0})
    with pytest.raises(KeyError, match="root"):
        g.invoke({"prompt": "p"})


def test_missing_dependency_names_the_install_command():
    code = ("import sys; sys.modules['langgraph'] = None\n"
            "try:\n    import prm_critic.langgraph\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    from prm_critic._optional import install_hint

    assert install_hint("agents") in out.stdout, out.stderr
