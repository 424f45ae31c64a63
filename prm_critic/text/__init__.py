"""Text side of prm-critic: step contract, text critics, TRL stepwise format."""

from prm_critic.text.steps import TextStep, format_tool_step

__all__ = ["TextStep", "format_tool_step"]
