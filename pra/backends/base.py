"""The policy backend interface: what the engine asks of any text generator.

Shaped after vLLM: ``generate(prompts, SamplingParams)`` returns, per prompt, ``n`` completions, each
cut at the first stop string. Prompts are plain strings; ``render`` turns chat messages plus the
assistant's text so far into one (with the model's chat template when it has one).
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Sequence

from pra.types import Message
from pra.errors import UserError


@dataclass(frozen=True)
class SamplingParams:
    """A plain value object, like vLLM's. temperature 0 means greedy."""
    n: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 64
    stop: tuple[str, ...] = ()
    seed: int | None = None


@dataclass(frozen=True)
class Completion:
    text: str          # generated text, cut before the first stop string
    tokens: int        # generated tokens counted by the backend
    stopped: bool      # True if a stop string or end-of-sequence ended it, False if max_tokens did


@dataclass
class BackendStats:
    prompt_tokens: int = 0
    generated_tokens: int = 0
    calls: int = 0
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


class BackendNotInstalled(UserError, RuntimeError):
    pass


class LMBackend(ABC):
    """A frozen policy LM. Implementations: transformers (here), vLLM in process, OpenAI-compatible HTTP."""

    name: str
    stats: BackendStats
    context_window: int | None = None     # tokens of prompt and generation together; None: not known here

    @property
    @abstractmethod
    def has_chat_template(self) -> bool: ...

    def prompt_tokens(self, prompt: str) -> int | None:
        """How many tokens ``prompt`` takes, where the backend can tell (to check it fits the context)."""
        return None

    def clear_prefix_cache(self) -> None:
        """Forget the prompt prefixes kept for reuse, so that the next call starts cold (benchmarks);
        a backend that keeps none has nothing to forget."""

    @abstractmethod
    def render(self, messages: list[Message], assistant_prefix: str = "") -> str:
        """One prompt string: the chat (template or plain text) followed by the assistant's text so far."""

    @abstractmethod
    def generate(self, prompts: list[str], params: SamplingParams,
                 seeds: Sequence[int] | None = None) -> list[list[Completion]]:
        """``params.n`` completions per prompt, in prompt order. ``seeds`` (one per prompt) seed each
        prompt's samples on their own, so that they do not depend on what else is in the call; without
        them ``params.seed`` seeds the call."""

    @abstractmethod
    def choice_logprobs(self, prompts: list[str], choices: list[list[str]]) -> list[dict[str, float]]:
        """For each prompt, log-probabilities (renormalised over the choices) of each choice as the next
        token. Used to read an answer letter without generation (direct answers, forced answers)."""

    @abstractmethod
    def slot_logprobs(self, prompts: list[tuple[str, str]], digits: tuple[str, str] = ("0", "1"),
                      sep: str = ",") -> list[SlotLogprobs]:
        """Read a two-slot answer ``d1<sep>d2`` after each prompt, given as (shared prefix, own suffix):
        log p of each digit as the next token (slot 1), then, after the more likely slot-1 digit and
        ``sep``, log p of each digit again (slot 2) -- what greedy decoding of the answer would see.
        Prompts that share a prefix may share its computation (KV reuse, prefix caching)."""


@dataclass(frozen=True)
class SlotLogprobs:
    """Log-probabilities of the digit tokens at the two output slots of an ``r,s`` answer."""
    slot1: dict[str, float]
    slot2: dict[str, float]


def cut_at_stop(text: str, stop: tuple[str, ...]) -> tuple[str, bool]:
    """Cut ``text`` before the earliest stop string; say whether one was found."""
    cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


STOP_WINDOW = 8     # newest tokens decoded per step to look for a stop string


def render_chat(tokenizer, messages: list[Message], assistant_prefix: str = "") -> str:
    """``LMBackend.render`` for backends holding a Hugging Face tokenizer, so that all of them build the
    same prompt: the chat template (plain text without one), then the assistant's text so far."""
    if tokenizer.chat_template:
        chat = [{"role": m.role, "content": m.content} for m in messages]
        return tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) + assistant_prefix
    return "\n\n".join(m.content for m in messages) + "\n\n" + assistant_prefix


class TokenizerBackend(LMBackend):
    """A backend that renders, splits and counts prompts with a Hugging Face tokenizer
    (``self.tokenizer``), the same way whichever engine runs them."""

    tokenizer: Any

    @property
    def has_chat_template(self) -> bool:
        return bool(self.tokenizer.chat_template)

    def render(self, messages: list[Message], assistant_prefix: str = "") -> str:
        return render_chat(self.tokenizer, messages, assistant_prefix)

    def _tokens(self, text: str, head: bool = True) -> list[int]:
        """The ids of ``text``; chat templates carry their special tokens, so only a plain prompt's head
        gets the tokenizer's BOS (a suffix tokenized apart, ``head=False``, never does)."""
        return self.tokenizer(text, add_special_tokens=head and not self.has_chat_template)["input_ids"]

    def prompt_tokens(self, prompt: str) -> int:
        return len(self._tokens(prompt))


class TokenDecoderBackend(TokenizerBackend):
    """A tokenizer backend that decodes token by token in this process (transformers, llama.cpp): it
    knows its end tokens (``self._ends``) and turns the ids it decoded into completions itself."""

    _ends: set[int]

    def _stopped(self, ids: list[int], stop: tuple[str, ...]) -> bool:
        """Whether the newest tokens of ``ids`` hold a stop string."""
        if not stop:
            return False
        tail = self.tokenizer.decode(ids[-STOP_WINDOW:], skip_special_tokens=True)
        return any(s in tail for s in stop)

    def _completion(self, ids: list[int], params: SamplingParams) -> Completion:
        """A completion from decoded token ids: cut at the first end token, then at the first stop
        string; the end token counts among its tokens."""
        ended = next((k for k, t in enumerate(ids) if t in self._ends), None)
        kept = ids if ended is None else ids[:ended]
        text, found = cut_at_stop(self.tokenizer.decode(kept, skip_special_tokens=True), params.stop)
        done = Completion(text=text, tokens=len(kept) + (ended is not None), stopped=found or ended is not None)
        self.stats.generated_tokens += done.tokens
        return done


class MissingLogprobs(UserError):
    """A wanted token is not in a top-k list. Its log-prob is unknown, not the lowest: filling in a floor
    made every missing letter tie, and ``max`` then picked whichever came first (A)."""


def pick_logprobs(top: dict, keys: list) -> list[float]:
    """Log-probs of ``keys`` from a top-k list (token -> log p), the most that servers return; refuses
    (``MissingLogprobs``) when one of them is missing, since neither an answer nor a probability read
    without it can be trusted."""
    missing = [k for k in keys if k not in top]
    if missing:
        raise MissingLogprobs(f"the top-{len(top)} log-probs lack {', '.join(map(repr, missing))}: their "
                              "values are unknown; raise top_logprobs (and the server's max_logprobs) or use "
                              "a backend with full logits (transformers)")
    return [top[k] for k in keys]


def single_token_ids(tokenizer, choices: Sequence[str], model: str) -> list[int]:
    """The token id of each choice (an answer letter, a digit), which must be one token to be read as
    the next token's probability."""
    ids = [tokenizer.encode(c, add_special_tokens=False) for c in choices]
    for c, tok in zip(choices, ids):
        if len(tok) != 1:
            raise UserError(f"choice {c!r} is not a single token for {model} ({tok})")
    return [tok[0] for tok in ids]


def renormalise(logprobs: dict[str, float]) -> dict[str, float]:
    """Log-softmax over the given entries only."""
    top = max(logprobs.values())
    z = top + math.log(sum(math.exp(v - top) for v in logprobs.values()))
    return {k: v - z for k, v in logprobs.items()}
