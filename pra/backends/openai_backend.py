"""Policy backend on any OpenAI-compatible completions server: vLLM serve, SGLang, llama.cpp server.

Prompts are rendered here with the model's own tokenizer and sent as text to ``POST /v1/completions``,
so the server's chat handling plays no part. Requests go out concurrently from a thread pool; the
server batches them (vLLM, SGLang) or queues them (llama.cpp). Log-probs come as top-k lists (k <= 20
on most servers): a wanted token missing from the list is asked again with a wider list, and if still
missing ``pick_logprobs`` refuses it. vLLM servers return exactly the wanted tokens
(``logprob_token_ids``), so nothing is missing there.

Server notes: llama-cpp-python's server needs ``--logits_all true`` for log-probs and ignores ``n``
(detected on the first short answer; samples then go one per request); its defaults ``top_k=40`` and
``repeat_penalty=1.1`` differ from vLLM's, pass ``extra_body={"top_k": 0, "repeat_penalty": 1.0}`` to
match. ``cache_prompt`` (sent by default) turns on prompt caching in llama.cpp's own server; vLLM logs
and ignores unknown fields, SGLang ignores them.
"""
from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import requests
from requests.adapters import HTTPAdapter

from pra.backends.base import (BackendStats, Completion, LMBackend, Message, SamplingParams, SlotLogprobs,
                               cut_at_stop, pick_logprobs, render_chat, renormalise, single_token_ids)
from pra.errors import UserError
from pra.selection import stable_seed


WIDE_TOP_LOGPROBS = 1000    # the second ask when a wanted token is missing from the first top-k list


class ServerError(UserError, RuntimeError):
    """A request the server refused (4xx), or one that kept failing (connection, timeout, 429, 5xx)."""


class OpenAIBackend(LMBackend):
    def __init__(self, base_url: str, model: str, tokenizer: str | None = None, api_key: str | None = None,
                 timeout: float = 120.0, max_retries: int = 4, backoff: float = 0.5, concurrency: int = 16,
                 top_logprobs: int = 20, extra_body: dict | None = None):
        """``base_url`` with or without ``/v1``; ``model`` is the name sent in requests and, unless
        ``tokenizer`` is given, the embedded name / hub id / folder of the tokenizer used to render."""
        from transformers import AutoTokenizer

        from pra.models import resolve

        self.name = model
        root = base_url.rstrip("/")
        self.url = (root if root.endswith("/v1") else root + "/v1") + "/completions"
        self.tokenizer = AutoTokenizer.from_pretrained(resolve(tokenizer or model))
        self.timeout, self.max_retries, self.backoff = timeout, max_retries, backoff
        self.top_logprobs = top_logprobs
        self.extra_body = {"cache_prompt": True} if extra_body is None else extra_body
        self.session = requests.Session()
        adapter = HTTPAdapter(pool_maxsize=concurrency)   # one kept-alive connection per worker
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        if api_key:
            self.session.headers["Authorization"] = f"Bearer {api_key}"
        self.pool = ThreadPoolExecutor(concurrency)
        self.stats = BackendStats(extra={"requests": 0, "retries": 0, "request_seconds": 0.0})
        self._lock = threading.Lock()
        self._seeds = itertools.count()
        self._one_per_request = False   # set once the server returns fewer choices than asked (ignores n)

    @property
    def has_chat_template(self) -> bool:
        return bool(self.tokenizer.chat_template)

    def render(self, messages: list[Message], assistant_prefix: str = "") -> str:
        return render_chat(self.tokenizer, messages, assistant_prefix)

    def close(self) -> None:
        self.pool.shutdown()
        self.session.close()

    def _post(self, body: dict) -> dict:
        """POST with retries: connection errors, timeouts, 429 and 5xx back off exponentially and retry;
        any other 4xx fails at once, since the request itself is wrong."""
        body = {"model": self.name, **self.extra_body, **body}
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            start = time.perf_counter()
            try:
                r = self.session.post(self.url, json=body, timeout=self.timeout)
            except (requests.ConnectionError, requests.Timeout) as err:
                problem = f"{type(err).__name__}: {err}"
                continue
            if r.ok:
                data = r.json()
                self._count(data, time.perf_counter() - start, attempt)
                return data
            problem = f"HTTP {r.status_code}: {r.text[:500]}"
            if r.status_code < 500 and r.status_code != 429:
                raise ServerError(f"POST {self.url} failed: {problem}")
        raise ServerError(f"POST {self.url} failed {self.max_retries + 1} times; last: {problem}")

    def _count(self, data: dict, seconds: float, retries: int) -> None:
        usage = data.get("usage") or {}
        with self._lock:
            self.stats.prompt_tokens += usage.get("prompt_tokens", 0)
            self.stats.generated_tokens += usage.get("completion_tokens", 0)
            self.stats.extra["requests"] += 1
            self.stats.extra["retries"] += retries
            self.stats.extra["request_seconds"] += seconds

    def _done(self, start: float) -> None:
        self.stats.calls += 1
        self.stats.seconds += time.perf_counter() - start

    def generate(self, prompts: list[str], params: SamplingParams,
                 seeds: Sequence[int] | None = None) -> list[list[Completion]]:
        """Greedy samples are all alike: one is asked for and copied (vLLM refuses n > 1 greedy). Each
        request gets its own seed: from ``seeds`` (one per prompt; a request for one sample of several
        adds the sample's index), else ``params.seed`` + a running count, reproducible for a given
        order of calls, so that equal prompts still draw different samples."""
        start = time.perf_counter()
        greedy = params.temperature <= 0
        n = 1 if greedy else params.n
        body = {"max_tokens": params.max_tokens, "temperature": max(params.temperature, 0.0),
                "top_p": 1.0 if greedy else params.top_p}
        if params.stop:
            body["stop"] = list(params.stop)
        got: list[list[Completion]] = [[] for _ in prompts]
        wanted = {j: n for j in range(len(prompts))}
        while wanted:   # at most twice: again, one sample per request, if the server ignored n
            per_request = [(j, 1) for j, k in wanted.items() for _ in range(k)] if self._one_per_request \
                else list(wanted.items())
            jobs = []
            for j, k in per_request:
                drawn = len(got[j]) + sum(kk for jj, _, kk in jobs if jj == j)
                seed = stable_seed(seeds[j], drawn) if seeds is not None else \
                    None if params.seed is None else params.seed + next(self._seeds)
                jobs.append((j, seed, k))
            jobs = [(prompts[j], k, seed) for j, seed, k in jobs]
            for (j, _), out in zip(per_request, self.pool.map(lambda job: self._complete(*job, body, params.stop),
                                                              jobs)):
                got[j] += out
            wanted = {j: n - len(g) for j, g in enumerate(got) if len(g) < n}
            self._one_per_request |= bool(wanted)
        self._done(start)
        return [g[:n] * (params.n if greedy else 1) for g in got]

    def _complete(self, prompt: str, n: int, seed: int | None, body: dict, stop: tuple[str, ...]) -> list[Completion]:
        data = self._post({**body, "prompt": prompt, "n": n, **({} if seed is None else {"seed": seed})})
        choices = sorted(data["choices"], key=lambda c: c.get("index", 0))
        if not choices:
            raise ServerError(f"POST {self.url} returned no choices")
        used = (data.get("usage") or {}).get("completion_tokens")
        out = []
        for c in choices:
            text, hit = cut_at_stop(c["text"], stop)   # servers differ in how they apply stop strings
            # usage counts the whole request: per choice only when there is one, else count it here
            tokens = used if used is not None and len(choices) == 1 else \
                len(self.tokenizer.encode(c["text"], add_special_tokens=False))
            out.append(Completion(text, tokens, hit or c.get("finish_reason") == "stop"))
        return out

    def _next_token(self, prompt: str, k: int, token_ids: list[int]) -> dict[str, float]:
        """Token text -> log p for the token after ``prompt``: the top ``k``, or on a vLLM server exactly
        ``token_ids`` (its ``logprob_token_ids`` field; other servers ignore it)."""
        data = self._post({"prompt": prompt, "max_tokens": 1, "temperature": 0.0, "logprobs": k,
                           "logprob_token_ids": token_ids})
        lp = data["choices"][0]["logprobs"]
        if "top_logprobs" in lp:                       # OpenAI layout: vLLM, SGLang, llama-cpp-python
            return lp["top_logprobs"][0]
        return {t["token"]: t["logprob"] for t in lp["content"][0]["top_logprobs"]}   # llama.cpp server

    def _read(self, prompt: str, keys: list[str]) -> list[float]:
        """Log-probs of the single-token strings ``keys`` as the next token. A top-k list that lacks one
        is asked again, wider, once; still missing, ``pick_logprobs`` refuses it."""
        ids = single_token_ids(self.tokenizer, keys, self.name)
        top = self._next_token(prompt, self.top_logprobs, ids)
        if any(key not in top for key in keys):
            top = self._next_token(prompt, WIDE_TOP_LOGPROBS, ids)
        return pick_logprobs(top, keys)

    def choice_logprobs(self, prompts: list[str], choices: list[list[str]]) -> list[dict[str, float]]:
        start = time.perf_counter()
        reads = list(self.pool.map(self._read, prompts, choices))
        out = [renormalise(dict(zip(opts, lp))) for lp, opts in zip(reads, choices)]
        self._done(start)
        return out

    def slot_logprobs(self, prompts: list[tuple[str, str]], digits: tuple[str, str] = ("0", "1"),
                      sep: str = ",") -> list[SlotLogprobs]:
        """Two requests per prompt, since greedy decoding of ``r,s`` may emit neither digit: the top-k
        after the prompt (slot 1), then after the prompt, the more likely slot-1 digit and ``sep``
        (slot 2). Prompts go as text, tokenized by the server; sent in order, so that a server with a
        prefix cache meets the shared prefixes one after another."""
        start = time.perf_counter()
        keys = list(digits)

        def read(prompt: str) -> SlotLogprobs:
            first = dict(zip(keys, self._read(prompt, keys)))
            best = max(keys, key=first.__getitem__)
            second = dict(zip(keys, self._read(prompt + best + sep, keys)))
            return SlotLogprobs(first, second)

        out = list(self.pool.map(read, [p + s for p, s in prompts]))
        self._done(start)
        return out
