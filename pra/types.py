"""Shared value types: a benchmark question, a chat message, a kept reasoning step, a scored trace."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Question:
    """One multiple-choice question. ``options`` keeps its letters in order (A, B, C, ...)."""
    id: str
    question: str
    options: dict[str, str]
    answer: str            # gold letter, one of ``options``
    source: str            # benchmark name

    @property
    def letters(self) -> list[str]:
        return list(self.options)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Message:
    """A chat message; backends render a list of them with the model's chat template (or as plain text)."""
    role: str          # "system" | "user"
    content: str


@dataclass
class Step:
    """One kept reasoning step of a trace, with what the reward agent said of it (if any)."""
    text: str
    reward: float | None = None
    action: float | None = None      # p(search) from the action readout
    searched: bool = False
    doc_ids: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ScoredTrace:
    """A solved question with its trajectory quality in [0, 1], shown before a question (``--method qwc``)."""
    id: str
    question: Question
    steps: tuple[str, ...]
    answer: str | None
    quality: float
