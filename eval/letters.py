"""What a run's accuracy owes to letters: the gold and predicted letter histograms, the best accuracy a
constant answer or the longest option gets on the same records (a method is only worth its gap above
them), and, for runs that asked questions under several option rotations, the strict circular accuracy
(right under every one)."""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Any, Iterable

from pra.selection import split_id
from pra.types import Question


def letter_stats(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    records = list(records)
    gold = Counter(r["gold"] for r in records)
    predicted = Counter(r["prediction"] or "none" for r in records)
    best = max(sorted(gold), key=gold.__getitem__, default=None)
    by_question: dict[str, list[bool]] = defaultdict(list)
    for r in records:
        by_question[split_id(r["id"])[0]].append(bool(r["correct"]))
    stats = {"gold_letters": dict(sorted(gold.items())), "predicted_letters": dict(sorted(predicted.items())),
             "constant_letter": best, "constant_letter_accuracy": gold[best] / len(records) if records else 0.0,
             "questions": len(by_question)}
    if len(by_question) < len(records):
        stats["circular_accuracy"] = sum(all(v) for v in by_question.values()) / len(by_question)
    return stats


def _asked(records: Iterable[dict[str, Any]], questions: Iterable[Question]) -> tuple[list[Question], bool]:
    """The question behind each record, and whether all questions offer the same option texts."""
    by_id = {q.id: q for q in questions}
    shared = len({frozenset(q.options.values()) for q in by_id.values()}) == 1
    return [by_id[r["id"]] for r in records if r["id"] in by_id], shared


def constant_text_stats(records: Iterable[dict[str, Any]], questions: Iterable[Question]) -> dict[str, Any]:
    """The best constant answer *text*, where every question offers the same option texts (PubMedQA's
    yes/no/maybe, BioASQ's yes/no): rotating the options makes a letter preference score exactly 1/n,
    but not a preference for "yes" (59% of a PubMedQA sample's gold answers)."""
    asked, shared = _asked(records, questions)
    if not shared or not asked:
        return {}
    gold = Counter(q.options[q.answer] for q in asked)
    best = max(sorted(gold), key=gold.__getitem__)
    return {"constant_text": best, "constant_text_accuracy": gold[best] / sum(gold.values())}


def longest_option_stats(records: Iterable[dict[str, Any]], questions: Iterable[Question]) -> dict[str, Any]:
    """The string rule "answer the longest option" on the same records, where questions offer their own
    option texts: rotations leave option lengths alone, and right answers tend to run long (on
    medmcqa-eval's seeded 200 under cyclic rotations the rule is right on 250 of 800 records, 0.312,
    where chance is 0.25), so a method is worth its gap above this rule as much as above chance."""
    asked, shared = _asked(records, questions)
    if shared:
        return {}
    longest = lambda q: max(q.options, key=lambda letter: len(q.options[letter]))
    return {"longest_option_accuracy": sum(longest(q) == q.answer for q in asked) / len(asked)} if asked else {}


def describe(summary: dict[str, Any]) -> str:
    """The lines a summary prints below its accuracy: n of N, the letters, the constant-letter baseline
    and the string rule that applies."""
    hist = lambda h: " ".join(f"{k} {v}" for k, v in h.items())
    chosen = f"sample {summary['sample']}, seed {summary['seed']}" if summary.get("sample") else "first/all"
    lines = [f"n {summary['n']} records: {summary['questions']} of {summary['of']} questions ({chosen}), "
             f"options {summary.get('permute', 'none')}",
             f"gold letters: {hist(summary['gold_letters'])}; predicted: {hist(summary['predicted_letters'])}",
             f"best constant letter: {summary['constant_letter']} scores {summary['constant_letter_accuracy']:.3f}"]
    if "constant_text" in summary:
        lines.append(f"best constant answer: {summary['constant_text']!r} scores {summary['constant_text_accuracy']:.3f} "
                     "(every question has the same options)")
    if "longest_option_accuracy" in summary:
        lines.append(f"always the longest option scores {summary['longest_option_accuracy']:.3f}")
    if "circular_accuracy" in summary:
        lines.append(f"mean accuracy over rotations {summary['accuracy']:.3f}; strict circular accuracy "
                     f"(right under every rotation) {summary['circular_accuracy']:.3f}")
    return "\n".join(lines)


def clustered_stderr(records: list[dict[str, Any]]) -> float:
    """Standard error of the accuracy with a question's rotations as one cluster (they are not
    independent draws): sqrt(sum over questions of (sum of its residuals)^2) / n. With one record per
    question it is sqrt(acc (1 - acc) / n)."""
    n = len(records)
    if not n:
        return 0.0
    acc = sum(bool(r["correct"]) for r in records) / n
    residuals: dict[str, float] = defaultdict(float)
    for r in records:
        residuals[split_id(r["id"])[0]] += bool(r["correct"]) - acc
    return math.sqrt(sum(v * v for v in residuals.values())) / n
