"""Search controllers: per candidate step, fetch evidence or not. Chosen per run by a spec string.

``needs_readout`` says whether the controller decides from the reward agent's action readout (so the
candidate is first scored without documents) or before any scoring (``always``, ``never``, probes).
A controller that reads the candidates themselves (the PULSE probe) gets them as ``proposals``.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

from pra.prompts import policy_messages
from pra.errors import UserError
from search.controller_base import Proposal, SearchController, score_steps


@dataclass
class Always:
    needs_readout: bool = False

    def decide(self, actions: Sequence[float | None], proposals: Sequence[Proposal] = ()) -> list[bool]:
        return [True] * len(actions)


@dataclass
class Never:
    needs_readout: bool = False

    def decide(self, actions: Sequence[float | None], proposals: Sequence[Proposal] = ()) -> list[bool]:
        return [False] * len(actions)


@dataclass
class Threshold:
    """The paper's θ_dep: search when p(search) from the action readout reaches θ."""
    theta: float
    needs_readout: bool = True

    def decide(self, actions: Sequence[float | None], proposals: Sequence[Proposal] = ()) -> list[bool]:
        return [a is not None and a >= self.theta for a in actions]


@dataclass
class Sample:
    """Draw the decision from the action distribution (seeded, so runs repeat)."""
    seed: int = 0
    needs_readout: bool = True

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def decide(self, actions: Sequence[float | None], proposals: Sequence[Proposal] = ()) -> list[bool]:
        return [a is not None and self._rng.random() < a for a in actions]


@dataclass
class Pulse:
    """PULSE: search for a candidate when the probe flags its newest step, read from the policy's own
    hidden states over the candidate's text (one forward pass, no generation)."""
    probe: object                  # pra.pulse.probe.Probe
    reader: object                 # pra.pulse.extract.StepReader on the policy's weights
    render: object                 # the policy's render(messages, assistant_prefix)
    chat: bool
    threshold: float
    needs_readout: bool = False

    def scores(self, proposals: Sequence[Proposal]) -> list[float]:
        """p(error) of each proposal's newest step, in one batched pass."""
        from pra.pulse.extract import step_text
        from pra.pulse.features import concat

        if not proposals:
            return []
        items = [step_text(self.render(policy_messages(p.question, self.chat, p.context), ""), p.steps)
                 for p in proposals]
        readouts = [steps[-1] for steps in self.reader.read(items, only_last=True)]
        return self.probe.score(concat([r.trajectories[self.probe.pooling] for r in readouts])).tolist()

    def decide(self, actions: Sequence[float | None], proposals: Sequence[Proposal] = ()) -> list[bool]:
        return [s is not None and s >= self.threshold for s in score_steps("PULSE", actions, proposals, self.scores)]


def parse_controller(spec: str) -> tuple[str, str | None, float | None]:
    """``--search`` checked without loading anything: (name, probe path for pulse, θ or None)."""
    name, _, arg = spec.partition(":")
    path, theta = None, None
    if name == "pulse":
        path, _, last = arg.rpartition(":")
        try:
            theta = float(last)
        except ValueError:
            path = arg
        if not path:
            raise UserError("--search pulse:PATH[:θ] needs the probe file (from `pra probe train`)")
    elif name in ("threshold", "rsus"):
        try:
            theta = float(arg) if arg else None
        except ValueError:
            raise UserError(f"--search {name}:θ needs a number, got {arg!r}") from None
    elif name not in ("always", "never", "sample") or arg:
        raise UserError(f"--search: unknown search controller {spec!r}; use always, never, threshold:θ, sample, "
                        "pulse:PATH[:θ] or rsus[:θ]")
    if theta is not None and not 0 <= theta <= 1:
        raise UserError(f"--search {spec}: θ must be between 0 and 1, got {theta}")
    return name, path, theta


def load_pulse(path: str, threshold: float | None, policy) -> Pulse:
    """The probe file, and a threshold overriding the one chosen on validation."""
    from pra.pulse.extract import StepReader
    from pra.pulse.probe import Probe

    if policy is None:
        raise ValueError("the PULSE controller reads the policy's hidden states; it needs the policy")
    probe = Probe.load(path)
    if probe.backbone != policy.name:
        raise UserError(f"{path}: probe trained on {probe.backbone}'s states, but the policy is {policy.name}")
    return Pulse(probe, StepReader.from_backend(policy), policy.render, policy.has_chat_template,
                 probe.threshold if threshold is None else threshold)


def make_controller(spec: str, seed: int = 0, policy=None, bm25=None) -> SearchController:
    """``always`` | ``never`` | ``threshold:0.5`` | ``sample`` | ``pulse:PATH[:threshold]`` (PULSE needs
    the policy, whose hidden states it reads) | ``rsus[:threshold]`` (needs the policy and a BM25
    retriever)."""
    name, path, theta = parse_controller(spec)
    if name == "pulse":
        return load_pulse(path, theta, policy)
    if name == "rsus":
        from search.rsus import RSUS, RSUSConfig

        if policy is None or bm25 is None:
            raise ValueError("the RSUS controller asks the policy and a BM25 index; it needs both")
        return RSUS(policy, bm25, RSUSConfig(seed=seed, **({"threshold": theta} if theta is not None else {})))
    if name == "threshold":
        return Threshold(0.5 if theta is None else theta)
    if name == "sample":
        return Sample(seed)
    return Always() if name == "always" else Never()
