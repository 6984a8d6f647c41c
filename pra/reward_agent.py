"""The process reward agent: a causal LM that reads a partial trace and emits ``r,s``.

Readouts from one scoring pass: slot 1 (reward) = softmax over the logits of tokens ``0`` and ``1``,
the value for ``1``; slot 2 (action) = the same at the second output slot, after ``r,``.
"""
from __future__ import annotations

from dataclasses import dataclass

from pra.types import Question


@dataclass(frozen=True)
class ScoreRequest:
    question: Question
    steps: tuple[str, ...]                 # earlier kept steps
    rewards: tuple[float | None, ...]      # their rewards, shown to the agent
    step: str                              # the candidate step judged now
    docs: tuple[tuple[str, str], ...] = ()  # (title, text) of retrieved documents, if a search happened


@dataclass(frozen=True)
class Readout:
    reward: float   # p("1") at slot 1
    action: float   # p("1") at slot 2: fetch evidence
