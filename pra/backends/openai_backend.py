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

Waiting is bounded: a connect timeout and a read timeout (``--connect-timeout``, ``--read-timeout``), then
``--retries`` retries with exponential backoff, each announced by a warning line naming the URL (its
credentials redacted), then one error line. Concurrent requests: ``--concurrency``, by default the
server's own slot count where it reports one (llama.cpp's ``/props``: ``total_slots``), since more
requests than slots only queue on the server and run into the read timeout. The API key comes from the
environment only: ``--api-key-env NAME``, else ``OPENAI_API_KEY``.
"""
from __future__ import annotations

import itertools
import math
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit
from typing import Sequence

import requests
from requests.adapters import HTTPAdapter

from pra.backends.base import (BackendStats, Completion, SamplingParams, SlotLogprobs, TokenizerBackend,
                               cut_at_stop, pick_logprobs, renormalise, single_token_ids)
from pra.errors import UserError
from pra.redact import redact_text, redact_url
from pra.selection import stable_seed


WIDE_TOP_LOGPROBS = 1000    # the second ask when a wanted token is missing from the first top-k list
DEFAULT_CONCURRENCY = 16    # when the server does not say how many requests it serves at once
API_KEY_ENV = "OPENAI_API_KEY"


@dataclass
class ServerOptions:
    """How the backend waits on a server; the command line's ``--connect-timeout``, ``--read-timeout``,
    ``--retries``, ``--concurrency`` (None: the server's slot count, else 16) and ``--api-key-env``."""
    connect_timeout: float = 10.0
    read_timeout: float = 120.0
    retries: int = 4
    concurrency: int | None = None
    api_key_env: str | None = None

    def check(self) -> "ServerOptions":
        problems = []
        for name in ("connect_timeout", "read_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                problems.append(f"--{name.replace('_', '-')} must be a finite number of seconds above 0, got {value!r}")
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or not 0 <= self.retries <= 100:
            problems.append(f"--retries must be between 0 and 100, got {self.retries!r}")
        if self.concurrency is not None and (isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int)
                                             or not 1 <= self.concurrency <= 1024):
            problems.append(f"--concurrency must be between 1 and 1024, got {self.concurrency!r}")
        if self.api_key_env is not None and not os.environ.get(self.api_key_env):
            problems.append(f"--api-key-env {self.api_key_env}: no such environment variable is set (put the key "
                            "there; a key is never taken from a flag or a file)")
        if problems:
            raise UserError("\n".join(problems))
        return self


OPTIONS = ServerOptions()     # what backends made without explicit settings use; the command line sets it


def set_server_options(options: ServerOptions) -> None:
    global OPTIONS
    OPTIONS = options.check()


def env_api_key(env: str | None = None) -> str | None:
    """The API key from the environment variable ``env`` (default ``OPENAI_API_KEY``), or None."""
    return os.environ.get(env or OPTIONS.api_key_env or API_KEY_ENV) or None


def server_slots(root: str, session: requests.Session, connect_timeout: float) -> int | None:
    """How many requests the server serves at once, where it says (llama.cpp's ``GET /props``:
    ``total_slots``, or ``default_generation_settings.n_parallel``); None otherwise."""
    try:
        r = session.get(root + "/props", timeout=(connect_timeout, 5.0))
        props = r.json() if r.ok else {}
    except (requests.RequestException, ValueError):
        return None
    if not isinstance(props, dict):
        return None
    settings = props.get("default_generation_settings")
    for value in (props.get("total_slots"), settings.get("n_parallel") if isinstance(settings, dict) else None):
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
    return None


class ServerError(UserError, RuntimeError):
    """A request the server refused (4xx), or one that kept failing (connection, timeout, 429, 5xx)."""


class OpenAIBackend(TokenizerBackend):
    def __init__(self, base_url: str | None, model: str, tokenizer: str | None = None, api_key: str | None = None,
                 timeout: float | None = None, max_retries: int | None = None, backoff: float = 0.5,
                 concurrency: int | None = None, top_logprobs: int = 20, extra_body: dict | None = None,
                 connect_timeout: float | None = None, warn=None):
        """``base_url`` with or without ``/v1``; ``model`` is the name sent in requests and, unless
        ``tokenizer`` is given, the embedded name / hub id / folder of the tokenizer used to render.
        ``timeout`` is the read timeout; it, ``connect_timeout``, ``max_retries`` and ``concurrency``
        default to ``OPTIONS`` (the command line's flags); ``api_key`` to the environment's (``env_api_key``).
        ``warn`` gets each retry's line (default: printed to stderr)."""
        from transformers import AutoTokenizer

        from pra.models import resolve

        if not base_url or not isinstance(base_url, str) or "://" not in base_url:
            raise UserError(f"the openai backend needs --base-url http://HOST:PORT (an OpenAI-compatible server), "
                            f"got {redact_url(base_url) if isinstance(base_url, str) else base_url!r}")
        self.name = model
        parts = urlsplit(base_url)
        path = parts.path.rstrip("/")
        root = urlunsplit(parts._replace(path=path, query="", fragment=""))
        path = (path if path.endswith("/v1") else path + "/v1") + "/completions"
        self.url = urlunsplit(parts._replace(path=path, fragment=""))     # a ?query the server wants is kept
        self.shown_url = redact_url(self.url)            # what errors and warnings name
        self.timeout = (connect_timeout or OPTIONS.connect_timeout, timeout or OPTIONS.read_timeout)
        self.max_retries = OPTIONS.retries if max_retries is None else max_retries
        self.backoff = backoff
        self.warn = warn or (lambda line: print(line, file=sys.stderr, flush=True))
        self.top_logprobs = top_logprobs
        self.extra_body = {"cache_prompt": True} if extra_body is None else extra_body
        self.session = requests.Session()
        key = api_key or env_api_key()
        if key:
            self.session.headers["Authorization"] = f"Bearer {key}"
        concurrency = concurrency or OPTIONS.concurrency or \
            server_slots(root.removesuffix("/v1"), self.session, self.timeout[0]) or DEFAULT_CONCURRENCY
        self.concurrency = concurrency
        adapter = HTTPAdapter(pool_maxsize=concurrency)   # one kept-alive connection per worker
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.tokenizer = AutoTokenizer.from_pretrained(resolve(tokenizer or model))
        self.pool = ThreadPoolExecutor(concurrency)
        self.stats = BackendStats(extra={"requests": 0, "retries": 0, "request_seconds": 0.0})
        self._lock = threading.Lock()
        self._seeds = itertools.count()
        self._one_per_request = False   # set once the server returns fewer choices than asked (ignores n)

    def close(self) -> None:
        self.pool.shutdown()
        self.session.close()

    def _post(self, body: dict) -> dict:
        """POST with retries: connection errors, timeouts, 429 and 5xx back off exponentially and retry,
        each retry announced by a warning line; any other 4xx fails at once, since the request itself is
        wrong. A reply that is not a JSON object is an error."""
        body = {"model": self.name, **self.extra_body, **body}
        for attempt in range(self.max_retries + 1):
            if attempt:
                wait = self.backoff * 2 ** (attempt - 1)
                self.warn(f"pra: warning: POST {self.shown_url} failed ({problem[:200]}); retry {attempt} of "
                          f"{self.max_retries} in {wait:.1f} s")
                time.sleep(wait)
            start = time.perf_counter()
            try:
                r = self.session.post(self.url, json=body, timeout=self.timeout)
            except (requests.ConnectionError, requests.Timeout) as err:
                kind = "no connection within" if isinstance(err, requests.ConnectTimeout) else \
                    "no reply within" if isinstance(err, requests.Timeout) else None
                problem = (f"{type(err).__name__}: {kind} {self.timeout[0 if 'connection' in kind else 1]:g} s"
                           if kind else f"{type(err).__name__}: {redact_text(str(err))}")
                continue
            if r.ok:
                try:
                    data = r.json()
                except ValueError:
                    raise ServerError(f"POST {self.shown_url}: the reply is not JSON: {redact_text(r.text[:120])!r}") from None
                if not isinstance(data, dict):
                    raise ServerError(f"POST {self.shown_url}: the reply is not a JSON object: {redact_text(r.text[:120])!r}")
                self._count(data, time.perf_counter() - start, attempt)
                return data
            problem = f"HTTP {r.status_code}: {redact_text(r.text[:300])}"
            if r.status_code < 500 and r.status_code != 429:
                raise ServerError(f"POST {self.shown_url} failed: {problem}")
        raise ServerError(f"POST {self.shown_url} failed {self.max_retries + 1} times; last: {problem}")

    def _reply(self, data: dict, what: str, get):
        """``get(data)``, or a ServerError saying the reply lacks ``what``."""
        try:
            value = get(data)
        except (KeyError, IndexError, TypeError, AttributeError):
            value = None
        if value is None:
            hint = " (llama-cpp-python's server needs --logits_all true)" if "logprobs" in what else ""
            raise ServerError(f"POST {self.shown_url}: the reply has no {what}{hint}: {str(data)[:120]}")
        return value

    def _count(self, data: dict, seconds: float, retries: int) -> None:
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        count = lambda key: usage.get(key) if isinstance(usage.get(key), int) else 0
        with self._lock:
            self.stats.prompt_tokens += count("prompt_tokens")
            self.stats.generated_tokens += count("completion_tokens")
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
        choices = self._reply(data, "choices", lambda d: d["choices"] or None)
        if not isinstance(choices, list) or not all(isinstance(c, dict) and isinstance(c.get("text"), str) for c in choices):
            raise ServerError(f"POST {self.shown_url}: the reply's choices are not texts: {str(choices)[:120]}")
        choices = sorted(choices, key=lambda c: c.get("index", 0) if isinstance(c.get("index"), int) else 0)
        used = data["usage"].get("completion_tokens") if isinstance(data.get("usage"), dict) else None
        used = used if isinstance(used, int) else None
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
        lp = self._reply(data, "logprobs", lambda d: d["choices"][0]["logprobs"])
        if isinstance(lp, dict) and "top_logprobs" in lp:     # OpenAI layout: vLLM, SGLang, llama-cpp-python
            top = self._reply(lp, "top logprobs", lambda x: x["top_logprobs"][0])
        else:                                                 # llama.cpp server
            top = self._reply(lp, "top logprobs", lambda x: {t["token"]: t["logprob"] for t in x["content"][0]["top_logprobs"]})
        if not isinstance(top, dict) or not all(isinstance(v, (int, float)) for v in top.values()):
            raise ServerError(f"POST {self.shown_url}: the reply's logprobs are not numbers: {str(top)[:120]}")
        return top

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
