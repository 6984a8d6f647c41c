"""The retrieval types every caller shares: a passage, a scored hit, and the one retriever interface."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Passage:
    """A chunk of a corpus. ``origin`` says where its text came from (file path, URL or PMID)."""
    id: str
    title: str
    text: str
    source: str
    origin: str = ""


@dataclass(frozen=True)
class Hit:
    passage: Passage
    score: float
    rank: int  # 1 = best


class Retriever(Protocol):
    def retrieve(self, queries: list[str], k: int) -> list[list[Hit]]:
        """The top ``k`` hits for each query, best first; one batched call for all queries."""
        ...
