"""What every search controller shares: the candidate a decision is for (``Proposal``), the controller's
interface (``SearchController``) and the scoring of candidates' newest steps (``score_steps``). The
controllers themselves are in ``search.controllers`` and ``search.rsus``, which both build on this."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from pra.types import Question


@dataclass(frozen=True)
class Proposal:
    """The candidate a decision is for: its question, the policy's documents, and its steps so far
    (the newest last), i.e. everything needed to rebuild the policy's own text."""
    question: Question
    context: tuple[tuple[str, str], ...]
    steps: tuple[str, ...]


class SearchController(Protocol):
    needs_readout: bool

    def decide(self, actions: Sequence[float | None], proposals: Sequence[Proposal] = ()) -> list[bool]:
        """One decision per candidate; ``actions`` are p(search) readouts (None if not scored yet)."""


def score_steps(name: str, actions: Sequence[float | None], proposals: Sequence[Proposal],
                scores: Callable[[Sequence[Proposal]], list[float]]) -> list[float | None]:
    """A step-reading controller's score of each candidate's newest step, in one call; None for an
    empty step (the policy ended the trace: nothing to read, nothing to search for)."""
    if len(proposals) != len(actions):
        raise ValueError(f"the {name} controller decides from the candidates' steps; the engine gave none")
    readable = [i for i, p in enumerate(proposals) if p.steps and p.steps[-1]]
    out: list[float | None] = [None] * len(proposals)
    for i, s in zip(readable, scores([proposals[i] for i in readable])):
        out[i] = s
    return out
