"""Answer readouts: the answer letter read from the logits after a prompt (direct answers, and forced
answers at the step limit), with or without a correction for the model's letter preference.

  argmax     the most likely letter
  permavg    permutation-averaged option probabilities: ask the same prompt under every cyclic rotation
             of the options, map each letter's probability back to the option text it names, average
             over rotations, and answer with the letter of the likeliest text. A letter preference
             moves mass between texts equally in every direction and averages out.
  calibrate  contextual calibration (Zhao, Wallace, Feng, Klein, Singh: "Calibrate Before Use: Improving
             Few-Shot Performance of Language Models", ICML 2021): the letter distribution on
             content-free inputs ("N/A", "", "[MASK]" as question and options, the same template
             otherwise) estimates the preference p_cf; the calibrated distribution is p / p_cf,
             renormalised (their W = diag(p_cf)^-1, b = 0).

A prompt is given as a function of the question, so that the rotated and content-free twins are the
same prompt with other options (for a forced answer: the same steps).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, Sequence

from pra.backends.base import LMBackend, renormalise
from pra.errors import UserError
from pra.selection import rotate
from pra.types import Question

READOUTS = ("argmax", "permavg", "calibrate")
CONTENT_FREE = ("N/A", "", "[MASK]")

Prompt = Callable[[Question], str]


def check_readout(readout: str) -> str:
    if readout not in READOUTS:
        raise UserError(f"--readout must be one of {', '.join(READOUTS)}, got {readout!r}")
    return readout


def read_letters(policy: LMBackend, items: Sequence[tuple[Question, Prompt]], readout: str = "argmax"
                 ) -> list[dict[str, float]]:
    """Per item, log-probabilities over the question's letters after the readout, in one batched call."""
    check_readout(readout)
    twins = {"argmax": lambda q: [q], "permavg": _rotations, "calibrate": lambda q: [q, *_content_free(q)]}[readout]
    asked = [(prompt, twins(q)) for q, prompt in items]
    flat = [(prompt(t), t.letters) for prompt, ts in asked for t in ts]
    lps = iter(policy.choice_logprobs([p for p, _ in flat], [l for _, l in flat]) if flat else [])
    out = []
    for (q, _), (_, ts) in zip(items, asked):
        got = [next(lps) for _ in ts]
        out.append(_permavg(q, ts, got) if readout == "permavg" else
                   _calibrated(got[0], got[1:]) if readout == "calibrate" else got[0])
    return out


def best_letter(logprobs: dict[str, float]) -> str:
    return max(logprobs, key=logprobs.get)


def _rotations(q: Question) -> list[Question]:
    return [rotate(q, r) for r in range(len(q.options))]


def _permavg(q: Question, rotated: list[Question], got: list[dict[str, float]]) -> dict[str, float]:
    """Average over rotations of each option's probability, returned under ``q``'s letters: under
    rotation r, letter i names the option at (i + r) mod n."""
    letters, n = q.letters, len(q.letters)
    mass = [0.0] * n
    for r, lp in enumerate(got):
        for i, letter in enumerate(letters):
            mass[(i + r) % n] += math.exp(lp[letter]) / n
    return {letter: math.log(max(m, 1e-300)) for letter, m in zip(letters, mass)}


def _content_free(q: Question) -> list[Question]:
    return [replace(q, question=text, options=dict.fromkeys(q.letters, text)) for text in CONTENT_FREE]


def _calibrated(lp: dict[str, float], free: list[dict[str, float]]) -> dict[str, float]:
    """p / p_cf renormalised, p_cf the mean of the content-free distributions."""
    p_cf = {k: sum(math.exp(f[k]) for f in free) / len(free) for k in lp}
    return renormalise({k: v - math.log(p_cf[k]) for k, v in lp.items()})
