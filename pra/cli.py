"""The ``pra`` command line. It only parses arguments, loads a recipe and calls one library function per
verb; nothing imports it."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, fields, replace
from pathlib import Path

import yaml


def _table(title: str, row: dict, columns: dict[str, str]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for header in columns.values():
        table.add_column(header, justify="right")
    table.add_row(*[f"{row[k]:.3f}" if isinstance(row[k], float) else str(row[k]) for k in columns])
    Console().print(table)


def cmd_models(args: argparse.Namespace) -> None:
    from pra.models import EMBEDDED, resolve

    for m in EMBEDDED.values():
        path = resolve(m.name) if args.prepare else "(run `pra models --prepare`)"
        print(f"{m.name:24s} {m.kind:10s} {path}")


def _recipe_path(recipe: str) -> Path:
    """A YAML file, or the name of one shipped in search/recipes."""
    import search

    for path in (Path(recipe), Path(search.__file__).parent / "recipes" / f"{recipe}.yaml"):
        if path.is_file():
            return path
    raise FileNotFoundError(f"no recipe file {recipe!r} (and no search/recipes/{recipe}.yaml)")


def _eval_config(args: argparse.Namespace):
    from eval.run import EvalConfig
    from search.engine import SearchConfig

    data: dict = {}
    recipe = args.recipe or getattr(args, "recipe_default", None)
    if recipe:
        recipe = _recipe_path(recipe)
        data = yaml.safe_load(recipe.read_text()) or {}
        unknown = set(data) - {f.name for f in fields(EvalConfig)}
        if unknown:
            raise ValueError(f"{recipe}: unknown field(s) {', '.join(sorted(unknown))}")
    search = SearchConfig(**data.pop("search", {}))
    cfg = EvalConfig(**data, search=search)
    overrides = {f.name: getattr(args, f.name) for f in fields(EvalConfig)
                 if getattr(args, f.name, None) is not None and f.name != "search"}
    search_overrides = {f.name: getattr(args, f.name) for f in fields(SearchConfig)
                        if getattr(args, f.name, None) is not None}
    return replace(cfg, **overrides, search=replace(search, **search_overrides))


def cmd_eval(args: argparse.Namespace) -> None:
    from eval.run import run_eval

    cfg = _eval_config(args)
    summary = run_eval(cfg)
    _table(f"{cfg.method} on {cfg.benchmark} ({cfg.policy})", summary,
           {"n": "n", "accuracy": "accuracy", "stderr": "± s.e.", "forced": "forced",
            "tokens_per_question": "tokens/q", "seconds_per_question": "s/q", "searches_per_question": "searches/q"})
    print(f"records: {Path(cfg.out) / 'records.jsonl'}\nsummary: {Path(cfg.out) / 'summary.json'}")


def cmd_index_build(args: argparse.Namespace) -> None:
    from corpora.index import build_index

    print(f"index written to {build_index(args.corpus, args.encoder, args.kind)}")


def cmd_retrieve(args: argparse.Namespace) -> None:
    from corpora.retrieval import format_hits, load_retriever

    retriever = load_retriever(args.corpus, mode=args.mode, encoder=args.encoder)
    print(format_hits(retriever.retrieve([args.text], args.k)[0]))


def cmd_search(args: argparse.Namespace) -> None:
    from eval.run import run_question
    from pra.types import Question

    if len(args.option) < 2:
        raise ValueError("give at least two --option values (they become A, B, C, ...)")
    q = Question("user", args.question, dict(zip("ABCDEFGHIJ", args.option)), "?", "user")
    cfg = _eval_config(args)
    t = run_question(q, cfg)
    for i, step in enumerate(t.best.steps, 1):
        reward = "  -  " if step.reward is None else f"{step.reward:.3f}"
        searched = f" searched {', '.join(step.doc_ids)}" if step.searched else ""
        print(f"Step {i} [reward {reward}]{searched}: {step.text}")
    print(f"answer: ({t.prediction}) {q.options.get(t.prediction, '')}" + (" [forced]" if t.forced else ""))


def cmd_label(args: argparse.Namespace) -> None:
    from training.config import LabelConfig, load_config
    from training.label import run_label

    cfg = load_config(LabelConfig, "label", args.recipe, vars(args))
    print(json.dumps(run_label(cfg), indent=2))
    print(f"labels: {Path(cfg.out) / 'labels.jsonl'}")


def cmd_train(args: argparse.Namespace) -> None:
    from training.config import TrainConfig, load_config
    from training.train import train

    cfg = load_config(TrainConfig, "train", args.recipe, vars(args))
    metrics = train(cfg)
    print(json.dumps({"untrained": metrics["initial"], "trained": metrics["final"]}, indent=2))
    print(f"reward agent: {cfg.out} (use --reward-agent {cfg.out})")


def _add_eval_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--recipe", help="YAML file with EvalConfig fields (and a `search:` block)")
    p.add_argument("--method", help="direct | cot | sc | rag | rag-sc | pra")
    p.add_argument("--policy", help="embedded model name, hub id or local folder")
    p.add_argument("--backend", help="policy backend: transformers | vllm | openai")
    p.add_argument("--base-url", dest="base_url", help="OpenAI-compatible server for --backend openai")
    p.add_argument("--reward-agent", dest="reward_agent", help="backbone name (untrained) or adapter folder")
    p.add_argument("--search", dest="search_controller", help="always | never | threshold:θ | sample")
    p.add_argument("--beam-width", dest="beam_width", type=int, help="B: traces kept per question")
    p.add_argument("--branching", type=int, help="b: candidate next steps per kept trace")
    p.add_argument("--docs-per-search", dest="docs_per_search", type=int)
    p.add_argument("--samples", type=int, help="k for sc / rag-sc")
    p.add_argument("--batch-size", dest="batch_size", type=int, help="sequences per forward batch")
    p.add_argument("--corpus")
    p.add_argument("--retrieval", help="dense | bm25 | hybrid")
    p.add_argument("--rag-docs", dest="rag_docs", type=int)
    p.add_argument("--max-steps", dest="max_steps", type=int)
    p.add_argument("--step-tokens", dest="step_tokens", type=int)
    p.add_argument("--temperature", type=float)
    p.add_argument("--seed", type=int)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pra", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("models", help="list the embedded models; --prepare caches them")
    p.add_argument("--prepare", action="store_true", help="dequantize GGUF checkpoints into the cache")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("eval", help="run a method over a benchmark (resumable)")
    _add_eval_flags(p)
    p.add_argument("--benchmark")
    p.add_argument("--out", help="run folder: records.jsonl, summary.json")
    p.add_argument("--limit", type=int)
    p.add_argument("--shard", help="i/n: this machine's share of the questions")
    p.add_argument("--skip-bad", dest="skip_bad", action="store_true", default=None)
    p.add_argument("--max-active", dest="max_active", type=int, help="questions in the queue at once")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("search", help="run one typed question through the decoder, printing each kept step")
    _add_eval_flags(p)
    p.add_argument("--question", required=True)
    p.add_argument("--option", action="append", default=[], help="an answer option; repeat in order")
    p.set_defaults(func=cmd_search, recipe_default="pra-cpu")

    index = sub.add_parser("index", help="dense indexes").add_subparsers(dest="index_command", required=True)
    p = index.add_parser("build", help="embed a corpus and build its FAISS index")
    p.add_argument("--corpus", default="medcorp-mini")
    p.add_argument("--encoder", default="minilm-l6-v2")
    p.add_argument("--kind", default="flat", help="flat | ivf | hnsw | ivfpq")
    p.set_defaults(func=cmd_index_build)

    p = sub.add_parser("label", help="teacher labels for every step of policy traces on training questions (resumable)")
    p.add_argument("--recipe", default="cpu", help="YAML file (its `label:` block) or a training/recipes name")
    p.add_argument("--benchmark", help="training questions (medmcqa-train); evaluation sets are refused")
    p.add_argument("--limit", type=int)
    p.add_argument("--shard", help="i/n: this machine's share of the questions")
    p.add_argument("--out", help="folder: traces.jsonl, labels.jsonl, label_stats.json")
    p.add_argument("--policy")
    p.add_argument("--backend", help="policy backend: transformers | vllm | openai")
    p.add_argument("--base-url", dest="base_url")
    p.add_argument("--traces", type=int, help="per question: 1 = greedy CoT, k > 1 = k sampled")
    p.add_argument("--max-steps", dest="max_steps", type=int)
    p.add_argument("--step-tokens", dest="step_tokens", type=int)
    p.add_argument("--teachers", type=lambda s: s.split(","), help="judge,rollout | judge | rollout")
    p.add_argument("--judge", help="judge model: embedded name, hub id, or the served name")
    p.add_argument("--judge-backend", dest="judge_backend", help="transformers | vllm | openai")
    p.add_argument("--judge-base-url", dest="judge_base_url")
    p.add_argument("--retrieval", help="dense | bm25 | hybrid")
    p.add_argument("--docs", type=int, help="passages per step")
    p.add_argument("--rollouts", type=int, help="completions per partial trace")
    p.add_argument("--rollout-steps", dest="rollout_steps", type=int)
    p.add_argument("--batch-size", dest="batch_size", type=int)
    p.add_argument("--seed", type=int)
    p.set_defaults(func=cmd_label)

    p = sub.add_parser("train", help="fine-tune the reward agent on teacher labels (resumable)")
    p.add_argument("--recipe", default="cpu", help="YAML file (its `train:` block) or a training/recipes name")
    p.add_argument("--labels", help="labels.jsonl from `pra label`")
    p.add_argument("--out", help="folder: the agent (adapter), checkpoints/, log.jsonl, metrics.json")
    p.add_argument("--base", help="backbone: embedded name or hub id")
    p.add_argument("--reward-label", dest="reward_label", help="judge | rollout | soft")
    p.add_argument("--search-label", dest="search_label", help="always | margin")
    p.add_argument("--full", dest="lora", action="store_false", default=None, help="full fine-tuning, not LoRA")
    p.add_argument("--lr", type=float)
    p.add_argument("--epochs", type=int)
    p.add_argument("--max-steps", dest="max_steps", type=int, help="optimizer steps at most")
    p.add_argument("--batch-size", dest="batch_size", type=int)
    p.add_argument("--grad-accum", dest="grad_accum", type=int)
    p.add_argument("--save-every", dest="save_every", type=int)
    p.add_argument("--device")
    p.add_argument("--seed", type=int)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("retrieve", help="print the passages a query retrieves")
    p.add_argument("text")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--mode", default="dense", help="dense | bm25 | hybrid")
    p.add_argument("--corpus", default="medcorp-mini")
    p.add_argument("--encoder", default="minilm-l6-v2")
    p.set_defaults(func=cmd_retrieve)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()     # weight-loading bars would bury the run's own progress
    hf_logging.set_verbosity_error()
    try:
        args.func(args)
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        # Bad input is reported in one line naming what is wrong, not as a traceback.
        print(f"pra {args.command}: error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
