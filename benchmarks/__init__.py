"""The project's benchmark scripts, run from the repository root as modules
(``python -m benchmarks.critic_refresh --render``, ``python -m benchmarks.agents.report --render``).

Shared by them: :mod:`benchmarks.stats` (the statistics) and :mod:`benchmarks.report_io` (writing raw
data and results docs). Not part of the installed library.
"""
