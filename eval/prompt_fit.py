"""Questions whose prompts cannot fit a model's context, found before anything runs: ``pra eval`` records
them as skipped, with the reason, rather than hang on them (a 200,000-character question is 83k tokens
against SmolLM2's 8,192). Checked for the policy and, for ``pra``, the reward agent, on backends that
know their context window (transformers); a prompt is measured with the room its steps need."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from pra.backends.base import LMBackend
from pra.prompts import DIRECT_PREFIX, policy_messages
from pra.reward_agent import ScoreRequest, render_prompt
from pra.types import Question, ScoredTrace

if TYPE_CHECKING:
    from eval.run import EvalConfig, Parts

STEP_OVERHEAD = 12   # tokens a step takes beyond its text: "Step N: ", the newline, the reward shown to the agent
ANSWER_TOKENS = 16   # the forced "Therefore, the answer is (" and its letter


def generation_room(cfg: "EvalConfig") -> int:
    """Tokens a trace may add to its prompt: every step at its longest, then a forced answer."""
    if cfg.method == "direct":
        return 1
    return cfg.search.max_steps * (cfg.search.step_tokens + STEP_OVERHEAD) + ANSWER_TOKENS


def misfit(backend: LMBackend, prompt: str, room: int, role: str) -> str | None:
    """Why ``prompt`` plus ``room`` tokens cannot fit ``backend``'s context, or None if it fits (or
    the backend cannot tell)."""
    if backend.context_window is None or (n := backend.prompt_tokens(prompt)) is None:
        return None
    if n + room <= backend.context_window:
        return None
    return (f"the {role} prompt takes {n} tokens and the steps up to {room} more, over the {backend.context_window}-token "
            f"context of {backend.name}")


def overlong(cfg: "EvalConfig", parts: "Parts", questions: Sequence[Question],
             context: dict[str, tuple[tuple[str, str], ...]], examples: tuple[ScoredTrace, ...]) -> dict[str, str]:
    """question id -> why its prompt does not fit, for the questions that do not."""
    direct = cfg.method == "direct"
    room = generation_room(cfg)
    # An agent measured through its backend; one without (a scripted stand-in) has no prompt to measure.
    agent = parts.reward_agent if cfg.method == "pra" and hasattr(parts.reward_agent, "backend") else None
    # Documents shown to the agent: at most max_doc_chars characters each, and a character is at most a token.
    agent_room = room + (cfg.search.docs_per_search * agent.max_doc_chars if agent is not None else 0)
    policy = parts.policy
    found = {}
    for q in questions:
        messages = policy_messages(q, policy.has_chat_template, context.get(q.id, ()), direct=direct, examples=examples)
        why = misfit(policy, policy.render(messages, DIRECT_PREFIX if direct else ""), room, "policy")
        if why is None and agent is not None:
            why = misfit(agent.backend, "".join(render_prompt(agent.backend, ScoreRequest(q, (), (), ""))),
                         agent_room, "reward agent")
        if why is not None:
            found[q.id] = why
    return found
