"""Controlled error injection into correct reasoning traces (after MedTraj), and the sensitivity of a
step scorer to the injected errors: does the reward drop where the trace went wrong?

Each mode is deterministic given its seed and says which steps of the new trace carry the error
(``changed``) and which step of the original each is compared with (``reference``).

``pra runs inject RUN_DIR --reward-agent NAME --out OUT.json [--first N] [--seed S]`` measures a
reward agent: every mode injected into each correct trace of a run with at least two steps, the share
of injected errors it rates lower than the original step, per mode and over all.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from pra.benchmarks import load_eval_benchmark
from eval.analysis.report.runs import load_run
from eval.analysis.rescore import prefix_rewards
from pra.errors import UserError
from pra.models import DEFAULT_REWARD_AGENT
from pra.selection import by_record_id

MODES = ("swap", "drop", "flip_number", "wrong_fact", "wrong_first", "wrong_last", "shuffle")
NUMBER = re.compile(r"\b\d+(?:\.\d+)?\b")
# A step scorer rates the LAST step of the trace prefix it is given (the reward agent reads the trace so
# far), so order-dependent errors (swap, drop, shuffle) can move its score.
Scorer = Callable[[Sequence[str]], float]


class InjectionError(UserError):
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
    raise UserError(f"unknown injection mode {mode!r}; choose one of {', '.join(MODES)}")


def detected(original: Sequence[str], injection: Injection, scorer: Scorer) -> bool:
    """The scorer rates the weakest injected step below the weakest step it replaced."""
    new = min(scorer(injection.steps[: i + 1]) for i in injection.changed)
    old = min(scorer(tuple(original[: j + 1])) for j in injection.reference)
    return new < old


def tally(hits: Iterable[tuple[str, bool]]) -> dict[str, tuple[float, int]]:
    """(share detected, n) per mode and over ``all``, from (mode, detected) pairs."""
    by_mode: dict[str, list[bool]] = defaultdict(list)
    for mode, hit in hits:
        by_mode[mode].append(hit)
        by_mode["all"].append(hit)
    return {mode: (sum(h) / len(h), len(h)) for mode, h in by_mode.items()}


def sensitivity(cases: Iterable[tuple[Sequence[str], Injection]], scorer: Scorer) -> dict[str, float]:
    """Share of injected errors the scorer rates lower than the original, per mode and over ``all``."""
    counts = tally((injection.mode, detected(original, injection, scorer)) for original, injection in cases)
    return {mode: share for mode, (share, _) in counts.items()}


# -- the command -----------------------------------------------------------------------------------

def run_injection(run: Path, agent, first: int | None = None, seed: int = 0) -> dict[str, Any]:
    """Inject every mode into the first ``first`` correct traces of ``run`` with at least two steps
    (trace i gets seed ``seed + i``) and score original and injected steps with ``agent``."""
    saved = load_run(run)
    texts = lambda r: tuple(s["text"] for s in r.get("steps", []) if s["text"].strip())   # empty steps only end a trace
    traces = [r for r in saved.records if r["correct"] and len(texts(r)) >= 2][:first]
    if not traces:
        raise UserError(f"{run / 'records.jsonl'}: no correct trace with at least two steps")
    questions = by_record_id(load_eval_benchmark(saved.benchmark).questions)
    started = time.perf_counter()
    cases, skipped = [], Counter()
    for i, r in enumerate(traces):
        q, steps = questions[r["id"]], texts(r)
        for mode in MODES:
            try:
                cases.append((q, steps, inject(steps, mode, seed + i, q.options, q.answer)))
            except InjectionError:
                skipped[mode] += 1
    jobs = [job for q, steps, inj in cases
            for job in ((q, steps, max(inj.reference) + 1), (q, inj.steps, max(inj.changed) + 1))]
    rewards = prefix_rewards(agent, jobs)
    hits = [(inj.mode, detected(steps, inj, lambda p: rewards[(q.id, tuple(p))])) for q, steps, inj in cases]
    counts = tally(hits)
    share = lambda m: {"share": counts[m][0], "n": counts[m][1]} if m in counts else {"share": None, "n": 0}
    return {"run": str(run), "seed": seed, "traces": len(traces),
            "modes": {m: {**share(m), "skipped": skipped[m]} for m in MODES}, "all": share("all"),
            "seconds_per_trace": round((time.perf_counter() - started) / len(traces), 3),
            "cases": [{"id": q.id, "mode": inj.mode, "detected": hit} for (q, _, inj), (_, hit) in zip(cases, hits)]}


def main(argv: list[str] | None = None) -> None:
    from pra.reward_agent import load_reward_agent

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a pra eval output folder (config.json, records.jsonl)")
    ap.add_argument("--reward-agent", default=DEFAULT_REWARD_AGENT, help="shipped agent, adapter folder or backbone")
    ap.add_argument("--out", type=Path, required=True, help="JSON file for the result")
    ap.add_argument("--first", type=int, help="only the first N qualifying traces")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    result = {"reward_agent": a.reward_agent,
              **run_injection(a.run, load_reward_agent(a.reward_agent), a.first, a.seed)}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n")
    for mode, m in [*result["modes"].items(), ("all", result["all"])]:
        share = "—" if m["share"] is None else f"{m['share']:.3f}"
        print(f"{mode:12s} {share} (n={m['n']}" + (f", skipped {m['skipped']})" if m.get("skipped") else ")"))
    print(f"written to {a.out}")


if __name__ == "__main__":
    main()
