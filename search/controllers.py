"""Search controllers: per candidate step, fetch evidence or not. Chosen per run by a spec string.

``needs_readout`` says whether the controller decides from the reward agent's action readout (so the
candidate is first scored without documents) or before any scoring (``always``, ``never``, probes).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Protocol, Sequence


class SearchController(Protocol):
    needs_readout: bool

    def decide(self, actions: Sequence[float | None]) -> list[bool]:
        """One decision per candidate; ``actions`` are p(search) readouts (None if not scored yet)."""


@dataclass
class Always:
    needs_readout: bool = False

    def decide(self, actions: Sequence[float | None]) -> list[bool]:
        return [True] * len(actions)


@dataclass
class Never:
    needs_readout: bool = False

    def decide(self, actions: Sequence[float | None]) -> list[bool]:
        return [False] * len(actions)


@dataclass
class Threshold:
    """The paper's θ_dep: search when p(search) from the action readout reaches θ."""
    theta: float
    needs_readout: bool = True

    def decide(self, actions: Sequence[float | None]) -> list[bool]:
        return [a is not None and a >= self.theta for a in actions]


@dataclass
class Sample:
    """Draw the decision from the action distribution (seeded, so runs repeat)."""
    seed: int = 0
    needs_readout: bool = True

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def decide(self, actions: Sequence[float | None]) -> list[bool]:
        return [a is not None and self._rng.random() < a for a in actions]


def make_controller(spec: str, seed: int = 0) -> SearchController:
    """``always`` | ``never`` | ``threshold:0.5`` | ``sample``."""
    name, _, arg = spec.partition(":")
    if name == "always":
        return Always()
    if name == "never":
        return Never()
    if name == "threshold":
        try:
            theta = float(arg or 0.5)
        except ValueError:
            raise ValueError(f"--search threshold:θ needs a number, got {arg!r}") from None
        return Threshold(theta)
    if name == "sample":
        return Sample(seed)
    raise ValueError(f"unknown search controller {spec!r}; use always, never, threshold:θ or sample")
