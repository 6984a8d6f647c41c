"""Reading steps out of a transformers model: for every step of a trace, its pooled hidden state at
every layer (then reduced to a ``Trajectory``) and, optionally, what its tokens' next-token
distributions say (for the perplexity, max-probability and entropy baselines). One forward pass per
trace, traces in batches; works on any ``AutoModelForCausalLM``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import torch

from pra.pulse.features import Trajectory, trajectory
from pra.errors import UserError
from pra.models import cache_argument

MIN_SHARED = 8    # tokens: a shorter common opening is not worth a pass of its own


@dataclass(frozen=True)
class StepText:
    """A trace as the model reads it: the whole text and the character span of each step's body."""
    text: str
    spans: tuple[tuple[int, int], ...]


def step_text(head: str, steps: Sequence[str], notes: Sequence[str | None] | None = None) -> StepText:
    """``head`` (the rendered prompt up to the assistant's text), then ``Step i: text`` lines, exactly
    as ``prompts.steps_prefix`` writes them; ``notes[i]``, when given, is a line placed before step i
    (PULSE decoding's "step" placement of a passage)."""
    text, spans = head, []
    for i, s in enumerate(steps):
        note = notes[i] if notes else None
        if i:
            text += "\n"
        if note:
            text += note + "\n"
        text += f"Step {i + 1}: "
        spans.append((len(text), len(text) + len(s)))
        text += s
    return StepText(text, tuple(spans))


@dataclass
class StepReadout:
    """One step: its trajectory under each pooling, and token statistics when they were asked for."""
    trajectories: dict[str, Trajectory]     # pooling -> single-step Trajectory
    tokens: int
    nll: float | None = None                # mean -log p of the step's tokens
    max_prob: float | None = None           # mean over its tokens of the top next-token probability
    entropy: float | None = None            # mean next-token entropy (nats)


class StepReader:
    """Reads step readouts from ``model`` / ``tokenizer``. ``special_tokens``: let the tokenizer add
    its BOS (plain prompts) or not (chat templates already carry theirs), as the policy backend does."""

    def __init__(self, model, tokenizer, special_tokens: bool, batch_size: int = 8):
        if not tokenizer.is_fast:
            raise UserError("PULSE needs a fast tokenizer (character offsets locate the steps)")
        self.model, self.tokenizer = model, tokenizer
        self.special_tokens, self.batch_size = special_tokens, batch_size
        self.n_layers = model.config.get_text_config().num_hidden_layers

    @classmethod
    def from_backend(cls, backend, batch_size: int = 8) -> "StepReader":
        """The policy's own weights: PULSE reads the states of the model that wrote the steps."""
        if not hasattr(backend, "model") or not hasattr(backend, "tokenizer"):
            raise UserError(f"PULSE reads hidden states: the policy {backend.name!r} must run on the "
                             "transformers backend")
        return cls(backend.model, backend.tokenizer, not backend.has_chat_template, batch_size)

    def _token_spans(self, item: StepText) -> tuple[list[int], list[tuple[int, int]]]:
        enc = self.tokenizer(item.text, return_offsets_mapping=True, add_special_tokens=self.special_tokens)
        offsets = enc["offset_mapping"]
        spans = []
        for s, e in item.spans:
            inside = [j for j, (ts, te) in enumerate(offsets) if te > ts and ts < e and te > s]
            if not inside:
                raise ValueError(f"a step has no tokens (characters {s}:{e} of {item.text[-80:]!r})")
            spans.append((inside[0], inside[-1] + 1))
        return enc["input_ids"], spans

    @torch.inference_mode()
    def read(self, items: Sequence[StepText], token_stats: bool = False,
             only_last: bool = False) -> list[list[StepReadout]]:
        """Per item, a readout of each step (of its last step only with ``only_last``)."""
        out: list[list[StepReadout]] = []
        for s in range(0, len(items), self.batch_size):
            out += self._read_batch(items[s:s + self.batch_size], token_stats, only_last)
        return out

    def _read_batch(self, items: Sequence[StepText], token_stats: bool, only_last: bool) -> list[list[StepReadout]]:
        encoded = [self._token_spans(i) for i in items]
        if only_last:
            encoded = [(ids, spans[-1:]) for ids, spans in encoded]
        width = max(len(ids) for ids, _ in encoded)
        pad = self.tokenizer.pad_token_id
        device = self.model.device
        ids = torch.full((len(items), width), pad, dtype=torch.long)
        mask = torch.zeros(len(items), width, dtype=torch.long)
        for i, (row, _) in enumerate(encoded):       # right padding: positions stay 0..n-1
            ids[i, :len(row)] = torch.tensor(row)
            mask[i, :len(row)] = 1
        # Rows that open alike (the instructions; a question's head, for the candidates of its beam) run
        # that opening once; it ends before the first position whose output a step needs.
        first = min(a for _, spans in encoded for a, _ in spans)
        shared = min(len(os.path.commonprefix([r for r, _ in encoded])), first - 1) if len(encoded) > 1 else 0
        cache = None
        if shared >= MIN_SHARED:
            cache = self.model(input_ids=ids[:1, :shared].to(device), use_cache=True).past_key_values
            cache.batch_repeat_interleave(len(items))
        else:
            shared = 0
        # Logits only where a step's token is predicted (the position before it): the LM head over the
        # whole text would cost more than the blocks of a small model.
        wanted = sorted({p - 1 for _, spans in encoded for a, b in spans for p in range(a, b) if p > 0})
        keep = torch.tensor([p - shared for p in wanted] or [0], device=device) if token_stats else 1
        res = self.model(input_ids=ids[:, shared:].to(device), attention_mask=mask.to(device),
                         **{cache_argument(self.model): cache},
                         output_hidden_states=True, logits_to_keep=keep)
        layers = res.hidden_states                  # L+1 tensors [rows, T - shared, d]
        column = {p: j for j, p in enumerate(wanted)}
        results = []
        for i, (row, spans) in enumerate(encoded):
            spans = [(a - shared, b - shared) for a, b in spans]
            last = torch.stack([torch.stack([h[i, b - 1] for h in layers]) for a, b in spans]).float()
            mean = torch.stack([torch.stack([h[i, a:b].float().mean(0) for h in layers]) for a, b in spans])
            t_last, t_mean = trajectory(last), trajectory(mean)
            steps = []
            for k, (a, b) in enumerate(spans):
                readout = StepReadout({"last": t_last.take(slice(k, k + 1)), "mean": t_mean.take(slice(k, k + 1))},
                                      tokens=b - a)
                if token_stats:
                    _token_stats(readout, res.logits[i], column, row, a + shared, b + shared)
                steps.append(readout)
            results.append(steps)
        return results


def _token_stats(readout: StepReadout, logits: torch.Tensor, column: dict[int, int], row: list[int],
                 a: int, b: int) -> None:
    """Mean surprise, top probability and entropy of the next-token distributions that produced the
    step's tokens (a step's first token at position 0 has no prediction and is left out)."""
    positions = [p for p in range(a, b) if p > 0]
    logp = logits[[column[p - 1] for p in positions]].float().log_softmax(-1)
    target = torch.tensor([row[p] for p in positions], device=logp.device)
    readout.nll = float(-logp.gather(1, target[:, None]).mean())
    readout.max_prob = float(logp.max(-1).values.exp().mean())
    readout.entropy = float(-(logp.exp() * logp).sum(-1).mean())
