"""Text side of prm-critic: step contract, text critics, TRL stepwise format.

Import-light: torch / transformers / langchain are imported only when a critic that needs them is
first accessed (``prm_critic.text.MiniLMStepPRM`` etc. resolve lazily).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prm_critic._lazy import lazy_exports
from prm_critic.text.contract import (
    Encoded,
    StepContract,
    TokenLayout,
    block_causal_mask,
    check_text_steps,
    pad_batch,
)
from prm_critic.text.critic import TextCritic
from prm_critic.text.fencing import DEFAULT_MAX_UNTRUSTED_CHARS, fence_untrusted
from prm_critic.text.steps import TextStep, clean_text, format_tool_call, format_tool_step, message_text
from prm_critic.text.trl_format import (
    StepwiseExample,
    from_columns,
    read_stepwise_jsonl,
    to_columns,
    write_stepwise_jsonl,
)

if TYPE_CHECKING:  # the lazy names below, for type checkers
    from prm_critic.text.implicit import (ImplicitPRM as ImplicitPRM, outcome_examples as outcome_examples,
                                          prompt_value_examples as prompt_value_examples)
    from prm_critic.text.judge import (LLMJudgeCritic as LLMJudgeCritic,
                                       score_response_format as score_response_format)
    from prm_critic.text.lm_prm import (StepTagLMPRM as StepTagLMPRM, verify_lm_prm_folder as verify_lm_prm_folder,
                                        write_lm_prm_manifest as write_lm_prm_manifest)
    from prm_critic.text.net import StepPRMNet as StepPRMNet
    from prm_critic.text.prm import (MiniLMStepPRM as MiniLMStepPRM, TokenClassificationPRM as TokenClassificationPRM)
    from prm_critic.text.train import (TextTrainConfig as TextTrainConfig, train_text_prm as train_text_prm)
    from prm_critic.text.verifier import VerifierCritic as VerifierCritic

_LAZY = {
    "MiniLMStepPRM": "prm_critic.text.prm",
    "TokenClassificationPRM": "prm_critic.text.prm",
    "StepTagLMPRM": "prm_critic.text.lm_prm",
    "write_lm_prm_manifest": "prm_critic.text.lm_prm",
    "verify_lm_prm_folder": "prm_critic.text.lm_prm",
    "StepPRMNet": "prm_critic.text.net",
    "train_text_prm": "prm_critic.text.train",
    "TextTrainConfig": "prm_critic.text.train",
    "LLMJudgeCritic": "prm_critic.text.judge",
    "score_response_format": "prm_critic.text.judge",
    "ImplicitPRM": "prm_critic.text.implicit",
    "outcome_examples": "prm_critic.text.implicit",
    "prompt_value_examples": "prm_critic.text.implicit",
    "VerifierCritic": "prm_critic.text.verifier",
}

__all__ = [
    "TextStep",
    "TextCritic",
    "format_tool_call",
    "format_tool_step",
    "clean_text",
    "message_text",
    "fence_untrusted",
    "DEFAULT_MAX_UNTRUSTED_CHARS",
    "StepContract",
    "TokenLayout",
    "Encoded",
    "pad_batch",
    "block_causal_mask",
    "check_text_steps",
    "StepwiseExample",
    "read_stepwise_jsonl",
    "write_stepwise_jsonl",
    "to_columns",
    "from_columns",
    *_LAZY,
]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
