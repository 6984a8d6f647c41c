"""Does the agent pick right answers? ``pra runs selection RUN...`` reads a PRA run's saved search trees.

Whatever the policy proposes, the agent's only lever is the order it puts candidates in. So, over the
candidate steps that wrote an answer, per run:

- **AUROC within a step**: how often, in the same prune (same question, same depth), a candidate
  answering the gold option outscores one answering another option (ties count half); 0.5 is an
  agent that knows nothing of the answer. 95% CI over resamples of questions.
- **the pick against choices that ignore the agent**, on the records whose tree holds an answer (the
  others were all forced): the run's accuracy there beside a majority vote over the same tree's answers
  (ties split) and a uniformly random answering candidate; the paired CI of accuracy − vote resamples
  questions with their rotations (as ``pra compare`` does).
- **the ceiling**: how often the gold answer was among those answers at all.
"""
from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from eval.analysis.compare import paired_ci, ratio_ci, run_records
from pra.errors import UserError
from pra.selection import split_id


@dataclass(frozen=True)
class Selection:
    run: str
    n: int                           # records
    accuracy: float                  # the run's own answers (forced ones included)
    answered: int                    # records whose tree holds an answering candidate; the rest on them:
    pick: float                      # the run's accuracy
    vote: float                      # a majority vote over the tree's answers, ties split
    uniform: float                   # a uniformly random answering candidate
    pick_minus_vote: tuple[float, float, float]     # difference, 95% CI
    gold_proposed: float             # a candidate answering gold is in the tree
    auroc: float | None              # within-step AUROC of trace scores, gold against other answers
    auroc_ci: tuple[float, float] | None
    auroc_questions: int             # questions with a step holding both kinds


def _answers(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [node for node in record["tree"] if node.get("answer")]


def step_wins(record: dict[str, Any]) -> tuple[float, int]:
    """(gold-over-other wins, pairs) among the answering candidates of each prune of ``record``."""
    steps: dict[int, list[tuple[float, bool]]] = defaultdict(list)
    for node in _answers(record):
        steps[node["depth"]].append((node["score"], node["answer"] == record["gold"]))
    wins, pairs = 0.0, 0
    for candidates in steps.values():
        gold = [s for s, right in candidates if right]
        other = [s for s, right in candidates if not right]
        wins += sum((g > o) + 0.5 * (g == o) for g in gold for o in other)
        pairs += len(gold) * len(other)
    return wins, pairs


def vote_share(answers: Sequence[str], gold: str) -> float:
    """The chance that a majority vote over ``answers`` (ties broken at random) is ``gold``."""
    if not answers:
        return 0.0
    counts = Counter(answers)
    top = [a for a, c in counts.items() if c == max(counts.values())]
    return (gold in top) / len(top)


def _check(run: Path, records: list[dict[str, Any]]) -> None:
    """Each record has what the measures read; an error names the run and the record otherwise."""
    if not records or any(not isinstance(r, dict) or "tree" not in r for r in records):
        raise UserError(f"{run}: its records keep no search tree (PRA runs keep one; CoT, SC and RAG do not)")
    for n, r in enumerate(records, 1):
        missing = [k for k in ("id", "gold", "correct") if k not in r]
        nodes_ok = isinstance(r["tree"], list) and all(
            isinstance(node, dict) and isinstance(node.get("depth"), int) and
            isinstance(node.get("score"), (int, float)) for node in r["tree"])
        if missing or not nodes_ok:
            what = f"no {', '.join(missing)}" if missing else "a tree node without an integer depth and a numeric score"
            raise UserError(f"{run}: record {n} (id {str(r.get('id'))[:60]!r}) has {what}")


def selection(run: Path) -> Selection:
    records = run_records(run)
    _check(run, records)
    answered = [(r, [node["answer"] for node in _answers(r)]) for r in records]
    answered = [(r, a) for r, a in answered if a]
    if not answered:
        raise UserError(f"{run}: no candidate in its trees wrote an answer (every record was forced)")
    votes = [vote_share(a, r["gold"]) for r, a in answered]
    correct = [bool(r["correct"]) for r, _ in answered]
    low, high = paired_ci(votes, correct, [split_id(r["id"])[0] for r, _ in answered])
    by_question: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for r in records:
        w, p = step_wins(r)
        totals = by_question[split_id(r["id"])[0]]
        totals[0] += w
        totals[1] += p
    held = [(w, p) for w, p in by_question.values() if p]
    m = len(answered)
    return Selection(
        run=str(run), n=len(records), accuracy=sum(bool(r["correct"]) for r in records) / len(records),
        answered=m, pick=sum(correct) / m, vote=sum(votes) / m,
        uniform=sum(a.count(r["gold"]) / len(a) for r, a in answered) / m,
        pick_minus_vote=(sum(correct) / m - sum(votes) / m, low, high),
        gold_proposed=sum(r["gold"] in a for r, a in answered) / m,
        auroc=sum(w for w, _ in held) / sum(p for _, p in held) if held else None,
        auroc_ci=ratio_ci(*map(np.array, zip(*held))) if len(held) > 1 else None,
        auroc_questions=len(held))


def _line(s: Selection) -> str:
    d, low, high = s.pick_minus_vote
    auroc = "—" if s.auroc is None else f"{s.auroc:.3f}" + (f" [{s.auroc_ci[0]:.3f}, {s.auroc_ci[1]:.3f}]" if s.auroc_ci else "")
    return (f"| {s.run} | {s.n} | {s.accuracy:.3f} | {s.answered} | {s.pick:.3f} | {s.vote:.3f} | {s.uniform:.3f} "
            f"| {d:+.3f} [{low:+.3f}, {high:+.3f}] | {s.gold_proposed:.3f} | {auroc} ({s.auroc_questions} q) |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="PRA run folders (records.jsonl with search trees)")
    results = [selection(run) for run in ap.parse_args(argv).runs]
    print("| run | n | accuracy | with an answer in the tree | accuracy there | vote over the tree's answers | "
          "random answering candidate | accuracy − vote [95% CI] | gold among the answers | "
          "AUROC within a step (chance 0.5) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for s in results:
        print(_line(s))
    above = [s for s in results if s.auroc_ci and s.auroc_ci[0] > 0.5]
    print(f"{len(results)} run(s): the agent's scores rank a gold answer above another answer of the same step "
          f"with a CI above chance in {len(above)}" + (f" ({', '.join(s.run for s in above)})" if above else ""))


if __name__ == "__main__":
    main()
