"""The ``pra`` command line. It only parses arguments, loads a recipe and calls one library function per
verb; nothing imports it."""
from __future__ import annotations

import argparse
import json
import sys
import traceback
from dataclasses import fields
from pathlib import Path

from pra.errors import UserError
from pra.records import NO_SPACE
from pra.models import DEFAULT_REWARD_AGENT


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


def _eval_config(args: argparse.Namespace):
    from eval.checks import check_eval_config
    from eval.run import EvalConfig, eval_config
    from search.engine import SearchConfig

    data = {f.name: getattr(args, f.name) for f in fields(EvalConfig)
            if getattr(args, f.name, None) is not None and f.name != "search"}
    data["search"] = {f.name: getattr(args, f.name) for f in fields(SearchConfig)
                      if getattr(args, f.name, None) is not None}
    recipe = args.recipe or getattr(args, "recipe_default", None)
    cfg = eval_config({"recipe": recipe, **data} if recipe else data, "command line")
    given = [k for k in data if k != "search"] + [f"search.{k}" for k in data["search"]]
    check_eval_config(cfg, given)
    return cfg


def cmd_eval(args: argparse.Namespace) -> None:
    from eval.letters import describe
    from eval.run import run_eval

    if args.suite:
        from eval.suite import run_suite
        given = [f"--{k.replace('_', '-')}" for k, v in vars(args).items()
                 if v not in (None, False) and k not in ("suite", "shard", "func", "command", "recipe_default", *SERVER_FLAGS)]
        if given:
            raise UserError(f"--suite: runs take their settings from the suite file; drop {' '.join(given)}")
        for s in run_suite(args.suite, args.shard):
            print(f"{s['method']:>11} {s['benchmark']:<13} {s['policy']:<22} accuracy {s['accuracy']:.3f} "
                  f"(n {s['n']}: {s['questions']} of {s['of']} questions, options {s['permute']}; "
                  f"constant letter {s['constant_letter_accuracy']:.3f})")
        return
    cfg = _eval_config(args)
    summary = run_eval(cfg, force_new=args.force_new)
    viewer = f"`pra show {cfg.out}` writes {Path(cfg.out) / 'viewer.html'}"
    if cfg.show:
        from eval.viewer.page import write_page
        from eval.viewer.terminal import print_trees
        from eval.viewer.trees import load_trees

        trees = load_trees(cfg.out)
        print_trees(trees)
        viewer = f"{write_page(trees)} (open it in a browser)"
    _table(f"{cfg.method} on {cfg.benchmark} ({cfg.policy})", summary,
           {"n": "n", "accuracy": "accuracy", "stderr": "± s.e.", "forced": "forced",
            "tokens_per_question": "tokens/q", "seconds_per_question": "s/q", "searches_per_question": "searches/q"})
    print(describe(summary))
    print(f"records: {Path(cfg.out) / 'records.jsonl'}\nsummary: {Path(cfg.out) / 'summary.json'}\nviewer: {viewer}")


def cmd_show(args: argparse.Namespace) -> None:
    from eval.viewer.page import write_page
    from eval.viewer.trees import load_trees

    trees = load_trees(args.run)
    if args.print:
        from eval.viewer.terminal import print_trees
        print_trees(trees)
    print(f"viewer: {write_page(trees, args.out)}")


def cmd_index_build(args: argparse.Namespace) -> None:
    from corpora.index import build_index

    print(f"index written to {build_index(args.corpus, args.encoder, args.kind, dtype=args.dtype)}")


def cmd_retrieve(args: argparse.Namespace) -> None:
    from corpora.retrieval import format_hits, load_retriever

    if not args.text.strip():
        raise UserError("TEXT: the query is empty; give it some words")
    if args.k < 1:
        raise UserError(f"--k must be at least 1, got {args.k}")
    retriever = load_retriever(args.corpus, mode=args.mode, encoder=args.encoder)
    print(format_hits(retriever.retrieve([args.text], args.k)[0]))


def cmd_search(args: argparse.Namespace) -> None:
    from eval.run import run_question
    from pra.types import Question

    from pra.benchmarks import LETTERS

    if len(args.option) < 2:
        raise UserError("--option: give at least two (they become A, B, C, ...)")
    if len(args.option) > len(LETTERS):
        raise UserError(f"--option: at most {len(LETTERS)} (A to Z), got {len(args.option)}")
    q = Question("user", args.question, dict(zip(LETTERS, args.option)), "?", "user")
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
    if metrics is None:         # not the main process of an `accelerate launch`: it reports
        return
    held_out = {k: v for k, v in metrics.items() if k not in ("initial", "final", "history", "train_loss")}
    print(json.dumps({"untrained": metrics["initial"], "trained": metrics["final"], "held_out": held_out}, indent=2))
    print(f"reward agent: {cfg.out} (use --reward-agent {cfg.out})")


def cmd_probe_label(args: argparse.Namespace) -> None:
    from training.label import run_label
    from training.config import LabelConfig, load_config

    cfg = load_config(LabelConfig, "label", args.recipe, vars(args))
    print(json.dumps(run_label(cfg, purpose="detection"), indent=2))
    print(f"detection-only labels: {Path(cfg.out) / 'labels.jsonl'}")


def cmd_probe_features(args: argparse.Namespace) -> None:
    from pra.backends.transformers_backend import TransformersBackend
    from pra.pulse.dataset import write_features

    policy = TransformersBackend(args.policy, batch_size=args.batch_size, dtype=args.dtype)
    n = write_features(policy, args.labels, args.out, args.batch_size)
    print(f"{n} steps written to {args.out}")


def cmd_probe_train(args: argparse.Namespace) -> None:
    from pra.pulse.dataset import load_features
    from pra.pulse.features import parse_layers
    from pra.pulse.probe import ProbeConfig, train_probe

    overrides = {k: getattr(args, k) for k in ("pooling", "parts", "label", "seed", "val_fraction", "pos_weight")
                 if getattr(args, k) is not None}
    if args.layers:
        overrides["layers"] = parse_layers(args.layers)
    probe = train_probe(load_features(args.features), ProbeConfig(**overrides))
    probe.save(args.out)
    h = probe.history
    print(f"probe {probe.backbone} layers {probe.layers[0]}:{probe.layers[1]} {probe.pooling} {probe.parts}: "
          f"{h['train_steps']} training steps ({h['train_errors']} errors), {h['val_steps']} validation "
          f"({h['val_errors']} errors), best epoch {h['best_epoch']}, threshold {probe.threshold:.3f}")
    print(f"probe: {args.out} (use --search pulse:{args.out})")


def cmd_probe_eval(args: argparse.Namespace) -> None:
    from eval.pulse_detect import evaluate_detection, markdown, write_rows
    from pra.pulse.dataset import load_features
    from pra.pulse.probe import Probe

    tests = {}
    for spec in args.test:
        name, sep, path = spec.partition("=")
        if not sep:
            raise UserError(f"--test takes NAME=FEATURES.jsonl, got {spec!r}")
        tests[name] = load_features(path)
    rows = evaluate_detection(Probe.load(args.probe), load_features(args.train_features), tests,
                              with_baselines=not args.no_baselines)
    if args.results:
        write_rows(rows, args.results)
    print(markdown(rows))


def cmd_probe_table(args: argparse.Namespace) -> None:
    from eval.pulse_detect import load_rows, markdown

    print(markdown(load_rows(args.results)))


def cmd_report(args: argparse.Namespace) -> None:
    from eval.report.build import ReportConfig, build_report

    path = build_report(ReportConfig(args.runs, args.out, args.labels, args.first, args.quality, args.injection))
    print(f"report: {path}")


def cmd_compare(args: argparse.Namespace) -> None:
    from eval.compare import compare_runs, markdown

    warn = lambda line: print(f"pra compare: warning: {line}", file=sys.stderr)
    print(markdown(compare_runs(args.runs, seed=args.seed, seeds=args.seeds, allow_different=args.allow_different,
                                warn=warn)))


def cmd_merge(args: argparse.Namespace) -> None:
    from eval.merge import merge_shards

    warn = lambda line: print(f"pra merge: warning: {line}", file=sys.stderr)
    merged = merge_shards(args.out, args.shards, allow_different=args.allow_different, warn=warn)
    s = merged.summary
    print(f"merged {merged.records} records into {merged.out}: accuracy {s['accuracy']:.3f} ± {s['stderr']:.3f}")
    if merged.missing:
        shown = ", ".join(merged.missing[:5]) + (" ..." if len(merged.missing) > 5 else "")
        print(f"gaps: {len(merged.missing)} question(s) in no shard: {shown}")


SERVER_FLAGS = ("connect_timeout", "read_timeout", "retries", "concurrency", "api_key_env")


def _add_server_flags(p: argparse.ArgumentParser) -> None:
    """How the openai backend waits on its server (pra.backends.openai_backend.ServerOptions)."""
    p.add_argument("--connect-timeout", dest="connect_timeout", type=float, help="openai backend: seconds to connect (10)")
    p.add_argument("--read-timeout", dest="read_timeout", type=float, help="openai backend: seconds to wait for a reply (120)")
    p.add_argument("--retries", type=int, help="openai backend: retries of a failed request, a warning line each (4)")
    p.add_argument("--concurrency", type=int,
                   help="openai backend: requests at once (default: the server's slot count from /props, else 16)")
    p.add_argument("--api-key-env", dest="api_key_env",
                   help="openai backend: the environment variable holding the API key (default OPENAI_API_KEY)")


def _server_options(args: argparse.Namespace) -> None:
    from pra.backends.openai_backend import ServerOptions, set_server_options

    given = {k: getattr(args, k) for k in SERVER_FLAGS if getattr(args, k, None) is not None}
    set_server_options(ServerOptions(**given))


def _add_eval_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--recipe", help="YAML file with EvalConfig fields (and a `search:` block)")
    p.add_argument("--method", help="direct | cot | sc | rag | rag-sc | qwc | pra | pulse-front | pulse-step | ircot")
    p.add_argument("--policy", help="embedded model name, hub id or local folder")
    p.add_argument("--backend", help="policy backend: transformers | vllm | openai")
    p.add_argument("--base-url", dest="base_url", help="OpenAI-compatible server for --backend openai")
    p.add_argument("--agent-backend", dest="agent_backend", help="reward agent backend: transformers | vllm | openai")
    p.add_argument("--agent-base-url", dest="agent_base_url", help="OpenAI-compatible server for --agent-backend openai")
    p.add_argument("--reward-agent", dest="reward_agent",
                   help=f"shipped agent (default {DEFAULT_REWARD_AGENT}), adapter folder, or backbone name (untrained)")
    p.add_argument("--search", dest="search_controller",
                   help="always | never | threshold:θ | sample | rsus[:θ] | pulse:PROBE[:θ] (pra, pulse-front, pulse-step)")
    p.add_argument("--beam-width", dest="beam_width", type=int, help="B: traces kept per question")
    p.add_argument("--branching", type=int, help="b: candidate next steps per kept trace")
    p.add_argument("--docs-per-search", dest="docs_per_search", type=int)
    p.add_argument("--reward-aggregation", dest="reward_aggregation",
                   help="trace score from step rewards, for pruning and the answer: sum (paper) | mean | last | min | prod")
    p.add_argument("--samples", type=int, help="k for sc / rag-sc")
    p.add_argument("--batch-size", dest="batch_size", type=int, help="sequences per forward batch")
    p.add_argument("--corpus")
    p.add_argument("--retrieval", help="dense | bm25 | hybrid")
    p.add_argument("--rag-docs", dest="rag_docs", type=int)
    p.add_argument("--qwc-pool", dest="qwc_pool", help="scored training traces for qwc (default: the shipped pool)")
    p.add_argument("--qwc-k", dest="qwc_k", type=int, help="qwc examples: k/2 highest and k/2 lowest quality")
    p.add_argument("--max-steps", dest="max_steps", type=int)
    p.add_argument("--step-tokens", dest="step_tokens", type=int)
    p.add_argument("--temperature", type=float)
    p.add_argument("--seed", type=int, help="of --sample, --permute balanced and sampled steps")
    p.add_argument("--readout", help="answers read from logits (direct, forced): argmax | permavg | calibrate")
    _add_server_flags(p)


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
    p.add_argument("--limit", type=int, help="the first N questions (default: all)")
    p.add_argument("--sample", type=int, help="a random sample of N questions, fixed by --seed, the same everywhere")
    p.add_argument("--permute", help="option order: none | balanced (one rotation, gold letters uniform) | "
                                     "cyclic (every rotation, a record each)")
    p.add_argument("--shard", help="i/n: this machine's share of the questions")
    p.add_argument("--skip-bad", dest="skip_bad", action="store_true", default=None)
    p.add_argument("--force-new", dest="force_new", action="store_true",
                   help="--out holds records made with other settings: set them aside (*.replaced-TIME) and start afresh")
    p.add_argument("--max-active", dest="max_active", type=int, help="questions in the queue at once")
    p.add_argument("--suite", help="a grid of runs: a name in eval/suites (e.g. report-cpu) or a YAML file")
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
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="what passages are embedded in (bfloat16: ~3x faster on CPUs with AMX/AVX512-BF16)")
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
    p.add_argument("--teachers", type=lambda s: s.split(","), help="comma-separated: judge, rollout, goldprob")
    p.add_argument("--judge", help="judge model: embedded name, hub id, or the served name")
    p.add_argument("--judge-backend", dest="judge_backend", help="transformers | vllm | openai")
    p.add_argument("--judge-base-url", dest="judge_base_url")
    p.add_argument("--retrieval", help="dense | bm25 | hybrid")
    p.add_argument("--docs", type=int, help="passages per step")
    p.add_argument("--rollouts", type=int, help="completions per partial trace")
    p.add_argument("--rollout-steps", dest="rollout_steps", type=int)
    p.add_argument("--batch-size", dest="batch_size", type=int)
    p.add_argument("--seed", type=int)
    _add_server_flags(p)
    p.set_defaults(func=cmd_label)

    p = sub.add_parser("train", help="fine-tune the reward agent on teacher labels (resumable)")
    p.add_argument("--recipe", default="cpu", help="YAML file (its `train:` block) or a training/recipes name")
    p.add_argument("--labels", help="labels.jsonl from `pra label`")
    p.add_argument("--out", help="folder: the agent (adapter), checkpoints/, log.jsonl, metrics.json")
    p.add_argument("--base", help="backbone: embedded name or hub id")
    p.add_argument("--reward-label", dest="reward_label", help="judge | rollout | soft | goldprob | goldprob_soft | evidence")
    p.add_argument("--search-label", dest="search_label", help="always | margin")
    p.add_argument("--full", dest="lora", action="store_false", default=None, help="full fine-tuning, not LoRA")
    p.add_argument("--lr", type=float)
    p.add_argument("--lora-r", dest="lora_r", type=int, help="LoRA rank")
    p.add_argument("--lora-targets", dest="lora_targets", type=lambda v: [t for t in v.split(",") if t],
                   help="comma-separated module names LoRA adapts, e.g. q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
    p.add_argument("--epochs", type=int)
    p.add_argument("--max-steps", dest="max_steps", type=int, help="optimizer steps at most")
    p.add_argument("--batch-size", dest="batch_size", type=int)
    p.add_argument("--grad-accum", dest="grad_accum", type=int)
    p.add_argument("--save-every", dest="save_every", type=int)
    p.add_argument("--device", help="cpu forces the CPU; default: what the Trainer or accelerate launch picks")
    p.add_argument("--report-to", dest="report_to", help="the Trainer's loggers: none | tensorboard | wandb")
    p.add_argument("--seed", type=int)
    p.set_defaults(func=cmd_train)

    probe = sub.add_parser("probe", help="PULSE: step error probe on hidden-state trajectories").add_subparsers(
        dest="probe_command", required=True)
    p = probe.add_parser("label", help="traces and teacher labels on an EVALUATION set, for detection metrics only")
    p.add_argument("--recipe", default="cpu", help="YAML file (its `label:` block) or a training/recipes name")
    p.add_argument("--benchmark", required=True, help="an evaluation set: medmcqa-eval, mmlu-med, pubmedqa, ...")
    p.add_argument("--out", required=True, help="folder: traces.jsonl, labels.jsonl (marked purpose: detection)")
    p.add_argument("--limit", type=int)
    p.add_argument("--shard")
    p.add_argument("--policy")
    p.add_argument("--teachers", type=lambda s: s.split(","), help="comma-separated: judge, rollout, goldprob")
    p.add_argument("--judge")
    p.add_argument("--retrieval", help="dense | bm25 | hybrid")
    p.add_argument("--batch-size", dest="batch_size", type=int)
    p.set_defaults(func=cmd_probe_label)
    p = probe.add_parser("features", help="hidden-state trajectories and token statistics of labelled steps (resumable)")
    p.add_argument("--labels", required=True, help="labels.jsonl from `pra label` or `pra probe label`")
    p.add_argument("--out", required=True, help="step features JSONL")
    p.add_argument("--policy", default="smollm2-135m-instruct", help="the model that wrote the traces")
    p.add_argument("--dtype", help="float32 | bfloat16 (default: as the policy backend)")
    p.add_argument("--batch-size", dest="batch_size", type=int, default=8, help="traces per forward pass")
    p.set_defaults(func=cmd_probe_features)
    p = probe.add_parser("train", help="train the probe on training-step features")
    p.add_argument("--features", required=True)
    p.add_argument("--out", required=True, help="probe file (.pt)")
    p.add_argument("--layers", help="a:b, the layer interval (default: the backbone's)")
    p.add_argument("--pooling", help="last | mean")
    p.add_argument("--parts", help="both | angle | magnitude")
    p.add_argument("--label", help="judge | rollout | goldprob: the teacher whose 'incorrect' is an error")
    p.add_argument("--pos-weight", dest="pos_weight", type=float,
                   help="BCE weight of error steps (3, the paper's, suits about a quarter of errors)")
    p.add_argument("--val-fraction", dest="val_fraction", type=float)
    p.add_argument("--seed", type=int)
    p.set_defaults(func=cmd_probe_train)
    p = probe.add_parser("eval", help="AUROC, PR-AUC, F1 of the probe and the baselines on held-out steps")
    p.add_argument("--probe", required=True)
    p.add_argument("--train-features", dest="train_features", required=True,
                   help="the features the probe was trained on (its validation questions fix the baselines)")
    p.add_argument("--test", action="append", default=[], required=True, help="NAME=FEATURES.jsonl; repeat")
    p.add_argument("--results", help="append the rows to this JSONL")
    p.add_argument("--no-baselines", dest="no_baselines", action="store_true")
    p.set_defaults(func=cmd_probe_eval)
    p = probe.add_parser("table", help="Markdown table of a results file")
    p.add_argument("results")
    p.set_defaults(func=cmd_probe_table)

    p = sub.add_parser("report", help="Markdown tables and PNG figures regenerated from saved runs")
    p.add_argument("runs", nargs="+", type=Path, help="run folders, or folders holding them")
    p.add_argument("--out", type=Path, required=True, help="folder for report.md and the figures")
    p.add_argument("--labels", type=Path, help="labels.jsonl (or its folder) for the |dm| figures")
    p.add_argument("--first", type=int, help="only each benchmark's first N questions")
    p.add_argument("--quality", type=Path, nargs="+", default=[], help="quality files (python -m eval.quality)")
    p.add_argument("--injection", type=Path, nargs="+", default=[],
                   help="error-injection results (python -m eval.inject), one column each")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("show", help="one self-contained HTML page of a run's search trees (opens offline)")
    p.add_argument("run", type=Path, help="a run folder (config.json, records.jsonl)")
    p.add_argument("--out", type=Path, help="the page (default: RUN/viewer.html)")
    p.add_argument("--print", action="store_true", help="also print each question's tree in the terminal")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("compare", help="paired accuracy differences of runs on the same (question, rotation) records")
    p.add_argument("runs", nargs="+", type=Path,
                   help="run folders, or error-injection results (FILE.json); every pair is compared")
    p.add_argument("--seed", type=int, default=0, help="of the bootstrap")
    p.add_argument("--seeds", type=int, default=1,
                   help="repeat the bootstrap with N seeds (--seed onwards) and report how far the CI bounds move")
    p.add_argument("--allow-different", dest="allow_different", action="store_true",
                   help="compare runs of different benchmark content (refused otherwise), naming what differs")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("merge", help="join the run folders of a --shard i/n split into one run folder")
    p.add_argument("out", type=Path, help="the merged run folder (must not hold records yet)")
    p.add_argument("shards", nargs="+", type=Path, help="the shards' run folders")
    p.add_argument("--allow-different", dest="allow_different", action="store_true",
                   help="merge although the benchmark's content changed since the shards ran, naming what differs")
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser("retrieve", help="print the passages a query retrieves")
    p.add_argument("text")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--mode", default="dense", help="dense | bm25 | hybrid")
    p.add_argument("--corpus", default="medcorp-mini")
    p.add_argument("--encoder", default="minilm-l6-v2")
    p.set_defaults(func=cmd_retrieve)
    return parser


def run_command(args: argparse.Namespace) -> int:
    """The error boundary: bad input (``UserError``, a file that is missing or unreadable) prints one line
    per problem and returns 2; anything else is a bug, shown with its traceback."""
    try:
        if hasattr(args, "connect_timeout"):
            _server_options(args)
        args.func(args)
    except UserError as err:
        from pra.redact import redact_text

        for line in str(err).splitlines() or [type(err).__name__]:
            print(f"pra {args.command}: error: {redact_text(line)}", file=sys.stderr)   # no user:KEY@ of a URL
        return 2
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as err:
        print(f"pra {args.command}: error: " + (f"{err.filename}: {err.strerror}" if err.filename else str(err)),
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"pra {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        if isinstance(err, OSError) and err.errno in NO_SPACE:     # a full disk outside a records file
            print(f"pra {args.command}: error: {err.filename or 'a file'}: no space left on the device "
                  f"({err.strerror}); free some space and rerun the same command: finished records are kept",
                  file=sys.stderr)
            return 2
        traceback.print_exc()
        print(f"pra {args.command}: this is a bug in pra, not in your input; please report it, with the command "
              "and the traceback above, on the issue tracker of the repository pra came from", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()     # weight-loading bars would bury the run's own progress
    hf_logging.set_verbosity_error()
    if code := run_command(args):
        sys.exit(code)


if __name__ == "__main__":
    main()
