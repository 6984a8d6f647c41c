"""The ``pra`` command line. It only parses arguments, loads a recipe and calls one library function per
verb; nothing imports it."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, fields, replace
from pathlib import Path

import yaml


def _table(title: str, rows: list[dict], columns: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for c in columns:
        table.add_column(c)
    for r in rows:
        table.add_row(*[f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in columns])
    Console().print(table)


def cmd_models(args: argparse.Namespace) -> None:
    from pra.models import EMBEDDED, resolve

    for m in EMBEDDED.values():
        path = resolve(m.name) if args.prepare else "(run `pra models --prepare`)"
        print(f"{m.name:24s} {m.kind:10s} {path}")


def _eval_config(args: argparse.Namespace):
    from eval.run import EvalConfig
    from search.engine import SearchConfig

    data: dict = {}
    if args.recipe:
        data = yaml.safe_load(Path(args.recipe).read_text()) or {}
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
    _table(f"{cfg.method} on {cfg.benchmark} ({cfg.policy})", [summary],
           ["n", "accuracy", "stderr", "forced", "tokens_per_question", "seconds_per_question",
            "searches_per_question"])
    print(f"records: {Path(cfg.out) / 'records.jsonl'}\nsummary: {Path(cfg.out) / 'summary.json'}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pra", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("models", help="list the embedded models; --prepare caches them")
    p.add_argument("--prepare", action="store_true", help="dequantize GGUF checkpoints into the cache")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("eval", help="run a method over a benchmark (resumable)")
    p.add_argument("--recipe", help="YAML file with EvalConfig fields (and a `search:` block)")
    p.add_argument("--benchmark")
    p.add_argument("--method", help="direct | cot | sc | rag | rag-sc | pra")
    p.add_argument("--policy", help="embedded model name, hub id or local folder")
    p.add_argument("--out", help="run folder: records.jsonl, summary.json")
    p.add_argument("--limit", type=int)
    p.add_argument("--shard", help="i/n: this machine's share of the questions")
    p.add_argument("--skip-bad", dest="skip_bad", action="store_true", default=None)
    p.add_argument("--samples", type=int, help="k for sc / rag-sc")
    p.add_argument("--batch-size", dest="batch_size", type=int, help="sequences per forward batch")
    p.add_argument("--max-active", dest="max_active", type=int, help="questions in the queue at once")
    p.add_argument("--corpus")
    p.add_argument("--retrieval", help="dense | bm25 | hybrid")
    p.add_argument("--rag-docs", dest="rag_docs", type=int)
    p.add_argument("--max-steps", dest="max_steps", type=int)
    p.add_argument("--step-tokens", dest="step_tokens", type=int)
    p.add_argument("--temperature", type=float)
    p.add_argument("--seed", type=int)
    p.set_defaults(func=cmd_eval)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        # Bad input is reported in one line naming what is wrong, not as a traceback.
        print(f"pra {args.command}: error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
