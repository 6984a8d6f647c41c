"""Prompts: the policy's step-by-step protocol (and, with the reward agent, the PRA prompt)."""
from __future__ import annotations

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

# Base models (no chat template) follow the format far better after one worked example. Chat models
# do without: SmolLM2-135M copies the example's steps into unrelated questions.
EXAMPLE = (
    "Question: Which vitamin deficiency causes scurvy?\n"
    "Options:\nA. Vitamin A\nB. Vitamin B12\nC. Vitamin C\nD. Vitamin D\n"
    "Answer:\n"
    "Step 1: Scurvy presents with bleeding gums, poor wound healing and perifollicular hemorrhages.\n"
    "Step 2: These follow from defective collagen synthesis, which needs ascorbic acid.\n"
    "Step 3: Ascorbic acid is vitamin C, so the answer is (C)."
)


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
        parts.append("Example:\n" + EXAMPLE)
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
