"""Policy backend on Hugging Face transformers: batched generation and scoring on CPU or GPU, with
automatic prefix caching (``prefix_cache.py``) and a decode loop that drops finished rows."""
from __future__ import annotations

import os
import time
from typing import Iterator, Sequence

import torch
from transformers import Cache
from transformers.cache_utils import DynamicLayer

from pra.models import cache_argument, load_causal_lm
from pra.backends.base import (BackendStats, Completion, SamplingParams, SlotLogprobs,
                               TokenDecoderBackend, single_token_ids)
from pra.backends.prefix_cache import BLOCK, PrefixCache
from pra.selection import stable_seed

FORWARD_COST = 32        # the fixed cost of one forward pass, in tokens of work (one CPU core, ~135M)


class TransformersBackend(TokenDecoderBackend):
    def __init__(self, model: str, batch_size: int = 32, dtype: str | None = None, device: str | None = None,
                 adapter: str | None = None, share_prefix: bool = True, cache_tokens: int = 64_000,
                 model_kwargs: dict | None = None):
        self.name = model
        self.model, self.tokenizer = load_causal_lm(model, dtype=dtype, device=device, adapter=adapter,
                                                    model_kwargs=model_kwargs)
        self.batch_size = batch_size
        self.stats = BackendStats(extra={"cached_prompt_tokens": 0})
        # share_prefix=False turns reuse off: the naive cost, the same numbers. Sliding-window layers
        # (Gemma 3) keep every state here and get their window from the mask (``_attention``).
        self.share_prefix = share_prefix
        text = self.model.config.get_text_config()
        self.window = getattr(text, "sliding_window", None)
        self.context_window = getattr(text, "max_position_embeddings", None)
        self.prefix_cache = PrefixCache(cache_tokens)   # valid while the weights stay as they are
        self._cache_arg = cache_argument(self.model)
        self._n_layers, self._kv_heads = text.num_hidden_layers, text.num_key_value_heads
        self._head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        # Tokens that end a sequence: the model's end-of-turn ids, its tokenizer's EOS, and padding.
        model_eos = self.model.generation_config.eos_token_id
        self._ends = {*(model_eos if isinstance(model_eos, list) else [model_eos]),
                      self.tokenizer.eos_token_id, self.tokenizer.pad_token_id}

    def clear_prefix_cache(self) -> None:
        self.prefix_cache.clear()

    @property
    def device(self) -> torch.device:
        return self.model.device

    # -- forward passes -------------------------------------------------------------------------------

    def _kv_buffer(self, n_rows: int, length: int) -> torch.Tensor:
        return torch.zeros(n_rows, self._kv_heads, length, self._head_dim, dtype=self.model.dtype, device=self.device)

    def _forward(self, rows: list[list[int]], reuse: bool, room: int) -> tuple[Cache, torch.Tensor, torch.Tensor]:
        """One forward pass over ``rows`` (token ids), each starting after its longest cached prefix.
        Rows are laid out [pad | cached prefix | pad | new tokens] so that all end in the last column.
        Returns the batch's cache (with room for ``room`` more tokens), its attention mask and each
        row's next-token logits."""
        n_rows = len(rows)
        hits = [self.prefix_cache.lookup(r) if reuse else (None, 0) for r in rows]
        cached = max(n for _, n in hits)
        width = max(len(r) - n for r, (_, n) in zip(rows, hits))
        mask = torch.zeros(n_rows, cached + width, dtype=torch.long)
        ids = torch.full((n_rows, width), self.tokenizer.pad_token_id, dtype=torch.long)
        pos = torch.zeros(n_rows, width, dtype=torch.long)
        for i, (r, (_, n)) in enumerate(zip(rows, hits)):
            new = len(r) - n
            mask[i, cached - n:cached] = 1
            mask[i, cached + width - new:] = 1
            ids[i, width - new:] = torch.tensor(r[n:])
            pos[i, width - new:] = torch.arange(n, len(r))
        # The batch's cache: room for every column and the ``room`` tokens to come, the cached prefixes
        # copied in. It holds every layer in full, sliding ones too (the model would trim those).
        capacity = cached + width + room
        layers = [GrowingLayer(self._kv_buffer(n_rows, capacity), self._kv_buffer(n_rows, capacity))
                  for _ in range(self._n_layers)]
        for i, (entry, n) in enumerate(hits):
            if entry is not None and n:
                for offset, states in PrefixCache.pieces(entry, n):
                    for layer, (k, v) in zip(layers, states):
                        layer.write(i, cached - n + offset, k, v)
        for layer in layers:
            layer.advance(cached)
        cache = Cache(layers=layers)
        mask = mask.to(self.device)
        out = self.model(input_ids=ids.to(self.device), attention_mask=self._attention(mask, width),
                         position_ids=pos.to(self.device), **{self._cache_arg: cache}, use_cache=True,
                         logits_to_keep=1)   # the vocabulary projection only where it is read
        new_tokens = sum(len(r) - n for r, (_, n) in zip(rows, hits))
        self.stats.prompt_tokens += new_tokens
        self.stats.extra["cached_prompt_tokens"] += sum(n for _, n in hits)
        if reuse:
            for i, (r, (entry, n)) in enumerate(zip(rows, hits)):
                start = cached + width - (len(r) - n)
                self.prefix_cache.store(r, entry, n, [(layer.keys[i, :, start:], layer.values[i, :, start:])
                                                      for layer in cache.layers])
        return cache, mask, out.logits[:, -1].float()

    def _attention(self, mask: torch.Tensor, n_query: int) -> torch.Tensor | dict[str, torch.Tensor]:
        """The attention mask for a pass whose queries are the last ``n_query`` columns. The 2-D padding
        mask serves full attention. A sliding window must be measured in positions, not columns (rows
        carry padding inside), so windowed models get both 4-D masks built from true positions."""
        if self.window is None:
            return mask
        kpos = mask.cumsum(-1) - 1                                 # real tokens sit in order
        q, k = kpos[:, -n_query:, None], kpos[:, None, :]
        full = (mask[:, None, :] == 1) & (k <= q)
        full[:, :, -n_query:] |= torch.eye(n_query, dtype=torch.bool, device=mask.device)  # pad queries
        return {"full_attention": full[:, None], "sliding_attention": (full & (q - k < self.window))[:, None]}

    def _warm_shared_prefixes(self, rows: list[list[int]]) -> None:
        """Run and cache, first, the longest prefixes that several rows share and the cache lacks: a
        question's head, common to its beam's prompts, is then computed once for all of them."""
        distinct = sorted(set(map(tuple, rows)))
        shared = set()
        for a, b in zip(distinct, distinct[1:]):
            n = len(os.path.commonprefix([a, b])) // BLOCK * BLOCK
            if n >= 2 * BLOCK and a[:n] not in distinct:
                shared.add(a[:n])
        todo = [list(p) for p in sorted(shared)
                if len(p) - self.prefix_cache.lookup(list(p))[1] > 2 * BLOCK]
        for _ in self._batches(todo):
            pass

    def _batches(self, rows: list[list[int]], room: int = 0) -> Iterator[tuple[list[list[int]], Cache, torch.Tensor, torch.Tensor]]:
        """Forward passes over the distinct rows, ``batch_size`` at a time, those with the fewest new
        tokens together (padding costs full compute on a CPU). Yields (for each batch row the indices
        of the input rows equal to it, cache, mask, next-token logits); the caches have ``room`` for the
        tokens the caller will append."""
        reuse = self.share_prefix
        if reuse and len(rows) > 1:
            self._warm_shared_prefixes(rows)
        copies: dict[tuple[int, ...], list[int]] = {}
        for i, r in enumerate(rows):
            copies.setdefault(tuple(r), []).append(i)
        new = {r: len(r) - (self.prefix_cache.lookup(list(r))[1] if reuse else 0) for r in copies}
        chunk: list[tuple[int, ...]] = []
        for r in sorted(copies, key=lambda r: (new[r], len(r))):
            # Rows come shortest first, so a row widens the batch to its own length and pads the rows
            # before it: start a new batch when that padding would cost more than another forward pass.
            if chunk and (len(chunk) == self.batch_size or
                          len(chunk) * (new[r] - new[chunk[-1]]) > FORWARD_COST):
                yield [copies[c] for c in chunk], *self._forward([list(c) for c in chunk], reuse, room)
                chunk = []
            chunk.append(r)
        if chunk:
            yield [copies[c] for c in chunk], *self._forward([list(c) for c in chunk], reuse, room)

    # -- the backend interface --------------------------------------------------------------------------

    @torch.inference_mode()
    def generate(self, prompts: list[str], params: SamplingParams,
                 seeds: Sequence[int] | None = None) -> list[list[Completion]]:
        start = time.perf_counter()
        sample = params.temperature > 0
        rows = [self._tokens(p) for p in prompts for _ in range(params.n)]
        generators = None
        if sample and (seeds is not None or params.seed is not None):
            # One generator per sample, seeded by its prompt's seed and its index: a sample never depends
            # on what else is in the batch. Without seeds, by the prompt's content and position, not a
            # call counter, so the same command gives the same samples however often the backend ran.
            seeds = seeds or [stable_seed(params.seed, i, p) for i, p in enumerate(prompts)]
            generators = [torch.Generator(device=self.device).manual_seed(stable_seed(s, k))
                          for s in seeds for k in range(params.n)]
        flat: list[Completion | None] = [None] * len(rows)
        for groups, cache, mask, logits in self._batches(rows, params.max_tokens):
            if sample:   # equal prompts draw their own samples: one decode row per copy
                owner = torch.tensor([j for j, g in enumerate(groups) for _ in g], device=self.device)
                if len(owner) > len(groups):
                    cache.batch_select_indices(owner)
                    mask, logits = mask[owner], logits[owner]
                groups = [[i] for g in groups for i in g]
            row_generators = generators and [generators[g[0]] for g in groups]
            for g, ids in zip(groups, self._decode(cache, mask, logits, params, row_generators)):
                done = self._completion(ids, params)
                for i in g:   # greedy copies are alike: decoded, and counted in stats, once
                    flat[i] = done
        self.stats.calls += 1
        self.stats.seconds += time.perf_counter() - start
        return [flat[i * params.n:(i + 1) * params.n] for i in range(len(prompts))]

    def _decode(self, cache: Cache, mask: torch.Tensor, logits: torch.Tensor, params: SamplingParams,
                generators: list[torch.Generator] | None) -> list[list[int]]:
        """Sample up to ``max_tokens`` per row; a row that ends (end token or stop string) leaves the
        batch at once, so the rest do not carry it."""
        out: list[list[int]] = [[] for _ in range(len(logits))]
        alive = list(range(len(logits)))
        pos = mask.sum(-1)
        for t in range(params.max_tokens):
            nxt = pick_tokens(logits, params, generators and [generators[a] for a in alive])
            keep = []
            for j, tok in enumerate(nxt.tolist()):
                row = out[alive[j]]
                row.append(tok)
                if tok not in self._ends and not self._stopped(row, params.stop):
                    keep.append(j)
            if not keep or t == params.max_tokens - 1:
                break
            if len(keep) < len(alive):
                idx = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(idx)
                mask, pos, nxt = mask[idx], pos[idx], nxt[idx]
                alive = [alive[j] for j in keep]
            mask = torch.cat([mask, mask.new_ones(len(alive), 1)], dim=1)
            logits = self.model(input_ids=nxt[:, None], attention_mask=self._attention(mask, 1), position_ids=pos[:, None],
                                **{self._cache_arg: cache}, use_cache=True).logits[:, -1].float()
            pos = pos + 1
        return out

    def token_ids(self, choices: list[str] | tuple[str, ...]) -> list[int]:
        return single_token_ids(self.tokenizer, choices, self.name)

    @torch.inference_mode()
    def choice_logprobs(self, prompts: list[str], choices: list[list[str]]) -> list[dict[str, float]]:
        start = time.perf_counter()
        choice_ids = [self.token_ids(c) for c in choices]
        out: list[dict[str, float] | None] = [None] * len(prompts)
        for groups, _, _, logits in self._batches([self._tokens(p) for p in prompts]):
            for g, row in zip(groups, logits):
                for i in g:
                    lp = torch.log_softmax(row[choice_ids[i]], dim=-1)
                    out[i] = dict(zip(choices[i], lp.tolist()))
        self.stats.calls += 1
        self.stats.seconds += time.perf_counter() - start
        return out

    @torch.inference_mode()
    def slot_logprobs(self, prompts: list[tuple[str, str]], digits: tuple[str, str] = ("0", "1"),
                      sep: str = ",") -> list[SlotLogprobs]:
        """Both slots from one pass over each prompt plus two tokens. The prefix of each (prefix, suffix)
        pair is tokenized on its own, so that prompts sharing it share whole tokens, and the prefix
        cache computes it once."""
        start = time.perf_counter()
        digit_ids, (sep_id,) = self.token_ids(digits), self.token_ids([sep])
        rows = [self._tokens(pre) + self._tokens(suf, head=False)
                for pre, suf in prompts]
        out: list[SlotLogprobs | None] = [None] * len(prompts)
        for groups, cache, mask, logits in self._batches(rows, 2):
            first = logits.log_softmax(-1)[:, digit_ids]
            # Slot 2: feed the more likely slot-1 digit and the separator, as greedy decoding would.
            chosen = torch.tensor(digit_ids, device=self.device)[first.argmax(-1)]
            step = torch.stack([chosen, torch.full_like(chosen, sep_id)], dim=1)
            mask2 = torch.cat([mask, mask.new_ones(len(groups), 2)], dim=1)
            pos2 = mask.sum(-1)[:, None] + torch.arange(2, device=self.device)[None, :]
            second = self.model(input_ids=step, attention_mask=self._attention(mask2, 2), position_ids=pos2,
                                **{self._cache_arg: cache}, use_cache=True, logits_to_keep=1).logits[:, -1].float().log_softmax(-1)[:, digit_ids]
            self.stats.prompt_tokens += 2 * len(groups)
            for g, a, b in zip(groups, first.tolist(), second.tolist()):
                for i in g:
                    out[i] = SlotLogprobs(dict(zip(digits, a)), dict(zip(digits, b)))
        self.stats.calls += 1
        self.stats.seconds += time.perf_counter() - start
        return out


class GrowingLayer(DynamicLayer):
    """A cache layer written in place into a buffer with room to spare. The default layer concatenates,
    copying the whole cache at every decoding step: for 32 rows of 600 cached tokens, ~0.9 GB per step."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        super().__init__()
        self._keys, self._values, self.length = keys, values, 0     # [rows, kv heads, capacity, head dim]
        self.is_initialized, self.device = True, keys.device
        self.advance(0)

    def write(self, row: int, start: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        self._keys[row, :, start:start + keys.shape[-2]] = keys
        self._values[row, :, start:start + values.shape[-2]] = values

    def advance(self, n: int) -> None:
        self.length += n
        self.keys, self.values = self._keys[:, :, :self.length], self._values[:, :, :self.length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        n = key_states.shape[-2]
        if self.length + n > self._keys.shape[-2]:        # out of room: grow like the default layer
            self._keys = torch.cat([self.keys, key_states], dim=-2)
            self._values = torch.cat([self.values, value_states], dim=-2)
        else:
            self._keys[:, :, self.length:self.length + n] = key_states
            self._values[:, :, self.length:self.length + n] = value_states
        self.advance(n)
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._keys, self._values = self._keys[indices], self._values[indices]
        self.advance(0)


def pick_tokens(logits: torch.Tensor, params: SamplingParams,
                generators: list[torch.Generator] | None) -> torch.Tensor:
    """Greedy at temperature 0; else a draw from the temperature-scaled distribution cut to its top-p
    nucleus (the smallest set of likeliest tokens whose mass reaches top_p), each row from its own
    generator when given."""
    if params.temperature <= 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits / params.temperature, dim=-1)
    if params.top_p < 1:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        sorted_p[sorted_p.cumsum(-1) - sorted_p > params.top_p] = 0
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
    if generators is None:
        return torch.multinomial(probs, 1).squeeze(-1)
    return torch.cat([torch.multinomial(p, 1, generator=g) for p, g in zip(probs, generators)])
