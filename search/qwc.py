"""MedTraj's quality-weighted context (``--method qwc``): k scored traces of training questions, the
k/2 of highest and the k/2 of lowest quality in a pool, shown with their values before the question;
then CoT as usual. The same examples precede every question, so the prefix cache computes them once.

A pool is JSON lines, one scored trace each (``pra runs qwc-pool`` makes one)::

    {"id": "QID/t0", "question_id": "QID", "question": "...", "options": {"A": "...", ...}, "gold": "B",
     "source": "medmcqa-train", "steps": ["...", ...], "answer": "B", "quality": 0.71}
"""
from __future__ import annotations

import json
from pathlib import Path

from pra.types import Question, ScoredTrace
from pra.errors import MissingFile, UserError

FIELDS = ("id", "question_id", "question", "options", "gold", "steps", "quality")


class PoolError(UserError):
    """A pool line the method cannot use: names the file, the line and the field."""


def _trace(row: dict, where: str) -> ScoredTrace:
    for key in FIELDS:
        if key not in row:
            raise PoolError(f"{where}: field {key!r} missing")
    quality = row["quality"]
    if not isinstance(quality, (int, float)) or not 0 <= quality <= 1:
        raise PoolError(f"{where}: field 'quality' must be a number in [0, 1], got {quality!r}")
    if not row["steps"] or not all(isinstance(s, str) and s.strip() for s in row["steps"]):
        raise PoolError(f"{where}: field 'steps' must be a list of non-empty strings")
    if row["gold"] not in row["options"]:
        raise PoolError(f"{where}: field 'gold' ({row['gold']!r}) is not one of the options")
    question = Question(row["question_id"], row["question"], row["options"], row["gold"], row.get("source", "pool"))
    return ScoredTrace(row["id"], question, tuple(row["steps"]), row.get("answer"), float(quality))


def load_pool(path: str | Path) -> list[ScoredTrace]:
    path = Path(path)
    if not path.exists():
        raise MissingFile(f"{path}: no qwc pool (make one with pra runs qwc-pool)")
    pool = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise PoolError(f"{path}:{lineno}: not valid JSON ({err.msg})") from None
        pool.append(_trace(row, f"{path}:{lineno}"))
    return pool


def select(pool: list[ScoredTrace], k: int = 2) -> tuple[ScoredTrace, ...]:
    """The k/2 highest-quality traces, best first, then the k/2 lowest, worst last (ties: pool order)."""
    if k < 2 or k % 2:
        raise UserError(f"qwc takes an even number of examples k >= 2 (k/2 high, k/2 low), got {k}")
    if len(pool) < k:
        raise UserError(f"the qwc pool holds {len(pool)} traces, fewer than k={k}")
    ranked = sorted(pool, key=lambda t: -t.quality)
    return tuple(ranked[:k // 2] + ranked[-(k // 2):])
