"""Policy backend on vLLM in process (GPU): continuous batching and automatic prefix caching.

Prompts go to the engine as token ids, tokenized here as TransformersBackend does (no special tokens
added to chat-template prompts), so both backends read the same tokens. Log-probs come as top-k lists
(``top_logprobs``, at most the engine's ``max_logprobs``, 20 by default): a digit or letter missing
from the list is unknown, and ``pick_logprobs`` refuses it.
"""
from __future__ import annotations

import itertools
import time

from pra.backends.base import (BackendNotInstalled, BackendStats, Completion, LMBackend, Message, SamplingParams,
                               SlotLogprobs, cut_at_stop, pick_logprobs, render_chat, renormalise)


def _import_vllm():
    try:
        import vllm
    except ImportError as err:
        raise BackendNotInstalled(f"the vllm backend needs vLLM and a CUDA GPU ({err}); "
                                  "run: pip install 'pra[gpu]'") from err
    return vllm


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


def first_top_logprobs(output) -> dict[int, float]:
    """Token id -> log p at the first generated position (``outputs[0].logprobs[0]``, id -> Logprob)."""
    return {tid: lp.logprob for tid, lp in output.outputs[0].logprobs[0].items()}


class VLLMBackend(LMBackend):
    def __init__(self, model: str, dtype: str = "auto", adapter: str | None = None, top_logprobs: int = 20,
                 seed: int = 0, **engine_kwargs):
        """``model``: embedded name, hub id or folder; ``adapter``: a peft LoRA folder served with
        ``enable_lora`` (pass ``max_lora_rank`` if its rank exceeds 16); ``engine_kwargs`` go to
        ``vllm.LLM`` (tensor_parallel_size, gpu_memory_utilization, max_model_len, ...)."""
        vllm = _import_vllm()
        from pra.models import resolve

        llm = vllm.LLM(model=resolve(model), dtype=dtype, seed=seed, enable_prefix_caching=True,
                       enable_lora=adapter is not None, **engine_kwargs)
        lora = None
        if adapter:
            from vllm.lora.request import LoRARequest
            lora = LoRARequest("pra-adapter", 1, adapter)
        self._bind(model, llm, vllm.SamplingParams, lora, top_logprobs)

    def _bind(self, name: str, llm, sampling_cls, lora=None, top_logprobs: int = 20) -> None:
        """All set-up but starting the engine, so that tests can bind a stand-in for ``vllm.LLM``."""
        self.name, self.llm, self._sampling, self._lora = name, llm, sampling_cls, lora
        self.tokenizer = llm.get_tokenizer()
        self.top_logprobs = top_logprobs
        self.stats = BackendStats(extra={"cached_prompt_tokens": 0})
        self._seeds = itertools.count()

    @property
    def has_chat_template(self) -> bool:
        return bool(self.tokenizer.chat_template)

    def render(self, messages: list[Message], assistant_prefix: str = "") -> str:
        return render_chat(self.tokenizer, messages, assistant_prefix)

    def _encode(self, text: str, head: bool = True) -> list[int]:
        # Chat templates carry their special tokens; plain prompts get the tokenizer's BOS at the head.
        return self.tokenizer(text, add_special_tokens=head and not self.has_chat_template)["input_ids"]

    def token_ids(self, choices: list[str] | tuple[str, ...]) -> list[int]:
        ids = [self.tokenizer.encode(c, add_special_tokens=False) for c in choices]
        for c, tok in zip(choices, ids):
            if len(tok) != 1:
                raise ValueError(f"choice {c!r} is not a single token for {self.name} ({tok})")
        return [tok[0] for tok in ids]

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

    def _next_token(self):
        return self._sampling(n=1, temperature=0.0, max_tokens=1, logprobs=self.top_logprobs)

    def generate(self, prompts: list[str], params: SamplingParams) -> list[list[Completion]]:
        """One engine call; each prompt gets its own seed (``params.seed`` + a running count), so that
        equal prompts still draw different samples."""
        start = time.perf_counter()
        greedy = params.temperature <= 0
        per_prompt = [self._sampling(**sampling_kwargs(
            params, None if params.seed is None else params.seed + next(self._seeds))) for _ in prompts]
        outs = self._run([self._encode(p) for p in prompts], per_prompt)
        self._done(start)
        return [completions(o, params.stop) * (params.n if greedy else 1) for o in outs]

    def choice_logprobs(self, prompts: list[str], choices: list[list[str]]) -> list[dict[str, float]]:
        start = time.perf_counter()
        outs = self._run([self._encode(p) for p in prompts], self._next_token())
        result = [renormalise(dict(zip(opts, pick_logprobs(first_top_logprobs(o), self.token_ids(opts)))))
                  for o, opts in zip(outs, choices)]
        self._done(start)
        return result

    def slot_logprobs(self, prompts: list[tuple[str, str]], digits: tuple[str, str] = ("0", "1"),
                      sep: str = ",") -> list[SlotLogprobs]:
        """Two engine calls of one token each: slot 1 after the prompt, slot 2 after the prompt, the
        more likely slot-1 digit and ``sep``. Prefix and suffix are tokenized apart, as in
        TransformersBackend; prefix caching computes each shared prefix (and, in the second call, each
        whole prompt) once."""
        start = time.perf_counter()
        digit_ids, (sep_id,) = self.token_ids(digits), self.token_ids([sep])
        heads = {p: self._encode(p) for p in dict.fromkeys(p for p, _ in prompts)}
        ids = [heads[p] + self._encode(s, head=False) for p, s in prompts]
        first = [pick_logprobs(first_top_logprobs(o), digit_ids) for o in self._run(ids, self._next_token())]
        chosen = [digit_ids[max(range(len(digits)), key=lp.__getitem__)] for lp in first]
        second = [pick_logprobs(first_top_logprobs(o), digit_ids)
                  for o in self._run([x + [c, sep_id] for x, c in zip(ids, chosen)], self._next_token())]
        self._done(start)
        return [SlotLogprobs(dict(zip(digits, a)), dict(zip(digits, b))) for a, b in zip(first, second)]
