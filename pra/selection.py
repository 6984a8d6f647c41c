"""Which questions a run asks, and with which option order.

Slices of the first N questions measure letter preference as much as knowledge (the first 50
medmcqa-eval questions have gold letters A 24, B 13, C 8, D 5: "always A" scores 0.48 there). So a run
takes a seeded random sample, the same on every machine and shard, and may ask each question under
rotations of its options:

  none      the options as published
  cyclic    all n cyclic rotations, one record per (question, rotation): the mean accuracy over
            rotations has chance level exactly 1/n whatever letter the model prefers
  balanced  one rotation per question, chosen so that the gold letters are uniform over the sample

A rotated question keeps its text and moves its options: rotation r puts option (i + r) mod n at
letter i. Its id is ``ID@rR`` (rotation 0 keeps the plain id, so a ``none`` run pairs with rotation 0).
"""
from __future__ import annotations

import hashlib
import random
from dataclasses import replace
from typing import Sequence

from pra.errors import UserError
from pra.types import Question

PERMUTE = ("none", "balanced", "cyclic")
ROTATION_MARK = "@r"


def stable_seed(*parts: object) -> int:
    """A 31-bit seed from any values, the same on every machine and Python (``hash`` is salted)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "big") >> 1


def sample_questions(questions: Sequence[Question], n: int, seed: int) -> list[Question]:
    """A fixed random subset of ``n`` questions, in benchmark order: each question's rank is a hash of
    (seed, id), so the subset depends only on the seed and the ids, not on order, machine or shard."""
    if n < 1:
        raise UserError(f"--sample must be >= 1, got {n}")
    if n > len(questions):
        raise UserError(f"--sample {n}: the benchmark has only {len(questions)} questions")
    chosen = set(sorted(range(len(questions)), key=lambda i: stable_seed(seed, questions[i].id))[:n])
    return [q for i, q in enumerate(questions) if i in chosen]


def rotate(q: Question, r: int) -> Question:
    """``q`` with its options rotated by ``r``: letter i now holds the option that was at (i + r) mod n."""
    letters, texts = q.letters, list(q.options.values())
    n = len(letters)
    r %= n
    if r == 0:
        return q
    base, _ = split_id(q.id)
    return replace(q, id=f"{base}{ROTATION_MARK}{r}", options={l: texts[(i + r) % n] for i, l in enumerate(letters)},
                   answer=letters[(letters.index(q.answer) - r) % n])


def split_id(record_id: str) -> tuple[str, int]:
    """(question id, rotation) of a record id written by a permuted run."""
    base, mark, r = str(record_id).rpartition(ROTATION_MARK)
    return (base, int(r)) if mark and r.isascii() and r.isdigit() else (str(record_id), 0)


def by_record_id(questions: Sequence[Question]) -> dict[str, Question]:
    """Every question under every rotation of its options, keyed by the id a run's record carries for it
    (``ID`` or ``ID@rR``): what a tool reading saved records looks a record's question up in."""
    return {q.id: q for q in permuted(questions, "cyclic", 0)}


def permuted(questions: Sequence[Question], permute: str, seed: int) -> list[Question]:
    """The questions as a run asks them (see the module docstring); ``balanced`` assigns the gold letters
    round-robin over a seeded shuffle, so every letter is gold equally often (up to one)."""
    if permute not in PERMUTE:
        raise UserError(f"--permute must be one of {', '.join(PERMUTE)}, got {permute!r}")
    if permute == "none":
        return list(questions)
    if permute == "cyclic":
        return [rotate(q, r) for q in questions for r in range(len(q.options))]
    order = list(range(len(questions)))
    random.Random(stable_seed(seed, "balanced")).shuffle(order)
    target = {i: k for k, i in enumerate(order)}
    out = []
    for i, q in enumerate(questions):
        n = len(q.options)
        gold = q.letters.index(q.answer)
        out.append(rotate(q, gold - target[i] % n))    # moves the gold option to letter target % n
    return out


def asking_order(questions: Sequence[Question], seed: int) -> list[Question]:
    """The order a run works through ``questions``: the questions in a seeded shuffle, each with its
    rotations together. Benchmark files can be sorted (PubMedQA's test file lists its 276 "yes" questions
    first), so a run interrupted in file order holds a biased part of its sample; in this order an
    interrupted run holds a random part. Which questions are asked, and their shards, do not change."""
    def key(q: Question) -> tuple[int, str, int]:
        base, rotation = split_id(q.id)
        return stable_seed(seed, "order", base), base, rotation
    return sorted(questions, key=key)


def questions_asked(questions: Sequence[Question], *, limit: int | None = None, sample: int | None = None,
                    seed: int = 0, shard: tuple[int, int] | None = None, permute: str = "none") -> list[Question]:
    """What a run asks: the first ``limit`` or a seeded ``sample`` (or all), each under the rotations
    ``permute`` asks for, then this shard's share (the questions at positions p with p % n == i, with
    all their rotations), so that a sharded run asks exactly what the whole run asks."""
    if limit is not None and sample is not None:
        raise UserError("--limit and --sample both choose the questions; give one")
    chosen = sample_questions(questions, sample, seed) if sample is not None else list(questions)[:limit]
    asked = permuted(chosen, permute, seed)
    if shard is None:
        return asked
    i, n = shard
    mine = {q.id for q in chosen[i::n]}
    return [q for q in asked if split_id(q.id)[0] in mine]
