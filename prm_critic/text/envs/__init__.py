"""Forkable text environments: the protocol, TextWorld and TextWorldExpress, environments by name,
and the Monte-Carlo step labeller on them.

Import-light: TextWorld and TextWorldExpress are imported when their environment is made.
"""

from __future__ import annotations

from prm_critic.text.envs.base import (
    ForkMismatchError,
    SamplingPolicy,
    TextEnv,
    TextPolicy,
    TextStepResult,
    check_fork,
)
from prm_critic.text.envs.registry import (
    TextEnvSpec,
    make_text_env,
    parse_env_spec,
    register_text_env,
    text_env_kinds,
)
from prm_critic.text.envs.textworld import TextWorldEnv, clean_feedback, ensure_tw_game
from prm_critic.text.envs.twx import TWX_GAMES, JavaMissingError, TWXEnv, twx_fold

__all__ = [
    "TextStepResult", "TextEnv", "TextPolicy", "SamplingPolicy", "ForkMismatchError", "check_fork",
    "TextEnvSpec", "register_text_env", "text_env_kinds", "make_text_env", "parse_env_spec",
    "TextWorldEnv", "clean_feedback", "ensure_tw_game",
    "TWXEnv", "TWX_GAMES", "twx_fold", "JavaMissingError",
]
