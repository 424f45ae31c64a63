"""Types of the public API, and the lazy optional imports behind them.

* mypy on user code: one snippet that must type-check, one whose marked lines must each be
  rejected (a text batch given to a state critic and the other way round, ...). Skips without mypy.
* The modules whose classes derive from an optional dependency import it normally (so a type
  checker sees the base class), and still fail with the exact ``pip install "prm-critic[extra]"``
  when it is missing (checked in a subprocess with the dependency blocked).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from prm_critic._optional import _EXTRA_OF, install_hint

ROOT = Path(__file__).resolve().parents[1]

GOOD = '''
from typing import Sequence

import numpy as np
import numpy.typing as npt

from prm_critic import BaseCritic, StateCritic, StepScores, check_critic
from prm_critic.critic import as_obs_batch
from prm_critic.onnx import OnnxCritic
from prm_critic.text import TextCritic, TextStep


class Ones(StateCritic):
    def __init__(self, obs_dim: int) -> None:
        self.obs_dim = obs_dim

    def score(self, steps: npt.ArrayLike) -> StepScores:
        n = as_obs_batch(steps, self.obs_dim).shape[0]
        return StepScores(np.ones(n, np.float32), np.ones(n, np.float32))


class Lengths(TextCritic):
    def score(self, steps: Sequence[TextStep]) -> StepScores:
        v = np.array([min(len(s.step), 10) / 10 for s in steps], np.float32)
        return StepScores(v, v)


def potentials(critic: BaseCritic[np.ndarray], x: np.ndarray) -> np.ndarray:
    return critic.potential(x)


def any_critic(critic: BaseCritic) -> int:
    return 0 if critic.obs_dim is None else critic.obs_dim


x = np.zeros((2, 3), np.float32)
state = Ones(3)
text = Lengths()
steps = TextStep.prefixes("go", ["a", "bb"])

p: np.ndarray = potentials(state, x)
width: int = state.obs_dim
checked: StepScores = check_critic(state, x)
checked_text: StepScores = check_critic(text, steps)
s: np.ndarray = text.score(steps).success
n: int = any_critic(state) + any_critic(text)


def deploy(path: str) -> float:
    critic = OnnxCritic(path)
    width: int = critic.obs_dim
    return float(critic.score(x).success[0]) + width
'''

BAD = '''
import numpy as np

from prm_critic import BaseCritic, StateCritic, StepScores
from prm_critic.models import TorchStateCritic
from prm_critic.onnx import OnnxCritic
from prm_critic.text import TextCritic, TextStep


def potentials(critic: BaseCritic[np.ndarray], x: np.ndarray) -> np.ndarray:
    return critic.potential(x)


def run(state: StateCritic, text: TextCritic, onnx: OnnxCritic, torch_critic: TorchStateCritic) -> None:
    x = np.zeros((2, 3), np.float32)
    steps = TextStep.prefixes("go", ["a", "bb"])
    state.score(steps)  # expect-error
    onnx.score(steps)  # expect-error
    torch_critic.score(steps)  # expect-error
    text.score(x)  # expect-error
    text("one step")  # expect-error
    potentials(text, x)  # expect-error
    width: int = text.obs_dim  # expect-error
    scores: np.ndarray = state.score(x)  # expect-error
'''


def _mypy_errors(tmp_path: Path) -> tuple[str, dict[str, set[int]]]:
    pytest.importorskip("mypy", reason="mypy is not installed (it is in the dev extra)")
    good, bad = tmp_path / "good_usage.py", tmp_path / "bad_usage.py"
    good.write_text(textwrap.dedent(GOOD))
    bad.write_text(textwrap.dedent(BAD))
    cache = Path(tempfile.gettempdir()) / "prm-critic-test-mypy-cache"
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(cache),
         "--no-error-summary", "--show-error-codes", str(good), str(bad)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    errors: dict[str, set[int]] = {}
    for line in out.stdout.splitlines():
        m = re.match(r"(.+?):(\d+): error:", line)
        if m:
            errors.setdefault(Path(m.group(1)).name, set()).add(int(m.group(2)))
    if out.returncode not in (0, 1) or (out.returncode == 1 and not errors):
        pytest.fail(f"mypy did not run (exit {out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out.stdout, errors


def test_public_api_types_flow_through_user_code(tmp_path):
    report, errors = _mypy_errors(tmp_path)
    assert "good_usage.py" not in errors, f"correct use of the public API is rejected:\n{report}"
    expected = {i for i, line in enumerate(textwrap.dedent(BAD).splitlines(), start=1) if "# expect-error" in line}
    assert len(expected) == 8
    assert errors.get("bad_usage.py", set()) == expected, (
        f"expected errors exactly on lines {sorted(expected)} of bad_usage.py:\n{report}"
    )


def test_critic_bases_keep_runtime_behaviour():
    import numpy as np

    from prm_critic import BaseCritic, StateCritic, StepScores, check_critic
    from prm_critic.text import TextCritic, TextStep

    class Half(StateCritic):
        obs_dim = 2

        def score(self, steps):
            n = np.asarray(steps).shape[0]
            return StepScores(np.full(n, 0.5), np.full(n, 0.5))

    c = Half()
    assert isinstance(c, BaseCritic) and not isinstance(c, TextCritic)
    assert check_critic(c, np.zeros((3, 2))).progress.tolist() == [0.5, 0.5, 0.5]
    assert BaseCritic[np.ndarray] is not BaseCritic  # subscripting works at runtime
    with pytest.raises(TypeError, match="abstract"):
        TextCritic()  # type: ignore[abstract]
    assert TextCritic.obs_dim is None
    assert TextStep("p", (), "s").step == "s"


def _run_blocked(blocked: str, code: str) -> subprocess.CompletedProcess:
    prog = f"import sys\nsys.modules[{blocked!r}] = None\n" + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", prog], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})


@pytest.mark.parametrize("blocked, stmt", [
    ("torch", "from prm_critic.text import StepPRMNet"),
    ("torch", "from prm_critic.text.prm import StepPRMNet"),
    ("torch", "import prm_critic.text.net"),
    ("gymnasium", "from prm_critic.wrappers import PRMRewardShaper"),
    ("gymnasium", "from prm_critic.wrappers import DeadEndPruner"),
    ("gymnasium", "import prm_critic.robotics.make"),
    ("stable_baselines3", "from prm_critic.sb3 import SB3VecPRMRewardShaper"),
    ("stable_baselines3", "import prm_critic.sb3.callbacks"),
    ("stable_baselines3", "import prm_critic.sb3.monitor"),
    ("stable_baselines3", "import prm_critic.sb3.refresh"),
    ("stable_baselines3", "import prm_critic.sb3.resume"),
])
def test_missing_dependency_names_the_exact_install_command(blocked, stmt):
    extra = _EXTRA_OF.get(blocked, "all")
    out = _run_blocked(blocked, f"""
        try:
            {stmt}
        except ImportError as exc:
            print("ERR", exc)
        else:
            print("IMPORTED")
    """)
    assert out.returncode == 0, out.stderr
    assert install_hint(extra) in out.stdout, (stmt, out.stdout, out.stderr)
    assert repr(blocked) in out.stdout, out.stdout


def test_text_critics_import_without_torch():
    """The text PRM module (its loaders, checks and the ONNX text critic's helpers) needs torch only
    for the network itself."""
    out = _run_blocked("torch", """
        import prm_critic.text.prm as prm
        from prm_critic.onnx.text import OnnxTextCritic
        from prm_critic.text import MiniLMStepPRM, TextCritic, VerifierCritic
        assert issubclass(MiniLMStepPRM, TextCritic) and issubclass(OnnxTextCritic, TextCritic)
        assert issubclass(VerifierCritic, TextCritic)
        assert "torch" not in [m for m in sys.modules if sys.modules[m] is not None]
        print("OK", prm.check_text_steps.__name__)
    """)
    assert out.returncode == 0, out.stderr
    assert "OK check_text_steps" in out.stdout
