"""Analysing runs: what reads finished run folders (the report, paired comparisons, trajectory quality,
error injection, post-hoc rewards, the trace viewer). It may import the runner, ``eval``; the runner
never imports it (tests/test_layers.py)."""
