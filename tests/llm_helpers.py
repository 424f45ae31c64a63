"""Shared skips for the tests of the local model server (the ``llm`` extra and the packaged SmolLM2).

A missing package skips with the command that installs it; a model file that is installed but
damaged is not skipped: ``smollm2_path()`` raises and the test fails.
"""

from __future__ import annotations

import importlib.util

import pytest

from prm_critic._optional import install_command

LLM_EXTRA = install_command("llm")


def require_llm_extra() -> None:
    for mod in ("xllamacpp", "langchain_openai"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"needs {mod} (the llm extra): {LLM_EXTRA}")


def smollm2():
    """The verified path of the packaged SmolLM2 GGUF, or a skip naming the install command."""
    require_llm_extra()
    from prm_critic.llm.server import SMOLLM2, smollm2_path

    if importlib.util.find_spec(SMOLLM2.module) is None:
        pytest.skip(f"needs the packaged SmolLM2 model: {SMOLLM2.install}")
    return smollm2_path()
