"""Packaging and repository hygiene faults: what an installation exposes, Python 3.10's TOML
reader, and results docs that must be what their scripts wrote."""

from __future__ import annotations

import argparse

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from faults import correct, loud

pytestmark = pytest.mark.fault

REPO = Path(__file__).resolve().parents[1]
SPEC_PY = REPO / "prm_critic" / "robotics" / "spec.py"

try:
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10
    import tomli as tomllib


# --------------------------------------------------------------------------------------------
# What an installation puts on sys.path
# --------------------------------------------------------------------------------------------

#: Run with the installed interpreter from an empty folder: where do these names resolve?
_PROBE = """
import importlib.util, json
out = {}
for name in ("prm_critic", "agents", "export", "benchmarks", "tests"):
    spec = importlib.util.find_spec(name)
    if spec is None:
        out[name] = None
    else:
        out[name] = [spec.origin] + list(spec.submodule_search_locations or [])
print(json.dumps(out))
"""


def _checkout_of(path: str | None) -> Path | None:
    """The prm-critic source checkout holding ``path``, if any."""
    if not path:
        return None
    for parent in Path(path).resolve().parents:
        pyproject = parent / "pyproject.toml"
        if pyproject.is_file():
            try:
                name = tomllib.loads(pyproject.read_text()).get("project", {}).get("name")
            except (OSError, tomllib.TOMLDecodeError):
                return None
            return parent if name == "prm-critic" else None
    return None


def test_installation_exposes_only_prm_critic(tmp_path):
    """An (editable) install must not make the repository's app folders importable from anywhere:
    ``import agents`` in another project must not pick up this repository's ``agents/``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    installed = found["prm_critic"]
    home = _checkout_of(installed[0] if installed else None)
    if home is not None and home != REPO:
        pytest.skip(f"this interpreter's prm_critic is installed from another checkout ({home})")
    leaked = {}
    for name in ("agents", "export", "benchmarks", "tests"):
        for path in found[name] or []:
            if _checkout_of(path) is not None:
                leaked[name] = path
    assert not leaked, (
        f"the installed prm-critic exposes the repository's app folders as top-level packages: {leaked}; "
        "expected only `prm_critic` (reinstall with `pip install -e .` to get the exact editable mapping)"
    )
    correct(15, "`import agents` from another folder with prm-critic installed",
            "the repository's agents/, export/, benchmarks/ and tests/ are not importable; prm_critic is")


def test_packaging_config_maps_only_the_package():
    """The build configuration behind the test above: the wheel holds ``prm_critic`` only, editable
    installs map that package exactly (no project root on sys.path), and nothing is force-included
    into ``prm_critic/`` of an editable install (an empty ``prm_critic/_specs`` folder in
    site-packages would shadow the mapping as a namespace package)."""
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    wheel = data["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel["packages"] == ["prm_critic"]
    assert wheel.get("dev-mode-exact") is True, "editable installs would put the project root on sys.path"
    assert "dev-mode-dirs" not in wheel
    assert not wheel.get("force-include"), "force-include also lands in editable installs"
    assert "pythonpath" in data["tool"]["pytest"]["ini_options"], "tests import agents/ and benchmarks/ from the root"
    deps = data["project"]["dependencies"]
    assert any(d.replace(" ", "").startswith("tomli>=2;python_version<'3.11'") for d in deps), deps
    correct(15, "editable install of the project", "maps exactly `prm_critic`; tomli declared for Python 3.10")


# --------------------------------------------------------------------------------------------
# Python 3.10: no tomllib in the standard library
# --------------------------------------------------------------------------------------------

_NO_TOMLLIB = """
import sys, types, tomllib as _real
# SIMULATION of Python 3.10: the standard library has no tomllib; the `tomli` backport (same API)
# is installed as the declared dependency.
backport = types.ModuleType("tomli")
backport.load, backport.loads, backport.TOMLDecodeError = _real.load, _real.loads, _real.TOMLDecodeError
sys.modules["tomli"] = backport
sys.modules["tomllib"] = None   # `import tomllib` now raises ImportError
import prm_critic.robotics as robotics
spec = robotics.load_spec("FetchReach-v4")
print(robotics.spec.tomllib.__name__, spec.name, len(robotics.list_builtin_specs()))
"""


def test_robotics_imports_without_tomllib_simulated_py310():
    """SIMULATION (this interpreter has tomllib): block ``tomllib`` in ``sys.modules`` in a
    subprocess, provide a ``tomli`` stand-in, and import ``prm_critic.robotics``."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", _NO_TOMLLIB], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    reader, name, count = proc.stdout.split()
    assert reader == "tomli"
    assert name == "FetchReach-v4" and int(count) > 1
    correct(15, "Python 3.10 (simulated: tomllib blocked)", "prm_critic.robotics imports and loads specs via tomli")


def test_robotics_without_any_toml_reader_says_what_to_install(monkeypatch):
    """SIMULATION: neither ``tomllib`` nor ``tomli``: the import fails naming the missing backport.
    The module is loaded under a private name so the real one is untouched."""
    monkeypatch.setitem(sys.modules, "tomllib", None)
    monkeypatch.setitem(sys.modules, "tomli", None)
    spec = importlib.util.spec_from_file_location("_prm_spec_without_toml", SPEC_PY)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "_prm_spec_without_toml", module)
    with loud(15, "Python 3.10 without the tomli backport (simulated)", ImportError, match=r'pip install "tomli>=2"'):
        spec.loader.exec_module(module)



# --------------------------------------------------------------------------------------------
# One default per setting: the CLI trains what the library trains
# --------------------------------------------------------------------------------------------


def test_train_critic_cli_uses_the_library_defaults(monkeypatch, tmp_path):
    """``prm-critic train-critic`` with no tuning options must train with ``TrainConfig()`` and
    the library's holdout, not with values of its own."""
    import inspect

    from prm_critic.cli import main
    from prm_critic.models import pipeline as cmd
    from prm_critic.models.train import TrainConfig

    seen = {}

    def capture(data, label, out, *, config, holdout=inspect.signature(cmd.train_critic_from_data).parameters["holdout"].default,
                split_seed=None, progress_bar=True, overwrite=False):
        seen.update(config=config, holdout=holdout, split_seed=split_seed)
        raise KeyError("stop after the configuration")  # the CLI turns it into exit code 2

    monkeypatch.setattr(cmd, "train_critic_from_data", capture)
    rc = main(["train-critic", "--data", str(tmp_path), "--label", "mc", "--out", str(tmp_path / "c"), "--no-progress"])
    assert rc == 2 and seen, "train_critic_from_data was not reached"
    lib = TrainConfig()
    assert seen["config"].to_dict() == lib.to_dict(), {
        k: (v, lib.to_dict()[k]) for k, v in seen["config"].to_dict().items() if v != lib.to_dict()[k]}
    assert seen["holdout"] == inspect.signature(cmd.train_critic_from_data).parameters["holdout"].default
    assert seen["split_seed"] == lib.seed  # the split seed defaults to the training seed
    correct(16, "train-critic with default options", "trains with TrainConfig() (pairwise weight "
            f"{lib.pairwise_weight}) and the library's holdout")


@pytest.mark.fault_outcome(16, 'train-critic options given on the command line',
                           "reach the library's TrainConfig unchanged")
def test_train_critic_cli_options_reach_the_config(monkeypatch, tmp_path):
    from prm_critic.cli import main
    from prm_critic.models import pipeline as cmd

    seen = {}

    def capture(data, label, out, *, config, split_seed=None, progress_bar=True, **kw):
        seen.update(config=config, split_seed=split_seed, **kw)
        raise KeyError("stop")

    monkeypatch.setattr(cmd, "train_critic_from_data", capture)
    main(["train-critic", "--data", str(tmp_path), "--label", "mc", "--out", str(tmp_path / "c"), "--epochs", "3",
          "--pairwise-weight", "0", "--hidden", "8,4", "--holdout", "0.3", "--seed", "5"])
    cfg = seen["config"]
    assert (cfg.epochs, cfg.pairwise_weight, cfg.hidden, cfg.seed) == (3, 0.0, (8, 4), 5)
    assert seen["holdout"] == 0.3 and seen["split_seed"] == 5


@pytest.mark.parametrize("command, module, function", [
    ("label", "prm_critic.robotics.labels", "label"),
    ("collect", "prm_critic.robotics.collection", "collect"),
    ("train-policy", "prm_critic.sb3.train", "TrainPolicyConfig"),
])
def test_cli_defaults_equal_library_defaults(command, module, function):
    """Every option of a command that maps to a parameter of the library function it calls (or a field
    of the config it takes) has the library's default (``--n-envs`` -> ``n_envs``)."""
    import ast

    from prm_critic.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    # the library function's defaults, read from its source (no heavy import needed)
    path = Path(importlib.util.find_spec(module).origin)
    fn = next(n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, (ast.FunctionDef, ast.ClassDef))
              and n.name == function)

    def value(d):
        # a literal, or a module-level constant such as DEFAULT_BACKEND (then read from the module)
        return getattr(importlib.import_module(module), d.id) if isinstance(d, ast.Name) else ast.literal_eval(d)

    if isinstance(fn, ast.ClassDef):  # a config dataclass: its fields' defaults
        lib = {a.target.id: value(a.value) for a in fn.body if isinstance(a, ast.AnnAssign) and a.value is not None}
    else:
        args, lib = fn.args, {}
        pos = args.posonlyargs + args.args
        for a, d in zip(pos[len(pos) - len(args.defaults):], args.defaults):
            lib[a.arg] = value(d)
        for a, d in zip(args.kwonlyargs, args.kw_defaults):
            if d is not None:
                lib[a.arg] = value(d)
    checked = {}
    for action in sub._actions:
        if action.dest in lib and action.default is not None:
            checked[action.dest] = (action.default, lib[action.dest])
    assert checked, f"{command}: no option maps to a parameter of {module}.{function}"
    drift = {k: v for k, v in checked.items() if v[0] != v[1]}
    assert not drift, f"{command}: CLI default differs from {module}.{function} (cli, library): {drift}"
    correct(16, f"`prm-critic {command}` defaults", f"equal the library's for {sorted(checked)}")


@pytest.mark.parametrize("command, module, function", [
    (("export",), "prm_critic.onnx.export", "export_state_critic"),
    (("export",), "prm_critic.onnx.export", "export_subgoal_critic"),
    (("minari", "export"), "prm_critic.robotics.minari", "export_minari"),
    (("minari", "import"), "prm_critic.robotics.minari", "import_minari"),
])
def test_more_cli_defaults_equal_library_defaults(command, module, function):
    """The other commands whose options mirror a library parameter (``--opset`` -> ``opset``,
    ``--shard-size`` -> ``shard_size``) have the library's default, read from its signature."""
    import importlib
    import inspect

    from prm_critic.cli import build_parser

    sub = build_parser()
    for name in command:
        sub = next(a for a in sub._actions if getattr(a, "choices", None) and name in a.choices).choices[name]
    fn = getattr(importlib.import_module(module), function)
    lib = {k: p.default for k, p in inspect.signature(fn).parameters.items() if p.default is not inspect.Parameter.empty}
    checked = {a.dest: (a.default, lib[a.dest]) for a in sub._actions
               if a.dest in lib and a.default is not None and a.default is not argparse.SUPPRESS}
    assert checked, f"{' '.join(command)}: no option maps to a parameter of {module}.{function}"
    norm = lambda v: list(v) if isinstance(v, (list, tuple)) else v
    drift = {k: v for k, v in checked.items() if norm(v[0]) != norm(v[1])}
    assert not drift, f"{' '.join(command)}: CLI default differs from {module}.{function} (cli, library): {drift}"
    correct(16, f"`prm-critic {' '.join(command)}` defaults", f"equal {function}'s for {sorted(checked)}")


# --------------------------------------------------------------------------------------------
# The repository speaks of the project only
# --------------------------------------------------------------------------------------------

_TEXT = {".py", ".md", ".toml", ".txt", ".cfg", ".ini", ".yaml", ".yml", ".json", ".csv", ""}
#: Development-history phrasing: who ran what when and what never completed (split so this file does not match itself).
_HISTORY = [
    r"\bsess" r"ion[- _]?\d", r"\bin (this|that|the) sess" r"ion\b", r"\bclos" r"ing note", r"\brehear" r"sal\b",
    r"\bthis run star" r"ted\b", r"\bdid not fin" r"ish\b", r"\bwas lo" r"st\b", r"\bfor lack of ti" r"me\b",
    r"\bissue #\d", r"\(dra" r"ft\)",
]


def _tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True, timeout=60).stdout
        files = [REPO / line for line in out.splitlines()]
    except (OSError, subprocess.CalledProcessError):
        files = [p for p in REPO.rglob("*") if p.is_file() and ".git" not in p.parts]
    return [p for p in files if p.suffix in _TEXT and p.is_file() and p.stat().st_size < 2_000_000]


#: a tokenizer's vocabulary (committed beside a head-only text PRM) is the encoder's token list, not project prose
_VOCABULARY = {"tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"}


def test_no_development_history_in_the_repository():
    import re

    pattern = re.compile("|".join(_HISTORY), re.IGNORECASE)
    hits = []
    for path in _tracked_text_files():
        if path.name in _VOCABULARY:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            m = pattern.search(line)
            if m:
                hits.append(f"{path.relative_to(REPO)}:{n}: {m.group(0)!r} in {line.strip()[:120]!r}")
    assert not hits, "development-history notes in the repository (keep design notes; history belongs in CHANGELOG.md):\n" + "\n".join(hits[:40])
    assert not list((REPO / "docs").rglob("*-closing.md"))
    correct(17, "development-history notes in docs, benchmarks and code",
            "none in the tracked files; user-facing history lives in CHANGELOG.md")
