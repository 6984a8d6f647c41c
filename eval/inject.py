"""Controlled error injection into correct reasoning traces (after MedTraj), and the sensitivity of a
step scorer to the injected errors: does the reward drop where the trace went wrong?

Each mode is deterministic given its seed and says which steps of the new trace carry the error
(``changed``) and which step of the original each is compared with (``reference``).
"""
from __future__ import annotations

import random
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

MODES = ("swap", "drop", "flip_number", "wrong_fact", "wrong_first", "wrong_last", "shuffle")
NUMBER = re.compile(r"\b\d+(?:\.\d+)?\b")
# A step scorer rates the LAST step of the trace prefix it is given (the reward agent reads the trace so
# far), so order-dependent errors (swap, drop, shuffle) can move its score.
Scorer = Callable[[Sequence[str]], float]


class InjectionError(ValueError):
    """The trace offers nothing this mode can change (too few steps, no number, no option text)."""


@dataclass(frozen=True)
class Injection:
    mode: str
    steps: tuple[str, ...]
    changed: tuple[int, ...]        # indices into ``steps`` that carry the error
    reference: tuple[int, ...]      # per changed index, the original step's index it replaces


def _swap(steps: list[str], rng: random.Random) -> Injection:
    pairs = [(i, j) for i in range(len(steps)) for j in range(i + 1, len(steps)) if steps[i] != steps[j]]
    if not pairs:
        raise InjectionError("swap needs two different steps")
    i, j = rng.choice(pairs)
    steps[i], steps[j] = steps[j], steps[i]
    return Injection("swap", tuple(steps), (i, j), (i, j))


def _drop(steps: list[str], rng: random.Random) -> Injection:
    """Drop the key step: without a model to measure each step's marginal contribution, the longest
    step before the conclusion (ties broken by the seed). The error shows in the step that follows."""
    if len(steps) < 2:
        raise InjectionError("drop needs a step before the conclusion")
    longest = max(len(s) for s in steps[:-1])
    k = rng.choice([i for i, s in enumerate(steps[:-1]) if len(s) == longest])
    del steps[k]
    return Injection("drop", tuple(steps), (k,), (k + 1,))


def _flip_number(steps: list[str], rng: random.Random) -> Injection:
    spots = [(i, m) for i, s in enumerate(steps) for m in NUMBER.finditer(s)]
    if not spots:
        raise InjectionError("flip_number needs a number in some step")
    i, m = rng.choice(spots)
    text = m.group()
    value = float(text)
    new = value * rng.choice((2, 3, 10)) if value else float(rng.randint(1, 9))
    decimals = len(text.partition(".")[2])
    steps[i] = steps[i][:m.start()] + (f"{new:.{decimals}f}" if decimals else str(int(new))) + steps[i][m.end():]
    return Injection("flip_number", tuple(steps), (i,), (i,))


def _wrong_fact(steps: list[str], rng: random.Random, options: Mapping[str, str]) -> Injection:
    """Replace an option's text that a step states with another option's text."""
    texts = {k: v for k, v in options.items() if len(v.strip()) >= 3}
    spots = [(i, k) for i, s in enumerate(steps) for k, v in texts.items() if v.lower() in s.lower()]
    if not spots:
        raise InjectionError("wrong_fact needs a step that states an option's text")
    i, k = rng.choice(spots)
    others = [v for o, v in options.items() if o != k and v.lower() != texts[k].lower()]
    if not others:
        raise InjectionError("wrong_fact needs another option with a different text")
    other = rng.choice(others)
    steps[i] = re.sub(re.escape(texts[k]), lambda _: other, steps[i], flags=re.IGNORECASE)
    return Injection("wrong_fact", tuple(steps), (i,), (i,))


def _wrong_letter(rng: random.Random, options: Mapping[str, str], gold: str | None) -> str:
    wrong = [k for k in options if k != gold]
    if gold is None or not wrong:
        raise InjectionError("a wrong step needs the options and the gold letter")
    return rng.choice(wrong)


def _shuffle(steps: list[str], rng: random.Random) -> Injection:
    if len(set(steps)) < 2:
        raise InjectionError("shuffle needs two different steps")
    new = list(steps)
    while new == steps:
        rng.shuffle(new)
    changed = tuple(i for i, (a, b) in enumerate(zip(new, steps)) if a != b)
    return Injection("shuffle", tuple(new), changed, changed)


def inject(steps: Sequence[str], mode: str, seed: int = 0, options: Mapping[str, str] | None = None,
           gold: str | None = None) -> Injection:
    """One error of ``mode`` in a copy of ``steps``. ``wrong_fact`` needs the question's options,
    ``wrong_first`` / ``wrong_last`` the options and the gold letter (they argue for a wrong one)."""
    rng = random.Random(seed)
    steps = list(steps)
    if mode == "swap":
        return _swap(steps, rng)
    if mode == "drop":
        return _drop(steps, rng)
    if mode == "flip_number":
        return _flip_number(steps, rng)
    if mode == "shuffle":
        return _shuffle(steps, rng)
    if mode in ("wrong_fact", "wrong_first", "wrong_last") and not options:
        raise InjectionError(f"{mode} needs the question's options")
    if mode == "wrong_fact":
        return _wrong_fact(steps, rng, options)
    if mode == "wrong_first":
        w = _wrong_letter(rng, options, gold)
        return Injection(mode, (f"The key finding here points to {options[w]}.", *steps), (0,), (0,))
    if mode == "wrong_last":
        if not steps:
            raise InjectionError("wrong_last needs a step to follow")
        w = _wrong_letter(rng, options, gold)
        return Injection(mode, (*steps, f"Therefore, the answer is ({w})."), (len(steps),), (len(steps) - 1,))
    raise ValueError(f"unknown injection mode {mode!r}; choose one of {', '.join(MODES)}")


def detected(original: Sequence[str], injection: Injection, scorer: Scorer) -> bool:
    """The scorer rates the weakest injected step below the weakest step it replaced."""
    new = min(scorer(injection.steps[: i + 1]) for i in injection.changed)
    old = min(scorer(tuple(original[: j + 1])) for j in injection.reference)
    return new < old


def sensitivity(cases: Iterable[tuple[Sequence[str], Injection]], scorer: Scorer) -> dict[str, float]:
    """Share of injected errors the scorer rates lower than the original, per mode and over ``all``."""
    hits: dict[str, list[bool]] = defaultdict(list)
    for original, injection in cases:
        hit = detected(original, injection, scorer)
        hits[injection.mode].append(hit)
        hits["all"].append(hit)
    return {mode: sum(h) / len(h) for mode, h in hits.items()}
