"""Policy backend on llama.cpp in process (llama-cpp-python's C API): quantized GGUF weights, batched
decoding of many sequences per forward pass, and prefix reuse across calls.

Why this backend: on a CPU, decoding reads every weight once per forward pass, so the cost per token
is set by memory bandwidth. A Q4_K_M GGUF is a quarter of bfloat16's bytes, and one ``llama_decode``
over all B x b candidates reads them once for all. One unified KV cache holds every sequence; a
sequence that starts with another's tokens is tagged onto its cells (``llama_memory_seq_cp``, no copy),
so the question and the earlier steps are computed once per question, not once per candidate, and a
call starts from the longest prefix that the previous call left in the cache.

Tokens come from the model's Hugging Face tokenizer (read from the GGUF: the same vocabulary and chat
template), so prompts, letters and digits are the same token ids as on the transformers backend.
Readouts are exact: log-probabilities of the wanted tokens from the full logits, never sampled text.
Sampling (temperature, top-p) is done here with one NumPy generator per sample, seeded as the
transformers backend seeds its own.
"""
from __future__ import annotations

import ctypes
import os
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from pra.backends.base import (BackendNotInstalled, BackendStats, Completion, SamplingParams, SlotLogprobs,
                               TokenDecoderBackend, single_token_ids)
from pra.errors import UserError
from pra.selection import stable_seed

NUCLEUS_CANDIDATES = 512    # tokens sorted for top-p sampling when they hold the nucleus
ENGINE_ARGS = ("n_ctx", "max_seqs", "n_batch", "threads")   # what --engine-arg may set here


def default_threads() -> int:
    """``OMP_NUM_THREADS`` when set (the one-job-per-core convention), else every core we may use."""
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():
        return max(1, int(os.environ["OMP_NUM_THREADS"]))
    return len(os.sched_getaffinity(0))


@dataclass
class _Seq:
    """A sequence held in the KV cache: its id and the tokens whose keys and values it holds."""
    sid: int
    tokens: list[int] = field(default_factory=list)


class LlamaCppBackend(TokenDecoderBackend):
    def __init__(self, model: str, n_ctx: int = 32768, max_seqs: int = 64, n_batch: int = 512,
                 threads: int | None = None, adapter: str | None = None, share_prefix: bool = True):
        """``model``: an embedded name with a GGUF (see ``pra models``) or a path to a ``.gguf`` file.
        ``n_ctx`` is the KV cache's size in tokens, shared by all sequences; ``max_seqs`` the most
        sequences held at once (prompts, samples and the previous call's prefixes). ``share_prefix``
        False computes every prompt from its first token: the naive cost, for benchmarks."""
        try:
            import llama_cpp as ll
        except ImportError as err:
            raise BackendNotInstalled(
                "the llamacpp backend needs llama-cpp-python: `make setup-test` builds it for any x86-64 CPU "
                f"(or pip install 'pra[server]' with the Makefile's CMAKE_ARGS) ({err})") from err
        if adapter:
            raise UserError("the llamacpp backend reads GGUF weights without a peft adapter; serve a LoRA "
                            "agent with --agent-backend transformers")
        from pra.models import gguf_tokenizer, model_gguf

        self.ll, self.name = ll, model
        path = model_gguf(model)
        self.tokenizer = gguf_tokenizer(model)
        _quiet(ll)
        ll.llama_backend_init()
        self._model = ll.llama_model_load_from_file(str(path).encode(), ll.llama_model_default_params())
        if not self._model:
            raise UserError(f"llama.cpp could not load {path}")
        params = ll.llama_context_default_params()
        threads = threads or default_threads()
        params.n_ctx, params.n_batch, params.n_ubatch = n_ctx, n_batch, n_batch
        params.n_seq_max, params.kv_unified = max_seqs, True
        params.n_threads = params.n_threads_batch = threads
        self._ctx = ll.llama_init_from_model(self._model, params)
        if not self._ctx:
            raise UserError(f"llama.cpp could not make a context of {n_ctx} tokens for {path}")
        self._mem = ll.llama_get_memory(self._ctx)
        self._vocab = ll.llama_model_get_vocab(self._model)
        self.n_vocab = ll.llama_vocab_n_tokens(self._vocab)
        self.n_ctx, self.max_seqs, self.n_batch = n_ctx, max_seqs, n_batch
        self._batch = ll.llama_batch_init(n_batch, 0, 1)
        self.context_window = ll.llama_model_n_ctx_train(self._model)
        self.share_prefix = share_prefix
        self._held: list[_Seq] = []          # the previous call's sequences, kept as prefixes to reuse
        self._free = list(range(max_seqs))
        self._ends = {t for t in range(self.n_vocab) if ll.llama_vocab_is_eog(self._vocab, t)} | \
            {self.tokenizer.eos_token_id}
        self.stats = BackendStats(extra={"cached_prompt_tokens": 0, "forward_passes": 0, "threads": threads})

    def close(self) -> None:
        if getattr(self, "_ctx", None):
            self.ll.llama_batch_free(self._batch)
            self.ll.llama_free(self._ctx)
            self.ll.llama_model_free(self._model)
            self._ctx = None

    # -- the KV cache -------------------------------------------------------------------------------

    def clear_prefix_cache(self) -> None:
        self._drop(self._held)
        self._held = []

    def _new_seq(self) -> _Seq:
        if not self._free:
            raise UserError(f"llamacpp: more than {self.max_seqs} sequences at once; raise max_seqs")
        return _Seq(self._free.pop())

    def _drop(self, seqs: list[_Seq]) -> None:
        for s in seqs:
            self.ll.llama_memory_seq_rm(self._mem, s.sid, -1, -1)
            self._free.append(s.sid)

    def _forward(self, entries: list[tuple[int, int, int, bool]]) -> list[np.ndarray]:
        """One or more ``llama_decode`` calls over (token, position, sequence, wants logits) entries;
        the logits of the entries that want them, in order."""
        out = []
        for i in range(0, len(entries), self.n_batch):
            chunk = entries[i:i + self.n_batch]
            b = self._batch
            for j, (tok, pos, sid, want) in enumerate(chunk):
                b.token[j], b.pos[j], b.n_seq_id[j], b.logits[j] = tok, pos, 1, want
                b.seq_id[j][0] = sid
            b.n_tokens = len(chunk)
            code = self.ll.llama_decode(self._ctx, b)
            if code != 0:
                raise UserError(f"llama.cpp decode failed ({code}): the KV cache of {self.n_ctx} tokens is "
                                "full; lower the batch size or raise n_ctx")
            self.stats.extra["forward_passes"] += 1
            for j, (*_, want) in enumerate(chunk):
                if want:
                    ptr = self.ll.llama_get_logits_ith(self._ctx, j)
                    out.append(np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy())
        return out

    def _prefill(self, rows: list[list[int]]) -> tuple[list[_Seq], list[np.ndarray]]:
        """Put each distinct row in a sequence of its own, starting from the longest prefix that a held
        sequence or an earlier row of this call has (at least its last token is computed, for its
        logits). A row is computed in the batched pass after its source's (a held sequence, or none:
        the first pass), so rows that extend one another, such as a trace read after each of its steps,
        compute each step once. Returns one sequence and the next-token logits per row (equal rows
        share both)."""
        distinct: dict[tuple[int, ...], _Seq] = {}
        plan: list[tuple[_Seq, list[int], _Seq | None, int]] = []     # (sequence, row, source, shared)
        level: dict[int, int] = {id(h): -1 for h in self._held}        # the pass each sequence is computed in
        sources = list(self._held) if self.share_prefix else []
        for row in rows:
            if tuple(row) in distinct:
                continue
            seq = distinct[tuple(row)] = self._new_seq()
            src, n = max(((h, _common(h.tokens, row)) for h in sources), key=lambda x: x[1], default=(None, 0))
            n = min(n, len(row) - 1)
            src = src if n else None
            level[id(seq)] = level[id(src)] + 1 if src is not None else 0
            plan.append((seq, row, src, n))
            seq.tokens = list(row)
            if self.share_prefix:
                sources.append(seq)
        logits: dict[int, np.ndarray] = {}
        for now in range(max(level[id(p[0])] for p in plan) + 1):
            entries, computed = [], []
            for seq, row, src, n in plan:
                if level[id(seq)] != now:
                    continue
                if n:
                    self.ll.llama_memory_seq_cp(self._mem, src.sid, seq.sid, 0, n)
                entries += [(row[p], p, seq.sid, p == len(row) - 1) for p in range(n, len(row))]
                computed.append(seq.sid)
                self.stats.prompt_tokens += len(row) - n
                self.stats.extra["cached_prompt_tokens"] += n
            logits.update(zip(computed, self._forward(entries)))
        seqs = [distinct[tuple(r)] for r in rows]
        return seqs, [logits[s.sid] for s in seqs]

    def _hold(self, seqs: list[_Seq]) -> None:
        """Keep ``seqs`` (prompts first) as the prefixes the next call may start from, as many as fit in
        half the cache and half the sequence table; drop everything else held."""
        keep: list[_Seq] = []
        for s in {id(s): s for s in seqs}.values():
            if len(keep) < self.max_seqs // 2 and _cells(keep + [s]) <= self.n_ctx // 2:
                keep.append(s)
        kept = {id(s) for s in keep}
        self._drop([h for h in self._held + seqs if id(h) not in kept and h.sid not in self._free])
        self._held = keep

    def _groups(self, rows: list[list[int]], per_row: int, extra_tokens: int) -> list[list[int]]:
        """Row indices in groups that fit in the half of the cache and of the sequence table that what
        is held leaves free: each row, its ``per_row`` copies and their ``extra_tokens`` each."""
        groups, current, cells = [], [], 0
        budget, seq_budget = self.n_ctx - self.n_ctx // 2 - 64, self.max_seqs - self.max_seqs // 2
        for i, row in enumerate(rows):
            need = len(row) + per_row * extra_tokens
            if current and (cells + need > budget or (len(current) + 1) * (1 + per_row) > seq_budget):
                groups.append(current)
                current, cells = [], 0
            current.append(i)
            cells += need
        return groups + [current] if current else groups

    # -- generation ---------------------------------------------------------------------------------

    def generate(self, prompts: list[str], params: SamplingParams,
                 seeds: Sequence[int] | None = None) -> list[list[Completion]]:
        start = time.perf_counter()
        sample = params.temperature > 0
        if sample:
            seeds = seeds or [stable_seed(params.seed, i, p) for i, p in enumerate(prompts)]
        rows = [self._tokens(p) for p in prompts]
        copies = params.n if sample else 1          # greedy samples are alike: decoded once, copied
        out: list[list[Completion]] = [[] for _ in prompts]
        for group in self._groups(rows, copies, params.max_tokens):
            prompt_seqs, logits = self._prefill([rows[i] for i in group])
            decoding = []
            for i, seq, first in zip(group, prompt_seqs, logits):
                for k in range(copies):
                    s = self._new_seq()
                    self.ll.llama_memory_seq_cp(self._mem, seq.sid, s.sid, 0, len(seq.tokens))
                    s.tokens = list(seq.tokens)
                    rng = np.random.default_rng(stable_seed(seeds[i], k)) if sample else None
                    decoding.append((i, s, first, rng))
            done = self._decode(decoding, params)
            for i, ids in done:
                out[i].append(self._completion(ids, params))
            self._hold(prompt_seqs + [s for _, s, _, _ in decoding])
        self.stats.calls += 1
        self.stats.seconds += time.perf_counter() - start
        return [o * (params.n if not sample else 1) for o in out]

    def _decode(self, rows: list, params: SamplingParams) -> list[tuple[int, list[int]]]:
        """Decode every row together, one forward pass per step over the rows still going; a row leaves
        at an end token, a stop string or ``max_tokens``."""
        gen: list[list[int]] = [[] for _ in rows]
        logits = [first for _, _, first, _ in rows]
        alive = list(range(len(rows)))
        for t in range(params.max_tokens):
            entries, still = [], []
            for j, lg in zip(alive, logits):
                _, seq, _, rng = rows[j]
                tok = pick_token(lg, params, rng)
                gen[j].append(tok)
                if tok in self._ends or self._stopped(gen[j], params.stop) or t == params.max_tokens - 1:
                    continue
                entries.append((tok, len(seq.tokens), seq.sid, True))
                seq.tokens.append(tok)
                still.append(j)
            if not still:
                break
            alive, logits = still, self._forward(entries)
        return [(rows[j][0], gen[j]) for j in range(len(rows))]

    # -- readouts -----------------------------------------------------------------------------------

    def _next_logprobs(self, rows: list[list[int]], then: int = 0) -> list[tuple[list[_Seq], list[np.ndarray]]]:
        """Log-softmax of the next-token logits after each row, group by group (``then``: tokens each
        row will add in the group before the next group starts)."""
        out: list = [None] * len(rows)
        for group in self._groups(rows, 0, then):
            seqs, logits = self._prefill([rows[i] for i in group])
            for i, s, lg in zip(group, seqs, logits):
                out[i] = (s, log_softmax(lg))
            yield group, out
            self._hold(seqs)

    def choice_logprobs(self, prompts: list[str], choices: list[list[str]]) -> list[dict[str, float]]:
        start = time.perf_counter()
        ids = [single_token_ids(self.tokenizer, c, self.name) for c in choices]
        result: list[dict[str, float] | None] = [None] * len(prompts)
        for group, out in self._next_logprobs([self._tokens(p) for p in prompts]):
            for i in group:
                lp = out[i][1][ids[i]]
                result[i] = dict(zip(choices[i], (lp - np.logaddexp.reduce(lp)).tolist()))
        self.stats.calls += 1
        self.stats.seconds += time.perf_counter() - start
        return result

    def slot_logprobs(self, prompts: list[tuple[str, str]], digits: tuple[str, str] = ("0", "1"),
                      sep: str = ",") -> list[SlotLogprobs]:
        """Slot 1 after each prompt; slot 2 after the more likely slot-1 digit and ``sep``, both fed in
        one batched pass. The prefix and the suffix are tokenized apart, as on transformers."""
        start = time.perf_counter()
        digit_ids = single_token_ids(self.tokenizer, digits, self.name)
        (sep_id,) = single_token_ids(self.tokenizer, [sep], self.name)
        rows = [self._tokens(pre) + self._tokens(suf, head=False)
                for pre, suf in prompts]
        result: list[SlotLogprobs | None] = [None] * len(prompts)
        for group, out in self._next_logprobs(rows, then=2):
            entries, firsts = [], []
            for i in group:
                seq, lp = out[i]
                first = lp[digit_ids]
                best = digit_ids[int(first.argmax())]
                n = len(seq.tokens)
                entries += [(best, n, seq.sid, False), (sep_id, n + 1, seq.sid, True)]
                seq.tokens += [best, sep_id]
                firsts.append(first)
            seconds = self._forward(entries)
            self.stats.prompt_tokens += len(entries)
            for i, first, lg in zip(group, firsts, seconds):
                result[i] = SlotLogprobs(dict(zip(digits, first.tolist())),
                                         dict(zip(digits, log_softmax(lg)[digit_ids].tolist())))
        self.stats.calls += 1
        self.stats.seconds += time.perf_counter() - start
        return result


def _cells(seqs: list[_Seq]) -> int:
    """KV cells that ``seqs`` take: each shares its longest prefix with an earlier one."""
    return sum(len(s.tokens) - max((_common(t.tokens, s.tokens) for t in seqs[:i]), default=0)
               for i, s in enumerate(seqs))


def _common(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    return x - np.logaddexp.reduce(x)


def pick_token(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator | None) -> int:
    """Greedy at temperature 0; else a draw from the temperature-scaled distribution cut to its top-p
    nucleus (the smallest set of likeliest tokens whose mass reaches top_p)."""
    if params.temperature <= 0 or rng is None:
        return int(logits.argmax())
    z = logits.astype(np.float64) / params.temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    if params.top_p < 1:
        # The nucleus lies among the likeliest few hundred tokens nearly always: sort those (a full sort
        # of 150k probabilities per token cost more than the forward pass of a small model), all if not.
        top = np.argpartition(-p, NUCLEUS_CANDIDATES)[:NUCLEUS_CANDIDATES] if len(p) > NUCLEUS_CANDIDATES else None
        if top is None or p[top].sum() < params.top_p:
            top = np.arange(len(p))
        order = top[np.argsort(-p[top], kind="stable")]
        sorted_p = p[order]
        keep = order[sorted_p.cumsum() - sorted_p <= params.top_p]
        return int(keep[rng.choice(len(keep), p=p[keep] / p[keep].sum())])
    return int(rng.choice(len(p), p=p))


_LOG_CALLBACK = None


def _quiet(ll) -> None:
    """Silence llama.cpp's load-time logging (it writes hundreds of lines to stderr)."""
    global _LOG_CALLBACK
    if _LOG_CALLBACK is None:
        _LOG_CALLBACK = ll.llama_log_callback(lambda level, text, data: None)
        ll.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p())
