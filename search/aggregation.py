"""How a trace's step rewards become one score to rank it by (search-and-learn's ``agg_strategy``).

``sum`` is the paper's: with rewards in [0, 1] it favours longer traces over finished ones. ``mean``,
``last``, ``min`` and ``prod`` are what PRM practice uses; ``max`` is the optimistic bound.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

AGGREGATIONS: dict[str, Callable[[Sequence[float]], float]] = {
    "sum": sum,
    "mean": lambda r: sum(r) / len(r),
    "last": lambda r: r[-1],
    "min": min,
    "max": max,
    "prod": math.prod,
}


def aggregate_rewards(rewards: Sequence[float], how: str) -> float:
    """One trace's step rewards -> its score under ``how``."""
    if how not in AGGREGATIONS:
        raise ValueError(f"unknown reward aggregation {how!r}; choose one of {', '.join(AGGREGATIONS)}")
    if not rewards:
        raise ValueError("a trace without step rewards cannot be aggregated")
    return AGGREGATIONS[how](rewards)
