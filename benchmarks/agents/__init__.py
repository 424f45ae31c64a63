"""TextWorld agent benchmarks (``python -m benchmarks.agents.run``, ``python -m benchmarks.agents.report``)."""
