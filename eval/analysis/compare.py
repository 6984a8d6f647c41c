"""``pra compare RUN_A RUN_B [...]``: paired accuracy differences between runs on the same questions.

Records are matched by id, which names the question and its option rotation (``ID@rR``; rotation 0
is the plain id). For each pair of runs: the accuracy difference B - A on the matched records, a paired
bootstrap 95% CI (questions are resampled with all their rotations, since the rotations of one
question are not independent draws), and the exact McNemar p-value on the discordant records (b: A
right and B wrong, c: the reverse; two-sided binomial test of b against Bin(b + c, 1/2)). A difference
whose CI covers 0 is no gain.

Both runs must come from the same benchmark content: a run config stores ``benchmark_hash`` (a hash of
the question set, ``pra.benchmarks.content_hash``); runs written before it are checked on the benchmark
their configs name and on the question ids their records hold (one run's questions must hold the
other's: a run still going holds part of them). A mismatch is an error; ``allow_different`` compares anyway and names
what differs. ``seeds`` > 1 repeats the bootstrap with that many seeds and reports how far each CI bound
moves between them.

An error-injection result (``pra runs inject ... --out FILE.json``) compares the same way: each
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
    resamples: int = BOOTSTRAP
    seeds: tuple[int, ...] = (0,)                    # the bootstrap seeds; the CI above is the first's
    low_range: tuple[float, float] | None = None     # (min, max) of the lower bound over the seeds
    high_range: tuple[float, float] | None = None    # (min, max) of the upper bound

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
    return ratio_ci(np.array([diff[ix].sum() for ix in index.values()]),
                    np.array([len(ix) for ix in index.values()], float), seed, rounds)


def ratio_ci(sums: np.ndarray, sizes: np.ndarray, seed: int = 0, rounds: int = BOOTSTRAP) -> tuple[float, float]:
    """95% percentile CI of sum(sums) / sum(sizes), resampling whole groups (one entry of each a group)."""
    draws = np.random.default_rng(seed).integers(0, len(sums), size=(rounds, len(sums)))
    low, high = np.percentile(sums[draws].sum(1) / sizes[draws].sum(1), [2.5, 97.5])
    return float(low), float(high)


def _outcomes(records: list[dict[str, Any]], name: str) -> dict[str, bool]:
    """id -> correct; a record without an id or a true/false ``correct`` is an error naming the run."""
    out = {}
    for n, r in enumerate(records, 1):
        if not isinstance(r, dict) or "id" not in r:
            raise UserError(f"{name}: record {n} has no 'id'")
        correct = r.get("correct")
        if not isinstance(correct, bool) and correct not in (0, 1):
            got = "no 'correct' field" if "correct" not in r else f"'correct' {correct!r:.40} (expected true or false)"
            raise UserError(f"{name}: record {n} (id {str(r['id'])[:60]!r}) has {got}")
        out[str(r["id"])] = bool(correct)
    return out


def compare_records(a: Iterable[dict[str, Any]], b: Iterable[dict[str, Any]], name_a: str = "A",
                    name_b: str = "B", seed: int = 0, seeds: int = 1, rounds: int = BOOTSTRAP) -> Comparison:
    """The paired comparison of two runs' records (the last record of an id counts, as in summaries);
    ``seeds`` > 1 also reports the range of each CI bound over bootstrap seeds seed .. seed + seeds - 1."""
    a, b = list(a), list(b)
    by_a, by_b = _outcomes(a, name_a), _outcomes(b, name_b)
    group = {str(r["id"]): str(r.get("group") or split_id(r["id"])[0]) for r in a}
    ids = [i for i in by_a if i in by_b]
    if not ids:
        raise UserError(f"{name_a} and {name_b} share no records (ids name question and rotation)")
    if seeds < 1:
        raise UserError(f"--seeds must be at least 1, got {seeds}")
    ca, cb = [by_a[i] for i in ids], [by_b[i] for i in ids]
    groups = [group[i] for i in ids]
    bounds = [paired_ci(ca, cb, groups, s, rounds) for s in range(seed, seed + seeds)]
    low, high = bounds[0]
    a_only = sum(x and not y for x, y in zip(ca, cb))
    b_only = sum(y and not x for x, y in zip(ca, cb))
    acc_a, acc_b = sum(ca) / len(ids), sum(cb) / len(ids)
    lows, highs = [lo for lo, _ in bounds], [hi for _, hi in bounds]
    return Comparison(name_a, name_b, len(ids), len(set(groups)), acc_a, acc_b, acc_b - acc_a, low, high,
                      a_only, b_only, mcnemar_exact(a_only, b_only), rounds, tuple(range(seed, seed + seeds)),
                      (min(lows), max(lows)) if seeds > 1 else None, (min(highs), max(highs)) if seeds > 1 else None)


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


def run_config(run: Path) -> dict[str, Any] | None:
    """A run folder's config.json (None where there is none: an error-injection result)."""
    path = Path(run) / "config.json"
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(config, dict):
        raise UserError(f"{path}: expected a JSON object of settings")
    return config


def run_benchmark(run: Path) -> tuple[str | None, str | None]:
    """(benchmark name, benchmark_hash) from a run folder's config.json; None where it does not say (an
    error-injection result, a folder written before configs held the hash)."""
    config = run_config(run)
    if config is None:
        return None, None
    name, digest = config.get("benchmark"), config.get("benchmark_hash")
    return (str(name) if name is not None else None), (str(digest) if digest is not None else None)


def _benchmark_key(name: str) -> str:
    """A benchmark as a config names it: a registered name, or a path (the registered file's path is its
    name), so that ``medqa`` and some other file called ``medqa.jsonl`` differ."""
    from pra.benchmarks import BENCHMARKS

    if name in BENCHMARKS:
        return name
    path = Path(name).resolve()
    return next((known for known, (_, file) in BENCHMARKS.items() if file.resolve() == path), str(path))


def _questions(records: list[dict[str, Any]]) -> set[str]:
    return {str(r.get("group") or split_id(r["id"])[0]) for r in records if isinstance(r, dict) and "id" in r}


def mismatch(a: str, b: str, records_a: list[dict[str, Any]], records_b: list[dict[str, Any]]) -> str | None:
    """Why runs ``a`` and ``b`` do not come from the same benchmark content (None if they do): their
    configs' ``benchmark_hash`` where both have one, else the question ids their records hold."""
    (name_a, hash_a), (name_b, hash_b) = run_benchmark(Path(a)), run_benchmark(Path(b))
    if hash_a and hash_b:
        if hash_a == hash_b:
            return None
        return (f"{a} ran benchmark {name_a} (questions hash {hash_a}) and {b} ran {name_b} (questions hash "
                f"{hash_b}): different question sets")
    if name_a and name_b and _benchmark_key(name_a) != _benchmark_key(name_b):
        return f"{a} ran benchmark {name_a} and {b} ran {name_b}"
    qa, qb = _questions(records_a), _questions(records_b)
    if qa <= qb or qb <= qa:          # the same questions, or a run still going holds part of the other's
        return None
    only_a, only_b = sorted(qa - qb), sorted(qb - qa)
    show = lambda ids: ", ".join(repr(i[:40]) for i in ids[:3]) + (" ..." if len(ids) > 3 else "")
    return (f"{a} and {b} hold different questions ({len(only_a)} only in {a}" + (f": {show(only_a)}" if only_a else "")
            + f"; {len(only_b)} only in {b}" + (f": {show(only_b)}" if only_b else "") + ")")


def compare_runs(runs: Sequence[Path], seed: int = 0, seeds: int = 1, allow_different: bool = False,
                 warn=None) -> list[Comparison]:
    """Every pair of runs, each later run against each earlier one; runs of different benchmark content
    are refused unless ``allow_different`` (then ``warn`` gets the line saying what differs)."""
    if len(runs) < 2:
        raise UserError("pra compare needs at least two run folders")
    if seeds < 1:
        raise UserError(f"--seeds must be at least 1, got {seeds}")
    records = {str(r): run_records(r) for r in runs}
    for a, b in combinations(records, 2):
        if why := mismatch(a, b, records[a], records[b]):
            if not allow_different:
                raise UserError(f"{why}; records would be paired by id alone: use --allow-different to compare anyway")
            if warn is not None:
                warn(f"--allow-different: {why}")
    return [compare_records(records[a], records[b], a, b, seed, seeds) for a, b in combinations(records, 2)]


def pool_runs(runs: Sequence[Path], seed: int = 0, seeds: int = 1, allow_different: bool = False,
              warn=None) -> Comparison:
    """One paired comparison pooled over pairs of runs given as A1 B1 A2 B2 ... (say, a trained and an
    untrained agent on each benchmark): each pair is checked and paired as ``compare_runs`` pairs it, its
    ids and questions kept apart from the other pairs', and the bootstrap resamples questions across all."""
    if len(runs) < 4 or len(runs) % 2:
        raise UserError(f"--pool takes pairs of runs, A1 B1 A2 B2 ...: got {len(runs)} run folder(s)")
    pooled_a, pooled_b = [], []
    for k in range(0, len(runs), 2):
        (ra, rb) = pair = [run_records(r) for r in runs[k:k + 2]]
        if why := mismatch(str(runs[k]), str(runs[k + 1]), *pair):
            if not allow_different:
                raise UserError(f"{why}; records would be paired by id alone: use --allow-different to compare anyway")
            if warn is not None:
                warn(f"--allow-different: {why}")
        for src, dst in ((ra, pooled_a), (rb, pooled_b)):
            dst += [{**r, "id": f"{k // 2}:{r.get('id')}", "group": f"{k // 2}:{r.get('group') or split_id(str(r.get('id')))[0]}"}
                    if isinstance(r, dict) and "id" in r else r for r in src]
    name_a = f"pooled {', '.join(str(r) for r in runs[0::2])}"
    name_b = f"pooled {', '.join(str(r) for r in runs[1::2])}"
    return compare_records(pooled_a, pooled_b, name_a, name_b, seed, seeds)


def markdown(comparisons: Sequence[Comparison]) -> str:
    lines = ["| A | B | n (questions) | acc A | acc B | B - A [95% CI] | A only / B only | McNemar p |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in comparisons:
        mark = "" if c.significant else " (CI covers 0)"
        lines.append(f"| {c.a} | {c.b} | {c.n} ({c.questions}) | {c.accuracy_a:.3f} | {c.accuracy_b:.3f} | "
                     f"{c.difference:+.3f} [{c.ci_low:+.3f}, {c.ci_high:+.3f}]{mark} | {c.a_only} / {c.b_only} | "
                     f"{c.mcnemar_p:.3g} |")
    if comparisons:
        c = comparisons[0]
        lines.append("")
        lines.append(f"95% CI: paired bootstrap, {c.resamples:,} resamples of questions (each with all its "
                     f"rotations), seed {c.seeds[0]}.")
        for c in comparisons:
            if c.low_range is not None and c.high_range is not None:
                lines.append(f"{c.b} - {c.a} over {len(c.seeds)} bootstrap seeds ({c.seeds[0]}..{c.seeds[-1]}): "
                             f"lower bound {c.low_range[0]:+.4f} to {c.low_range[1]:+.4f}, "
                             f"upper bound {c.high_range[0]:+.4f} to {c.high_range[1]:+.4f}")
    return "\n".join(lines)
