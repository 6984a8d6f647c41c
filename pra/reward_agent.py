"""The process reward agent: a causal LM that reads a partial trace and emits ``r,s``.

Readouts from one scoring pass: slot 1 (reward) = softmax over the logits of tokens ``0`` and ``1``,
the value for ``1``; slot 2 (action, 1 = fetch evidence) = the same at the second output slot, after the
more likely slot-1 digit and ``,``. The prompt is laid out so that what the candidates of one beam
share (instructions, question, earlier steps) comes first and is computed once.

Two prompt variants differ in the earlier steps only. Agents trained before ``PROMPT_RECORD`` existed
(and plain backbones) see each earlier step with its reward, ``Step 1: ... (reward 0.80)``; they were
trained on the teacher's targets there but read at inference with their own readouts. Agents that
``pra train`` writes now see the earlier steps without rewards, in training and at inference alike
(why: ``training.dataset``), and record that in their folder.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from pra.backends.base import BackendStats, LMBackend, SlotLogprobs
from pra.errors import UserError
from pra.prompts import format_question
from pra.types import Message, Question

PROMPT_RECORD = "prompt.json"     # in an agent's folder: {"earlier_rewards": false}
PRA_SYSTEM = "You are a careful evaluator of medical reasoning."
PRA_INSTRUCTIONS = (
    "Evaluate the last step of a step-by-step solution to a medical multiple-choice question. "
    "Reply with two digits \"r,s\": r = 1 if the last step is correct and helpful, 0 if it is wrong or "
    "unhelpful; s = 1 if judging it needs evidence from a medical search, 0 if not."
)


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


def two_way(lp: dict[str, float]) -> float:
    """Softmax over the two digit log-probs (or logits): the value for ``1``."""
    return 1.0 / (1.0 + math.exp(lp["0"] - lp["1"]))


def prompt_parts(req: ScoreRequest, max_doc_chars: int = 400, earlier_rewards: bool = True) -> tuple[str, str]:
    """(shared head, own tail) of the user message. The head ends with a newline and the tail starts
    with a word, so tokenizing them apart gives the tokens of the whole. ``earlier_rewards``: show
    each earlier step's reward (the older agents' prompt)."""
    trace = "\n".join(f"Step {i}: {s}" + (f" (reward {r:.2f})" if r is not None and earlier_rewards else "")
                      for i, (s, r) in enumerate(zip(req.steps, req.rewards), 1)) or "(none)"
    head = f"{PRA_INSTRUCTIONS}\n\n{format_question(req.question)}\n\nReasoning so far:\n{trace}\n"
    tail = ""
    if req.docs:
        tail = "Documents:\n" + "\n".join(f"[{i}] ({t}) {x[:max_doc_chars]}" for i, (t, x) in enumerate(req.docs, 1)) + "\n"
    tail += f"Last step:\nStep {len(req.steps) + 1}: {req.step}\n\nYour evaluation (r,s):"
    return head, tail


def render_prompt(backend: LMBackend, req: ScoreRequest, max_doc_chars: int = 400,
                  earlier_rewards: bool = True) -> tuple[str, str]:
    """The agent's full prompt as (prefix, suffix) strings for ``LMBackend.slot_logprobs``."""
    head, tail = prompt_parts(req, max_doc_chars, earlier_rewards)
    full = backend.render([Message("system", PRA_SYSTEM), Message("user", head + tail)])
    cut = full.index(head) + len(head)
    return full[:cut], full[cut:]


class RewardAgent:
    """Scores candidate steps in one batched call per engine stage."""

    def __init__(self, backend: LMBackend, max_doc_chars: int = 400, earlier_rewards: bool = True):
        self.backend = backend
        self.max_doc_chars = max_doc_chars
        self.earlier_rewards = earlier_rewards    # the prompt variant (module docstring)

    @property
    def stats(self) -> BackendStats:
        return self.backend.stats

    def score(self, requests: list[ScoreRequest]) -> list[Readout]:
        """One batched scoring call; identical prompts (sibling candidates that came out the same, as
        greedy ones always do) are scored once."""
        prompts = [render_prompt(self.backend, r, self.max_doc_chars, self.earlier_rewards) for r in requests]
        unique = list(dict.fromkeys(prompts))
        readouts = dict(zip(unique, (readout(s) for s in self.backend.slot_logprobs(unique))))
        return [readouts[p] for p in prompts]


def readout(s: SlotLogprobs) -> Readout:
    return Readout(two_way(s.slot1), two_way(s.slot2))


ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


def agent_folder_problem(name_or_path: str) -> str | None:
    """Why ``--reward-agent NAME_OR_PATH`` names an agent folder that cannot be loaded as one (its adapter
    config without its weights or the reverse, as an export cut short leaves it; an adapter config that
    names no base; an unreadable ``PROMPT_RECORD``), or None. A folder without ``PROMPT_RECORD`` is an
    agent trained before prompt records existed and is read with the older prompt."""
    from pra.models import AGENTS_DIR

    folder = AGENTS_DIR / name_or_path if (AGENTS_DIR / name_or_path).is_dir() else Path(name_or_path)
    if not folder.is_dir():
        return None
    config = folder / "adapter_config.json"
    weights = any((folder / w).is_file() for w in ADAPTER_WEIGHTS)
    if config.exists() != weights:
        has, lacks = ("adapter_config.json", "its weights (adapter_model.safetensors)") if config.exists() else \
            ("adapter weights", "adapter_config.json")
        return (f"--reward-agent {name_or_path}: {folder} has {has} but not {lacks}: an export cut short? "
                "export the agent again")
    if config.exists():
        try:
            base = json.loads(config.read_text(encoding="utf-8")).get("base_model_name_or_path")
        except (ValueError, AttributeError):
            base = None
        if not isinstance(base, str) or not base:
            return f"--reward-agent {name_or_path}: {config} is not a peft adapter config naming its base model"
    try:
        shows_earlier_rewards(str(folder))
    except UserError as err:
        return str(err)
    return None


def shows_earlier_rewards(folder: str | None) -> bool:
    """The prompt variant of an agent (an adapter or a fully fine-tuned model's folder): its
    ``PROMPT_RECORD``, or the older prompt (earlier rewards shown) for a folder without one and for a
    plain backbone."""
    record = Path(folder) / PROMPT_RECORD if folder else None
    if record is None or not record.is_file():
        return True
    try:
        value = json.loads(record.read_text())["earlier_rewards"]
    except (ValueError, KeyError, TypeError):
        value = None
    if not isinstance(value, bool):
        raise UserError(f'{record}: expected {{"earlier_rewards": true or false}}')
    return value


def load_reward_agent(name_or_path: str, batch_size: int = 16, share_prefix: bool = True,
                      max_doc_chars: int = 400, dtype: str = "float32") -> RewardAgent:
    """An embedded or hub backbone (untrained: the paper's ablation row), or a folder holding a peft
    adapter (its ``adapter_config.json`` names the base model). float32 by default: readouts are
    probabilities compared across candidates, and bf16 moves them by ~0.05."""
    from pra.backends.transformers_backend import TransformersBackend
    from pra.models import resolve_reward_agent

    if why := agent_folder_problem(name_or_path):          # before any weights load
        raise UserError(why)
    base, adapter = resolve_reward_agent(name_or_path)
    earlier_rewards = shows_earlier_rewards(adapter or base)
    backend = TransformersBackend(base, batch_size=batch_size, adapter=adapter, share_prefix=share_prefix,
                                  dtype=dtype)
    return RewardAgent(backend, max_doc_chars, earlier_rewards)
