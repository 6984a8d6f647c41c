"""Every setting of ``pra eval`` checked before any model loads, one line per problem naming the flag
(and its config field): names that exist, numbers in range, files that are there, and no flag that the
chosen method would ignore."""
from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from eval.methods import METHODS, readers, reads, uses_corpus
from pra.errors import UserError
from pra.backends.llamacpp_backend import ENGINE_ARGS as LLAMACPP_ENGINE_ARGS
from pra.selection import PERMUTE

if TYPE_CHECKING:
    from eval.run import EvalConfig

RETRIEVAL_MODES = ("dense", "bm25", "hybrid")
# (field, smallest allowed, largest allowed or None)
RANGES: tuple[tuple[str, float, float | None], ...] = (
    ("limit", 1, None), ("sample", 1, None), ("samples", 1, None), ("batch_size", 1, None), ("max_active", 1, None),
    ("rag_docs", 1, None), ("qwc_k", 2, None),
    ("search.beam_width", 1, None), ("search.branching", 1, None), ("search.max_steps", 1, None),
    ("search.step_tokens", 1, None), ("search.docs_per_search", 1, None), ("search.temperature", 0, None),
    ("search.top_p", 0, 1),
)


def flag(field: str) -> str:
    """The command-line flag that sets a config field (``search.beam_width`` -> ``--beam-width``)."""
    name = field.removeprefix("search.")
    return "--search" if name == "search_controller" else "--" + name.replace("_", "-")


def _flat(cfg: "EvalConfig") -> dict[str, Any]:
    data = asdict(cfg)
    search = data.pop("search")
    return {**data, **{f"search.{k}": v for k, v in search.items()}}


def ignored(cfg: "EvalConfig", given: Iterable[str]) -> list[str]:
    """The flags among ``given`` (config field names set on the command line) that ``cfg.method`` does
    not read; a flag that sets several fields (``--seed``) is ignored only if all of them are."""
    by_flag: dict[str, list[str]] = {}
    for field in sorted(given):
        by_flag.setdefault(flag(field), []).append(field)
    problems = []
    for name, fields in by_flag.items():
        read_by = [readers(f) for f in fields]
        if all(r is not None and cfg.method not in r for r in read_by):
            problems.append(f"{name} ({', '.join(fields)}) is ignored by --method {cfg.method}; it applies to "
                            f"{', '.join(sorted(set().union(*read_by)))}")
    return problems


def _ranges(values: dict[str, Any]) -> list[str]:
    problems = []
    for field, low, high in RANGES:
        value = values.get(field)
        if value is None:
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
                or value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            finite = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            problems.append(f"{flag(field)} ({field}) must be {'' if finite else 'a finite number '}{bound}, got {value!r}")
    if isinstance(values.get("qwc_k"), int) and values["qwc_k"] % 2:
        problems.append(f"--qwc-k (qwc_k) must be even (k/2 best and k/2 worst traces), got {values['qwc_k']}")
    return problems


def _names(cfg: "EvalConfig", loaded: frozenset[str]) -> list[str]:
    from pra.backends import BACKENDS
    from pra.models import AGENTS_DIR, model_problem, resolve_reward_agent
    from pra.reward_agent import agent_folder_problem
    from search.controllers import parse_controller

    problems = []
    for field in ("backend", "agent_backend"):
        if getattr(cfg, field) not in BACKENDS:
            problems.append(f"{flag(field)} ({field}): unknown backend {getattr(cfg, field)!r}; one of {', '.join(BACKENDS)}")
    engines = {"dtype": ("transformers", "vllm"), "device": ("transformers",), "engine_args": ("transformers", "vllm", "llamacpp")}
    for field, backends in engines.items():
        if getattr(cfg, field, None) and cfg.backend not in backends:
            problems.append(f"{flag(field) if field != 'engine_args' else '--engine-arg'} ({field}) applies to "
                            f"--backend {' or '.join(backends)}, not {cfg.backend}")
    if cfg.agent_dtype and cfg.agent_backend != "transformers":
        problems.append(f"--agent-dtype applies to --agent-backend transformers, not {cfg.agent_backend}")
    if cfg.dtype == "int8" and cfg.backend == "vllm":
        problems.append("--dtype int8 (torch dynamic quantization) is for --backend transformers; vLLM takes "
                        "float32, bfloat16 or float16")
    if cfg.backend == "llamacpp" and (unknown := sorted(set(cfg.engine_args or {}) - set(LLAMACPP_ENGINE_ARGS))):
        problems.append(f"--engine-arg {', '.join(unknown)}: the llamacpp backend takes {', '.join(LLAMACPP_ENGINE_ARGS)}")
    if cfg.backend == "openai" and not cfg.base_url:
        problems.append("--backend openai needs --base-url http://HOST:PORT (an OpenAI-compatible server)")
    if cfg.method == "pra" and cfg.agent_backend == "openai" and not cfg.agent_base_url:
        problems.append("--agent-backend openai needs --agent-base-url http://HOST:PORT (an OpenAI-compatible server)")
    if cfg.permute not in PERMUTE:
        problems.append(f"--permute: unknown {cfg.permute!r}; one of {', '.join(PERMUTE)}")
    if cfg.limit is not None and cfg.sample is not None:
        problems.append("--limit and --sample both choose the questions; give one")
    if cfg.retrieval not in RETRIEVAL_MODES:
        problems.append(f"--retrieval: unknown mode {cfg.retrieval!r}; one of {', '.join(RETRIEVAL_MODES)}")
    if "policy" not in loaded and cfg.backend != "openai" and (why := model_problem(cfg.policy, "--policy")):
        problems.append(why)
    if cfg.method == "pra" and "reward_agent" not in loaded and (why := agent_folder_problem(cfg.reward_agent)):
        problems.append(why)                   # an export cut short, before anything reads it
    elif cfg.method == "pra" and "reward_agent" not in loaded and cfg.agent_backend != "openai":
        base, adapter = resolve_reward_agent(cfg.reward_agent)
        if why := model_problem(base, "--reward-agent" if adapter is None else f"--reward-agent {cfg.reward_agent}: base"):
            shipped = ", ".join(sorted(p.name for p in AGENTS_DIR.iterdir() if p.is_dir()))
            problems.append(f"{why}; shipped agents: {shipped}")
    if reads(cfg.method, "search_controller"):
        try:
            name, probe, _ = parse_controller(cfg.search_controller)
            if probe is not None and not Path(probe).is_file():
                problems.append(f"--search {cfg.search_controller}: no probe file {probe} (train one with `pra probe train`)")
        except UserError as err:
            problems.append(str(err))
    if uses_corpus(cfg.method) and "retriever" not in loaded:
        from corpora.builders import MANIFEST, corpus_dir
        if not (corpus_dir(cfg.corpus) / MANIFEST).exists():
            problems.append(f"--corpus {cfg.corpus}: no built corpus at {corpus_dir(cfg.corpus)} (no {MANIFEST})")
    if cfg.method == "qwc" and cfg.qwc_pool and not Path(cfg.qwc_pool).is_file():
        problems.append(f"--qwc-pool {cfg.qwc_pool}: no such file")
    return problems


def check_eval_config(cfg: "EvalConfig", given: Iterable[str] = (), loaded: Iterable[str] = ()) -> None:
    """Raise one UserError listing every problem of ``cfg`` (one per line). ``given``: the config fields
    the user set on the command line, refused when the method ignores them; ``loaded``: the parts
    (policy, reward_agent, retriever) the caller brings, whose names are not checked."""
    if cfg.method not in METHODS:
        raise UserError(f"--method: unknown method {cfg.method!r}; choose one of {', '.join(METHODS)}")
    problems = ignored(cfg, given) + _ranges(_flat(cfg)) + _names(cfg, frozenset(loaded))
    if problems:
        raise UserError("\n".join(problems))
