"""Prompts: the policy's step-by-step protocol (and, with the reward agent, the PRA prompt)."""
from __future__ import annotations

import hashlib
import json
import re
from functools import cache
from typing import Sequence

from pra.types import Message, Question, ScoredTrace

STEP_INSTRUCTIONS = (
    "Solve the following multiple-choice question step by step. Start each step with \"Step N:\" "
    "(Step 1:, Step 2:, ...) and keep each step to one or two sentences of reasoning about the question. "
    "Do not analyse the options one per step. Conclude with \"the answer is (X)\" where X is the letter "
    "of the correct option."
)
DIRECT_INSTRUCTIONS = "Answer the following multiple-choice question with the letter of the correct option."
SYSTEM = "You are a medical expert who reasons carefully and concisely."

# Base models (no chat template) follow the format far better after worked examples. Chat models do
# without: SmolLM2-135M copies an example's steps into unrelated questions. Four examples, one answer per
# letter, on unrelated topics and of two and three steps: with a single example (scurvy, answer C)
# Gemma-3-270M wrote its steps and its answer C into 24 of 24 training questions; with these, 2 of 24
# traces share six words in a row with an example (tests/test_eval_embedded.py; README, "Gemma-3-270M").
BASE_EXAMPLES = (
    ("Question: Which organ produces insulin?\n"
     "Options:\nA. Pancreas\nB. Liver\nC. Kidney\nD. Spleen\nAnswer:\n"
     "Step 1: Insulin is made by the beta cells of the islets of Langerhans.\n"
     "Step 2: The islets of Langerhans lie in the pancreas, so the answer is (A)."),
    ("Question: A deficiency of which clotting factor causes hemophilia A?\n"
     "Options:\nA. Factor V\nB. Factor VII\nC. Factor IX\nD. Factor VIII\nAnswer:\n"
     "Step 1: Hemophilia A is an X-linked bleeding disorder of the intrinsic pathway.\n"
     "Step 2: Hemophilia B is the deficiency of factor IX.\n"
     "Step 3: Hemophilia A is the deficiency of factor VIII, so the answer is (D)."),
    ("Question: Which nerve is injured in wrist drop?\n"
     "Options:\nA. Median nerve\nB. Radial nerve\nC. Ulnar nerve\nD. Axillary nerve\nAnswer:\n"
     "Step 1: Wrist drop is the loss of wrist extension.\n"
     "Step 2: The wrist extensors are supplied by the radial nerve, so the answer is (B)."),
    ("Question: Which cells of the stomach secrete hydrochloric acid?\n"
     "Options:\nA. Chief cells\nB. Mucous neck cells\nC. Parietal cells\nD. G cells\nAnswer:\n"
     "Step 1: Chief cells secrete pepsinogen and G cells secrete gastrin.\n"
     "Step 2: Acid is pumped into the lumen by the H+/K+ ATPase of the parietal cells, so the answer is (C)."),
)
COPY_WORDS = 6      # a step that shares this many words in a row with an example's steps copies it


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


@cache
def _example_runs(examples: tuple[str, ...]) -> frozenset[tuple[str, ...]]:
    """Every run of ``COPY_WORDS`` words in the examples' steps, without their common answer clause."""
    runs: set[tuple[str, ...]] = set()
    for example in examples:
        steps = re.sub(r"Step \d+: |,? so the answer is \([A-Z]\)\.", " ", example.split("Answer:\n", 1)[1])
        words = _words(steps)
        runs.update(tuple(words[i:i + COPY_WORDS]) for i in range(len(words) - COPY_WORDS + 1))
    return frozenset(runs)


def copies_example(steps: Sequence[str], examples: tuple[str, ...] = BASE_EXAMPLES) -> bool:
    """Whether a trace's steps repeat a worked example: ``COPY_WORDS`` words in a row from one."""
    runs, words = _example_runs(examples), _words(" ".join(steps))
    return any(tuple(words[i:i + COPY_WORDS]) in runs for i in range(len(words) - COPY_WORDS + 1))


def format_question(q: Question) -> str:
    options = "\n".join(f"{letter}. {text}" for letter, text in q.options.items())
    return f"Question: {q.question}\nOptions:\n{options}"


def format_documents(docs: Sequence[tuple[str, str]]) -> str:
    """Documents as (title, text) pairs, numbered, placed before the question."""
    return "\n".join(f"Document [{i}] ({title}) {text}" for i, (title, text) in enumerate(docs, 1))


def format_scored_traces(examples: Sequence[ScoredTrace]) -> str:
    """Solved questions with their quality (MedTraj's quality-weighted context): good and poor ones
    side by side, so the values show what the model should and should not write."""
    blocks = [f"Example {i} (quality {e.quality:.2f}):\n{format_question(e.question)}\n{steps_prefix(e.steps, None)}"
              + (f"\nFinal answer: ({e.answer})" if e.answer else "") for i, e in enumerate(examples, 1)]
    return "Solved examples, each with its quality score from 0 (poor) to 1 (excellent):\n\n" + "\n\n".join(blocks)


def policy_messages(q: Question, chat: bool, docs: Sequence[tuple[str, str]] = (),
                    direct: bool = False, examples: Sequence[ScoredTrace] = ()) -> list[Message]:
    """The policy's prompt. Scored examples (qwc) and documents (RAG), when given, come before the question."""
    parts = [DIRECT_INSTRUCTIONS if direct else STEP_INSTRUCTIONS]
    if not chat and not direct:
        parts.append("Examples:\n\n" + "\n\n".join(BASE_EXAMPLES))
    if examples:
        parts.append(format_scored_traces(examples))
    if docs:
        parts.append("Relevant documents:\n" + format_documents(docs))
    parts.append(format_question(q) + ("" if chat else "\nAnswer:"))
    messages = [Message("user", "\n\n".join(parts))]
    return [Message("system", SYSTEM)] + messages if chat else messages


def steps_prefix(steps: Sequence[str], next_step: int | None) -> str:
    """The assistant's text so far: numbered kept steps, then the opening of the next step."""
    lines = [f"Step {i}: {s}" for i, s in enumerate(steps, 1)]
    if next_step is not None:
        lines.append(f"Step {next_step}:")
    return "\n".join(lines)


FORCE_ANSWER = "Therefore, the answer is ("


def forced_answer_suffix(steps: Sequence[str]) -> str:
    """What follows the kept steps when an answer is forced: ``FORCE_ANSWER`` on a line of its own."""
    return "\n" + FORCE_ANSWER if steps else FORCE_ANSWER
DIRECT_PREFIX = "The answer is ("


# A fixed question, passage and scored trace through which ``policy_prompt_id`` renders a method's prompt.
_PROBE = Question("probe", "Which option is the probe's?", {"A": "first", "B": "second"}, "A", "probe")
_PROBE_DOCS = (("Probe title", "Probe passage."),)
_PROBE_EXAMPLES = (ScoredTrace("probe-example", _PROBE, ("One step.",), "A", 0.5),)


PROMPT_KINDS = ("direct", "steps", "docs", "examples")


def policy_prompt_id(chat: bool, kind: str) -> str:
    """What a run's policy reads, as a short hash of its prompt for a fixed question (the messages, a
    step's numbering and the forced answer), for the run folder's fingerprint: any change to the texts
    or the code above that alters the policy's prompt changes it, and a folder made with another prompt
    is not resumed. ``chat``: rendered with a chat template (no worked examples); ``kind``: the direct
    answer, steps, steps after passages (RAG) or after scored traces (qwc)."""
    if kind not in PROMPT_KINDS:
        raise ValueError(f"prompt kind {kind!r} is not one of {PROMPT_KINDS}")
    messages = policy_messages(_PROBE, chat, _PROBE_DOCS if kind == "docs" else (), direct=kind == "direct",
                               examples=_PROBE_EXAMPLES if kind == "examples" else ())
    after = DIRECT_PREFIX if kind == "direct" else steps_prefix(["One step."], 2) + forced_answer_suffix(["One step."])
    text = json.dumps([[m.role, m.content] for m in messages] + [after])
    return ("chat-" if chat else "base-") + hashlib.sha256(text.encode()).hexdigest()[:12]
