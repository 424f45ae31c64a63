"""A LangGraph tool-using agent for TextWorld cooking games, Monte-Carlo step labels and search.

Not part of the installed library (``prm_critic`` never imports from here); run from the repo root.
"""

from agents.textworld_agent.env import DEFAULT_DIFFICULTY, Difficulty, TextWorldGame, ensure_game, game_path
from agents.textworld_agent.policy import BasePolicy
from agents.textworld_agent.text import step_text

__all__ = ["DEFAULT_DIFFICULTY", "Difficulty", "TextWorldGame", "ensure_game", "game_path", "BasePolicy", "step_text"]
