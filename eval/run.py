"""``pra eval``: run one method over one benchmark, append a record per question, resume, summarise.

Methods: ``direct`` (answer letter from the logits), ``cot`` (one greedy step-by-step trace), ``sc``
(k sampled traces, majority vote), ``rag`` / ``rag-sc`` (the same with retrieved passages before the
question), ``qwc`` (CoT after scored training traces, ``search/qwc.py``), ``pra`` (reward-agent beam
search). All trace methods run on the same engine, except PULSE decoding (``pulse-front``,
``pulse-step``: retrieve and regenerate the steps the probe flags) and its IRCoT baseline (``ircot``:
retrieve after every step), which have their own step loop. What each method runs on, reads and
retrieves is declared once, in ``eval.methods``.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from pra.models import DEFAULT_REWARD_AGENT
from pra.benchmarks import DATA, BenchmarkLoad, content_hash, load_eval_benchmark, parse_shard
from pra.prompts import DIRECT_PREFIX, copies_example, policy_messages, policy_prompt_id
from pra.readouts import best_letter, read_letters
from pra.records import JsonlWriter, read_records
from pra.options import option
from pra.selection import PERMUTE, asking_order, questions_asked, split_id
from eval.checks import RETRIEVAL_MODES, check_eval_config
from eval.methods import METHODS as REGISTRY, prompt_kind, reads, retrieves
from eval.letters import clustered_stderr, constant_text_stats, letter_stats, longest_option_stats
from eval.prompt_fit import overlong
from eval.run_folder import open_run_folder
from pra.types import Question, ScoredTrace
from pra.backends.base import LMBackend
from search.engine import Engine, SearchConfig, Trace
from pra.config_files import check_fields, read_recipe, read_yaml, yaml_file
from pra.errors import UserError

if TYPE_CHECKING:
    from search.pulse_decoding import PulseTrace

METHODS = tuple(REGISTRY)          # the method table is eval.methods
PULSE_METHODS = {name: m.mode for name, m in REGISTRY.items() if m.runner == "pulse"}
QWC_POOL = DATA / "qwc_pool.jsonl"     # the shipped pool (its source: eval/data/README.md)


def _backends() -> tuple[str, ...]:
    from pra.backends import BACKENDS      # read when the parser is built: backends may be added
    return tuple(BACKENDS)


def _controller(text: str) -> str:
    """``--search``: its controller's name must be one of CONTROLLERS; the rest is checked with the config."""
    import argparse
    if text.split(":", 1)[0] not in CONTROLLERS:
        raise argparse.ArgumentTypeError(f"unknown search controller {text!r}; choose one of {' | '.join(CONTROLLER_FORMS)}")
    return text


def _key_value(text: str) -> tuple[str, Any]:
    """``--engine-arg KEY=VALUE``: VALUE read as YAML (0.8 -> float, true -> bool, 8192 -> int)."""
    import argparse
    import yaml
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"takes KEY=VALUE (e.g. gpu_memory_utilization=0.8), got {text!r}")
    try:
        return key.strip(), yaml.safe_load(value)
    except yaml.YAMLError:
        return key.strip(), value


CONTROLLERS = ("always", "never", "threshold", "sample", "rsus", "pulse")
CONTROLLER_FORMS = ("always", "never", "threshold:θ", "sample", "rsus[:θ]", "pulse:PROBE[:θ]")
DTYPES = ("float32", "bfloat16", "float16", "int8")


@dataclass
class EvalConfig:
    """One ``pra eval`` run. Each field's help is its flag's (``pra.options``); a recipe sets the same
    fields by name (``search:`` holds SearchConfig's)."""
    benchmark: str = option("medmcqa-eval", group="data", metavar="NAME|FILE",
                            help="a shipped benchmark (`pra list benchmarks`) or a JSON-lines file with id, "
                                 "question, options, answer")
    method: str = option("cot", group="method", choices=METHODS,
                         help="direct | cot | sc (self-consistency) | rag | rag-sc | qwc (quality-weighted context) | "
                              "pra (reward-agent beam search) | pulse-front | pulse-step | ircot (`pra list methods`)")
    policy: str = option("smollm2-135m-instruct", group="policy", metavar="MODEL",
                         help="the reasoning model: an embedded name (`pra list models`), a hub id or a local folder")
    out: str = option("runs/demo", group="output", metavar="DIR", show_default=None,
                      help="the run folder: records.jsonl (one record per question, resumable), config.json, "
                           "summary.json; required on the command line unless the recipe sets it")
    limit: int | None = option(None, group="data", metavar="N",
                               help="the first N questions (their gold letters are far from uniform; prefer --sample)")
    sample: int | None = option(None, group="data", metavar="N",
                                help="a random sample of N questions fixed by --seed, the same on every machine")
    seed: int = option(0, group="data", help="of --sample, --permute balanced and sampled steps")
    permute: str = option("none", group="data", choices=PERMUTE,
                          help="option order: none | balanced (one rotation per question, gold letters uniform) | "
                               "cyclic (every rotation, a record each)")
    shard: str | None = option(None, group="data", metavar="i/n", help="this machine's share of the questions "
                                                                      "(join the shards with `pra merge`)")
    skip_bad: bool = option(False, group="data", help="skip (and count) malformed benchmark rows rather than stop")
    samples: int = option(4, group="method", metavar="k", help="k: sampled traces voted on (sc, rag-sc)")
    search: SearchConfig = field(default_factory=SearchConfig)
    batch_size: int = option(32, group="engine", help="sequences per forward batch (transformers backend)")
    max_active: int = option(32, group="engine", help="questions in the engine's queue at once")
    backend: str = option("transformers", group="policy", choices=_backends,
                          help="the policy's backend: transformers (CPU or GPU) | llamacpp (the quantized GGUF, "
                               "in process) | vllm (in process) | openai (an OpenAI-compatible server, with --base-url)")
    base_url: str | None = option(None, group="policy", metavar="URL", help="the server for --backend openai")
    # reward agent (pra)
    reward_agent: str = option(DEFAULT_REWARD_AGENT, group="agent", metavar="AGENT",
                               help="a shipped agent (`pra list agents`), a folder holding a peft adapter, or a "
                                    "backbone name (the untrained ablation) (pra)")
    agent_backend: str = option("transformers", group="agent", choices=_backends,
                                help="the reward agent's backend; openai: --reward-agent is the served name")
    agent_base_url: str | None = option(None, group="agent", metavar="URL", help="the server for --agent-backend openai")
    agent_dtype: str | None = option(None, group="agent", choices=DTYPES, show_default="float32",
                                     help="the reward agent's weights on --agent-backend transformers: float32 "
                                          "(readouts are compared across candidates: bfloat16 moves them ~0.05) "
                                          "or int8 (CPU; faster prefill, a trained LoRA agent included)")
    search_controller: str = option("always", group="search", flag="--search", type=_controller, metavar="CONTROLLER",
                                    help="when a step retrieves evidence: always | never | threshold:θ (on the agent's "
                                         "p(search)) | sample | rsus[:θ] | pulse:PROBE[:θ] (pra, pulse-front, pulse-step)")
    # retrieval (rag, rag-sc, pra)
    corpus: str = option("medcorp-mini", group="retrieval", metavar="NAME|DIR",
                         help="the passages retrieved from (`pra list corpora`)")
    retrieval: str = option("dense", group="retrieval", choices=RETRIEVAL_MODES,
                            help="dense (FAISS) | bm25 | hybrid (both, fused)")
    rag_docs: int = option(3, group="retrieval", help="passages put before the question (rag, rag-sc; the "
                                                      "candidates of a PULSE step)")
    # quality-weighted context (qwc)
    qwc_pool: str | None = option(None, group="method", metavar="FILE", show_default="the shipped pool",
                                  help="scored training traces (JSON lines) the qwc examples come from")
    qwc_k: int = option(2, group="method", help="qwc examples shown: k/2 highest and k/2 lowest quality")
    show: bool = option(False, group="output", help="print each question's search tree and write OUT/viewer.html")
    # engine options: recorded in the config and its fingerprint
    dtype: str | None = option(None, group="engine", choices=DTYPES, show_default="bfloat16 on a GPU or a CPU "
                               "with bf16 matmul, else float32", help="the policy's weights and activations; int8: float32 "
                               "activations times int8 weights (CPU, transformers backend)")
    device: str | None = option(None, group="engine", metavar="DEVICE", show_default="cuda when there is one, else cpu",
                                help="where the policy runs (transformers backend): cpu, cuda, cuda:1, ...")
    engine_args: dict[str, Any] = option(group="engine", flag="--engine-arg", type=_key_value, metavar="KEY=VALUE",
                                         action="append", default_factory=dict,
                                         help="passed to vllm.LLM(...) (gpu_memory_utilization=0.8, "
                                              "tensor_parallel_size=2, max_model_len=8192) or to transformers' "
                                              "from_pretrained (attn_implementation=sdpa); repeat for more")


RECIPES = Path(__file__).parent.parent / "search" / "recipes"


def eval_config(data: dict[str, Any], where: str = "eval config") -> EvalConfig:
    """An EvalConfig from a recipe (``recipe``: name or file), then EvalConfig fields and ``search``
    overrides on top; an unknown field is an error naming the file or ``where``."""
    data = dict(data)
    base: dict[str, Any] = {}
    if recipe := data.pop("recipe", None):
        base = read_recipe(recipe, RECIPES, EvalConfig, blocks={"search": SearchConfig})
    check_fields(EvalConfig, data, where, blocks={"search": SearchConfig})
    search = {**(base.pop("search", None) or {}), **(data.pop("search", None) or {})}
    if isinstance(base.get("engine_args"), dict) and isinstance(data.get("engine_args"), dict):
        data["engine_args"] = {**base["engine_args"], **data["engine_args"]}     # a flag adds to the recipe's
    return EvalConfig(**{**base, **data}, search=SearchConfig(**search))


def recipe_fields(recipe: str | None) -> dict[str, Any]:
    """The fields a recipe (name or file) sets, as written in it ({} for none)."""
    return read_yaml(yaml_file(recipe, RECIPES, "recipe")) if recipe else {}


def engine_config(cfg: EvalConfig) -> SearchConfig:
    """The method fixes what the user's search settings may not contradict."""
    s, mode = cfg.search, getattr(REGISTRY.get(cfg.method), "mode", None)
    if mode == "greedy":
        return SearchConfig(**{**asdict(s), "beam_width": 1, "branching": 1, "temperature": 0.0,
                               "aggregate": "best"})
    if mode == "vote":
        return SearchConfig(**{**asdict(s), "beam_width": cfg.samples, "branching": 1,
                               "temperature": s.temperature or 0.7, "top_p": s.top_p if s.temperature else 0.95,
                               "aggregate": "vote"})
    return s


def _record(t: Trace, method: str) -> dict[str, Any]:
    best = t.best if REGISTRY[method].mode != "vote" else next(c for c in t.beam if c.answer == t.prediction)
    seconds = sum(v for k, v in t.stats.items() if k.startswith("seconds_"))
    return {
        "id": t.question.id, "gold": t.question.answer, "prediction": t.prediction,
        "correct": t.prediction == t.question.answer, "forced": t.forced, "method": method,
        "steps": [asdict(s) for s in best.steps], "tokens": t.stats["policy_tokens"], "seconds": round(seconds, 3),
        "answers": [c.answer for c in t.beam], "scores": [round(c.score, 4) for c in t.beam],
        "samples": [_sample(c) for c in t.beam],
        "context": [title for title, _ in t.context],
        **({"examples": [e.id for e in t.examples]} if t.examples else {}),
        # The search tree: every ranked candidate, and which nodes the final beam (``answers``) ends on.
        **({"tree": [asdict(n) for n in t.tree], "final": [c.node for c in t.beam]} if t.tree else {}),
        "stats": {k: (round(v, 3) if isinstance(v, float) else v) for k, v in t.stats.items()},
    }


def _sample(c) -> dict[str, Any]:
    """One trace of the final beam (every sample, for SC), for post-hoc re-ranking: its steps, and their
    rewards where the reward agent scored them online (``eval.analysis.rescore`` adds them afterwards)."""
    rewards = [s.reward for s in c.steps]
    return {"answer": c.answer, "steps": c.texts,
            **({"rewards": rewards} if rewards and None not in rewards else {})}


def _pulse_record(t: "PulseTrace", method: str) -> dict[str, Any]:
    """As ``_record``; a step's ``action`` is the probe's p(error), and ``pulse`` lists per step the
    score, whether it was flagged, the passage used and the text it replaced."""
    return {
        "id": t.question.id, "gold": t.question.answer, "prediction": t.answer,
        "correct": t.answer == t.question.answer, "forced": t.forced, "method": method,
        "steps": [asdict(s) for s in t.steps], "tokens": t.stats["policy_tokens"],
        "seconds": round(t.stats["seconds"], 3), "answers": [t.answer], "scores": [],
        "context": [title for title, _ in t.front], "pulse": t.flags,
        "stats": {k: (round(v, 3) if isinstance(v, float) else v) for k, v in t.stats.items()},
    }


def _direct(policy: LMBackend, questions: list[Question], writer: JsonlWriter, bar: tqdm, batch: int,
            readout: str = "argmax") -> None:
    prompt = lambda q: policy.render(policy_messages(q, policy.has_chat_template, direct=True), DIRECT_PREFIX)
    for s in range(0, len(questions), batch):
        chunk = questions[s:s + batch]
        started = time.perf_counter()
        logprobs = read_letters(policy, [(q, prompt) for q in chunk], readout)
        share = (time.perf_counter() - started) / len(chunk)
        for q, lp in zip(chunk, logprobs):
            pred = best_letter(lp)
            writer.write({"id": q.id, "gold": q.answer, "prediction": pred, "correct": pred == q.answer,
                          "forced": False, "method": "direct", "steps": [], "tokens": 0,
                          "seconds": round(share, 3), "logprobs": lp})
            bar.update()


@dataclass
class Parts:
    """What a method runs on; missing parts are loaded from the config."""
    policy: LMBackend | None = None
    reward_agent: object | None = None
    retriever: object | None = None
    controller: object | None = None

    def complete(self, cfg: EvalConfig) -> "Parts":
        if reads(cfg.method, "reward_agent") and self.reward_agent is None:
            # Before the policy: on vLLM an agent with an adapter starts the engine with LoRA on, and a
            # policy on the same base then shares that engine.
            self.reward_agent = _reward_agent(cfg)
        if self.policy is None:
            from pra.backends import load_policy
            # batch_size is the transformers backend's; vLLM and servers schedule their own batches.
            extra = {"transformers": {"batch_size": cfg.batch_size, **engine_options(cfg, "transformers")},
                     "vllm": engine_options(cfg, "vllm"), "openai": {"base_url": cfg.base_url},
                     "llamacpp": engine_options(cfg, "llamacpp")}
            self.policy = load_policy(cfg.policy, backend=cfg.backend, **extra.get(cfg.backend, {}))
        if REGISTRY[cfg.method].retrieves == "search" and self.controller is None:
            from search.controllers import make_controller
            bm25 = None
            if cfg.search_controller.startswith("rsus"):
                from corpora.retrieval import load_retriever
                bm25 = load_retriever(cfg.corpus, mode="bm25")    # RSUS's entity entropy is a BM25 signal
            self.controller = make_controller(cfg.search_controller, cfg.search.seed, policy=self.policy, bm25=bm25)
        if retrieves(cfg.method, cfg.search_controller) and self.retriever is None:
            from corpora.retrieval import load_retriever
            mode = "bm25" if REGISTRY[cfg.method].retrieves == "steps" else cfg.retrieval    # PULSE retrieves with BM25
            self.retriever = load_retriever(cfg.corpus, mode=mode)
        return self

    def pulse_decoder(self, cfg: EvalConfig):
        from search.pulse_decoding import PulseConfig, PulseDecoder

        probe, threshold = None, None
        if cfg.method != "ircot":
            from search.controllers import load_pulse, parse_controller
            name, path, theta = parse_controller(cfg.search_controller)
            if name != "pulse":
                raise UserError(f"--method {cfg.method} needs --search pulse:PATH[:threshold], got {cfg.search_controller!r}")
            pulse = load_pulse(path, theta, self.policy)
            probe, threshold = pulse.probe, pulse.threshold
        # A flagged step's passage is the first unused of its BM25 top --rag-docs (3 by default).
        config = PulseConfig(mode=PULSE_METHODS[cfg.method], max_steps=cfg.search.max_steps,
                             step_tokens=cfg.search.step_tokens, candidates=cfg.rag_docs)
        return PulseDecoder(self.policy, self.retriever, config, probe, threshold)

    def engine(self, cfg: EvalConfig) -> Engine:
        return Engine(self.policy, engine_config(cfg), reward_agent=self.reward_agent,
                      retriever=self.retriever, controller=self.controller)


def _reward_agent(cfg: EvalConfig):
    """The reward agent on its backend: transformers (the adapter merged into the weights), vLLM (the
    adapter as a LoRA request on the base model's engine) or a server (``openai``: the served name is
    ``reward_agent``, rendered with its base model's tokenizer)."""
    from pra.backends import load_policy
    from pra.models import resolve_reward_agent
    from pra.reward_agent import RewardAgent, load_reward_agent, shows_earlier_rewards

    if cfg.agent_backend == "transformers":
        return load_reward_agent(cfg.reward_agent, batch_size=cfg.batch_size, dtype=cfg.agent_dtype or "float32")
    base, adapter = resolve_reward_agent(cfg.reward_agent)
    rewards = shows_earlier_rewards(adapter or base)      # the prompt the agent was trained with
    if cfg.agent_backend == "openai":
        return RewardAgent(load_policy(cfg.reward_agent, backend="openai", base_url=cfg.agent_base_url, tokenizer=base),
                           earlier_rewards=rewards)
    # A vLLM agent gets the policy's engine options: on the policy's base model they share one engine.
    options = engine_options(cfg, cfg.agent_backend) if cfg.agent_backend in ("vllm", "llamacpp") else {}
    return RewardAgent(load_policy(base, backend=cfg.agent_backend, adapter=adapter, **options), earlier_rewards=rewards)


def engine_options(cfg: EvalConfig, backend: str) -> dict[str, Any]:
    """--dtype, --device and --engine-arg as the backend takes them: vLLM's engine arguments go to
    ``vllm.LLM``, transformers' to ``from_pretrained`` (``model_kwargs``); unset ones are left out."""
    if backend == "vllm":
        return {**({"dtype": cfg.dtype} if cfg.dtype else {}), **(cfg.engine_args or {})}
    if backend == "llamacpp":       # the GGUF's own weights: only its ENGINE_ARGS (eval.checks)
        return dict(cfg.engine_args or {})
    return {**({"dtype": cfg.dtype} if cfg.dtype else {}), **({"device": cfg.device} if cfg.device else {}),
            **({"model_kwargs": dict(cfg.engine_args)} if cfg.engine_args else {})}


def _rag_context(cfg: EvalConfig, parts: Parts, questions: list[Question]) -> dict[str, tuple]:
    """RAG baselines: top passages for each question, retrieved in one batch, before the question."""
    if REGISTRY[cfg.method].retrieves != "question":
        return {}
    hits = parts.retriever.retrieve([q.question for q in questions], cfg.rag_docs)
    return {q.id: tuple((h.passage.title, h.passage.text) for h in hs) for q, hs in zip(questions, hits)}


def _qwc_examples(cfg: EvalConfig, questions: list[Question]) -> tuple[ScoredTrace, ...]:
    """qwc: the pool's best and worst traces, the same before every question; an example whose
    question is under evaluation is refused."""
    if cfg.method != "qwc":
        return ()
    from search.qwc import load_pool, select

    pool = cfg.qwc_pool or QWC_POOL
    examples = select(load_pool(pool), cfg.qwc_k)
    ids = {split_id(q.id)[0] for q in questions}
    leaked = [e.question.id for e in examples if e.question.id in ids]
    if leaked:
        raise UserError(f"{pool}: holds question {leaked[0]!r}, which is being evaluated")
    return examples


def run_question(q: Question, cfg: EvalConfig) -> Trace:
    """One question typed by a user, through the same parts and engine as ``run_eval``."""
    if REGISTRY[cfg.method].runner != "engine":
        raise UserError("`pra search` runs the search engine; use one of its methods (cot, sc, rag, rag-sc, qwc, pra)")
    parts = Parts().complete(cfg)
    (trace,) = parts.engine(cfg).run([Trace(q, context=_rag_context(cfg, parts, [q]).get(q.id, ()),
                                            examples=_qwc_examples(cfg, [q]))])
    return trace


def searches(record: dict[str, Any]) -> int:
    """Retrievals a record's question cost: counted by the engine for PRA and PULSE; RAG and RAG+SC
    retrieve once per question, before it (its passages' titles are the record's ``context``)."""
    if getattr(REGISTRY.get(record.get("method")), "retrieves", None) == "question":
        return 1 if record.get("context") else 0
    return record.get("stats", {}).get("searches", 0)


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """n, accuracy and costs over unique question ids (a repeated id counts once, as first written)."""
    records = list({str(r["id"]): r for r in reversed(records)}.values())
    n = len(records)
    acc = sum(r["correct"] for r in records) / n if n else 0.0
    mean = lambda key: sum(r.get(key, 0) for r in records) / n if n else 0.0
    return {"n": n, "accuracy": acc, "stderr": clustered_stderr(records), **letter_stats(records),
            "forced": sum(r["forced"] for r in records), "tokens_per_question": mean("tokens"),
            "seconds_per_question": mean("seconds"),
            "searches_per_question": sum(searches(r) for r in records) / n if n else 0.0,
            "skipped_too_long": sum("skipped" in r for r in records),
            # records whose steps repeat a base-model prompt's worked example (pra.prompts.copies_example)
            "copied_example": sum(copies_example([s["text"] for s in r.get("steps", [])]) for r in records)}


def run_eval(cfg: EvalConfig, policy: LMBackend | None = None, reward_agent=None, retriever=None,
             controller=None, force_new: bool = False) -> dict[str, Any]:
    """Run (or resume) one evaluation; returns the summary also written to ``out/summary.json``.
    ``force_new``: records made with other settings are set aside rather than refused (``eval.run_folder``)."""
    return run_with_parts(cfg, Parts(policy, reward_agent, retriever, controller), force_new)


def run_with_parts(cfg: EvalConfig, parts: Parts, force_new: bool = False) -> dict[str, Any]:
    """``run_eval`` on parts the caller keeps: what the run has to load (only if questions are left) is
    loaded into ``parts``, so that a suite hands it to the next run."""
    brought = {"policy": parts.policy, "reward_agent": parts.reward_agent, "retriever": parts.retriever}
    check_eval_config(cfg, loaded=[name for name, part in brought.items() if part is not None])
    shard = parse_shard(cfg.shard) if cfg.shard else None
    load = load_eval_benchmark(cfg.benchmark, skip_bad=cfg.skip_bad)
    total, benchmark_hash = len(load.questions), content_hash(load.questions)
    load = replace(load, questions=questions_asked(load.questions, limit=cfg.limit, sample=cfg.sample,
                                                   seed=cfg.seed, shard=shard, permute=cfg.permute))
    if load.skipped_rows:
        print(f"--skip-bad: skipped {len(load.skipped_rows)} bad row(s): {'; '.join(load.skipped_rows)}", file=sys.stderr)
    if not load.questions:
        raise UserError(f"{load.path}: no questions to evaluate" + (f" in shard {cfg.shard}" if cfg.shard else ""))
    from pra.models import has_chat_template

    chat = parts.policy.has_chat_template if parts.policy is not None else has_chat_template(cfg.policy)
    kind = prompt_kind(cfg.method)
    config = {**asdict(cfg), "policy_prompt": policy_prompt_id(chat, kind), "benchmark_hash": benchmark_hash}
    with open_run_folder(Path(cfg.out), config, force_new) as fp:
        return _run_questions(cfg, load, parts, fp, total)


def _skip_overlong(cfg: EvalConfig, parts: Parts, todo: list[Question], context: dict[str, tuple],
                   examples: tuple[ScoredTrace, ...], writer: JsonlWriter, done) -> list[Question]:
    """Record the questions whose prompts do not fit the context as skipped (answered by no one: counted
    wrong, with the reason), say so, and return the others."""
    too_long = overlong(cfg, parts, todo, context, examples)
    for q in todo:
        if q.id in too_long:
            writer.write({"id": q.id, "gold": q.answer, "prediction": None, "correct": False, "forced": False,
                          "method": cfg.method, "steps": [], "tokens": 0, "seconds": 0.0, "skipped": too_long[q.id]})
            done()
    if too_long:
        first = next(iter(too_long.items()))
        print(f"skipped {len(too_long)} question(s) too long for the context, recorded as wrong; e.g. {first[0]}: "
              f"{first[1]}", file=sys.stderr)
    return [q for q in todo if q.id not in too_long]


def _run_questions(cfg: EvalConfig, load: BenchmarkLoad, parts: Parts, fingerprint: str, total: int) -> dict[str, Any]:
    """The questions of ``load`` not yet in the run folder, then the summary of all of them (``total``:
    the benchmark's size, for "n of N")."""
    out = Path(cfg.out)
    writer = JsonlWriter(out / "records.jsonl", stamp={"fingerprint": fingerprint})
    todo = asking_order([q for q in load.questions if q.id not in writer.done], cfg.seed)
    # Engine methods count reasoning steps (max_steps a question), so that the bar moves with the batched
    # stages; direct and PULSE decoding count questions.
    runner = REGISTRY[cfg.method].runner
    steps = cfg.search.max_steps if runner == "engine" else 1
    n = len(load.questions)
    bar = tqdm(total=n * steps, initial=(n - len(todo)) * steps, unit="step" if steps > 1 else "question",
               desc=f"{cfg.method} {cfg.benchmark}" + (f" ({n} questions x {steps} steps)" if steps > 1 else ""))
    if todo:
        parts.complete(cfg)
        context, examples = _rag_context(cfg, parts, todo), _qwc_examples(cfg, todo)
        todo = _skip_overlong(cfg, parts, todo, context, examples, writer, lambda: bar.update(steps))
    if todo:
        if runner == "letters":
            _direct(parts.policy, todo, writer, bar, cfg.batch_size, cfg.search.readout)
        elif runner == "pulse":
            for t in parts.pulse_decoder(cfg).run(todo, batch=cfg.max_active):
                writer.write(_pulse_record(t, cfg.method))
                bar.update()
        else:
            engine = parts.engine(cfg)
            traces = (Trace(q, context=context.get(q.id, ()), examples=examples) for q in todo)
            for t in engine.run(traces, max_active=cfg.max_active, progress=bar.update):
                writer.write(_record(t, cfg.method))
    bar.close()
    writer.close()
    ids = {q.id for q in load.questions}
    records = [r for r in read_records(out / "records.jsonl") if r["id"] in ids]
    summary = {"benchmark": cfg.benchmark, "method": cfg.method, "policy": cfg.policy, "of": total,
               "permute": cfg.permute, **({"sample": cfg.sample, "seed": cfg.seed} if cfg.sample else {}),
               **({"reward_agent": cfg.reward_agent} if reads(cfg.method, "reward_agent") else {}),
               **({"search": cfg.search_controller} if reads(cfg.method, "search_controller") else {}),
               "skipped_bad_rows": load.skipped, "fingerprint": fingerprint, **summarize(records),
               **constant_text_stats(records, load.questions), **longest_option_stats(records, load.questions)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
