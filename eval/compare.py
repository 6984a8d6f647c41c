"""``pra compare RUN_A RUN_B [...]``: paired accuracy differences between runs on the same questions.

Records are matched by id, which names the question and its option rotation (``ID@rR``; rotation 0
is the plain id). For each pair of runs: the accuracy difference B - A on the matched records, a paired
bootstrap 95% CI (questions are resampled with all their rotations, since the rotations of one
question are not independent draws), and the exact McNemar p-value on the discordant records (b: A
right and B wrong, c: the reverse; two-sided binomial test of b against Bin(b + c, 1/2)). A difference
whose CI covers 0 is no gain.

An error-injection result (``python -m eval.inject ... --out FILE.json``) compares the same way: each
injected case is a record, right when the agent rated the injected step below the original, so two
agents' files give the paired difference in the share of errors they catch (cases resampled by question).
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from pra.errors import MissingFile, UserError
from pra.records import read_records
from pra.selection import split_id

BOOTSTRAP = 10_000


@dataclass(frozen=True)
class Comparison:
    a: str
    b: str
    n: int                 # matched records
    questions: int         # distinct questions among them
    accuracy_a: float
    accuracy_b: float
    difference: float      # accuracy_b - accuracy_a
    ci_low: float          # paired bootstrap 95% CI of the difference
    ci_high: float
    a_only: int            # records A got right and B wrong
    b_only: int
    mcnemar_p: float       # exact (binomial) McNemar p-value, two-sided

    @property
    def significant(self) -> bool:
        return self.ci_low > 0 or self.ci_high < 0


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: 2 x P(X <= min(b, c)), X ~ Bin(b + c, 1/2), capped at 1."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def paired_ci(correct_a: Sequence[bool], correct_b: Sequence[bool], groups: Sequence[str],
              seed: int = 0, rounds: int = BOOTSTRAP) -> tuple[float, float]:
    """95% percentile CI of mean(b) - mean(a), resampling whole groups (a question's rotations)."""
    index: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        index[g].append(i)
    diff = np.asarray(correct_b, float) - np.asarray(correct_a, float)
    sums = np.array([diff[ix].sum() for ix in index.values()])
    sizes = np.array([len(ix) for ix in index.values()], float)
    draws = np.random.default_rng(seed).integers(0, len(sums), size=(rounds, len(sums)))
    means = sums[draws].sum(1) / sizes[draws].sum(1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def compare_records(a: Iterable[dict[str, Any]], b: Iterable[dict[str, Any]], name_a: str = "A",
                    name_b: str = "B", seed: int = 0) -> Comparison:
    """The paired comparison of two runs' records (the last record of an id counts, as in summaries)."""
    a, b = list(a), list(b)
    by_a = {str(r["id"]): bool(r["correct"]) for r in a}
    by_b = {str(r["id"]): bool(r["correct"]) for r in b}
    group = {str(r["id"]): r.get("group") or split_id(r["id"])[0] for r in a}
    ids = [i for i in by_a if i in by_b]
    if not ids:
        raise UserError(f"{name_a} and {name_b} share no records (ids name question and rotation)")
    ca, cb = [by_a[i] for i in ids], [by_b[i] for i in ids]
    groups = [group[i] for i in ids]
    low, high = paired_ci(ca, cb, groups, seed)
    a_only = sum(x and not y for x, y in zip(ca, cb))
    b_only = sum(y and not x for x, y in zip(ca, cb))
    acc_a, acc_b = sum(ca) / len(ids), sum(cb) / len(ids)
    return Comparison(name_a, name_b, len(ids), len(set(groups)), acc_a, acc_b, acc_b - acc_a, low, high,
                      a_only, b_only, mcnemar_exact(a_only, b_only))


def injection_records(path: Path) -> list[dict[str, Any]]:
    """An error-injection result's cases as records: id (question, rotation, mode), its question as the
    bootstrap group, correct when the injected error was caught."""
    try:
        cases = json.loads(path.read_text())["cases"]
        return [{"id": f"{c['id']}:{c['mode']}", "group": split_id(c["id"])[0], "correct": bool(c["detected"])}
                for c in cases]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise UserError(f"{path}: not an error-injection result with `cases` of id, mode, detected ({err!r})") from None


def run_records(run: Path) -> list[dict[str, Any]]:
    """A run folder's records, or an error-injection result file's cases."""
    run = Path(run)
    if run.suffix == ".json" and run.is_file():
        return injection_records(run)
    path = run / "records.jsonl"
    if not path.is_file():
        raise MissingFile(f"{path}: no records (is {run} a run folder?)")
    return list(read_records(path))


def compare_runs(runs: Sequence[Path], seed: int = 0) -> list[Comparison]:
    """Every pair of runs, each later run against each earlier one."""
    if len(runs) < 2:
        raise UserError("pra compare needs at least two run folders")
    records = {str(r): run_records(r) for r in runs}
    return [compare_records(records[a], records[b], a, b, seed) for a, b in combinations(records, 2)]


def markdown(comparisons: Sequence[Comparison]) -> str:
    lines = ["| A | B | n (questions) | acc A | acc B | B - A [95% CI] | A only / B only | McNemar p |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in comparisons:
        mark = "" if c.significant else " (CI covers 0)"
        lines.append(f"| {c.a} | {c.b} | {c.n} ({c.questions}) | {c.accuracy_a:.3f} | {c.accuracy_b:.3f} | "
                     f"{c.difference:+.3f} [{c.ci_low:+.3f}, {c.ci_high:+.3f}]{mark} | {c.a_only} / {c.b_only} | "
                     f"{c.mcnemar_p:.3g} |")
    return "\n".join(lines)
