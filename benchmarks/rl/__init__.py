"""Reinforcement-learning benchmarks (``python -m benchmarks.rl.report``; ``benchmarks/rl/run.py`` also runs by path)."""
