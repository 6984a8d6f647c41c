"""Post-hoc reward level and timing (the paper's Table 4): the same sampled traces re-ranked after
decoding by an outcome reward, or by process rewards aggregated over each trace's steps.

A record takes part when it carries every sampled trace with its rewards::

    "samples": [{"answer": "B", "rewards": [0.9, 0.4, 0.8], "outcome": 0.7}, ...]

``rewards`` are the process reward of each step (read without steering the search), ``outcome`` the
outcome reward of the whole trace (optional: the outcome row needs it). Online PRA, by contrast,
ranks partial traces while decoding; its accuracy comes from the PRA run itself.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Any, Sequence

from search.aggregation import aggregate_rewards
from pra.errors import UserError

AGGREGATES = ("last", "min", "max", "mean")     # the report's post-hoc rows (search.aggregation has more)
LEVELS = ("vote", "outcome", *AGGREGATES)       # vote: majority over the same samples, no reward


def has_samples(record: dict[str, Any]) -> bool:
    samples = record.get("samples")
    return bool(samples) and all("answer" in s and s.get("rewards") for s in samples)


def has_outcome(record: dict[str, Any]) -> bool:
    return has_samples(record) and all(s.get("outcome") is not None for s in record["samples"])


def pick(samples: Sequence[dict[str, Any]], how: str) -> str:
    """The answer of the best sample under ``how`` (ties: the earliest sample, as the engine's vote)."""
    if how == "vote":
        return Counter(s["answer"] for s in samples).most_common(1)[0][0]
    score = (lambda s: s["outcome"]) if how == "outcome" else (lambda s: aggregate_rewards(s["rewards"], how))
    best = max(range(len(samples)), key=lambda i: (score(samples[i]), -i))
    return samples[best]["answer"]


def posthoc_accuracy(records: Sequence[dict[str, Any]], how: str) -> tuple[float, float, int]:
    """(accuracy, standard error, n) of re-ranking each record's samples by ``how``; ``gold`` is the
    record's gold letter. Records without the needed rewards are an error: mixing would bias n."""
    need = has_outcome if how == "outcome" else has_samples
    for r in records:
        if not need(r):
            raise UserError(f"record {r.get('id')!r} lacks the sampled traces' "
                             f"{'outcome' if how == 'outcome' else 'step'} rewards")
    n = len(records)
    if n == 0:
        return 0.0, 0.0, 0
    acc = sum(pick(r["samples"], how) == r["gold"] for r in records) / n
    return acc, math.sqrt(acc * (1 - acc) / n), n
