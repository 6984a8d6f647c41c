"""What a ``pra eval`` would do, said before it does it: the questions, the method, the models, where
the records go and, where runs of the same kind were measured (``eval/results``), about how long."""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from eval.methods import reads, uses_corpus
from pra.errors import UserError

if TYPE_CHECKING:
    from eval.run import EvalConfig

RESULTS = Path(__file__).parent / "results"
SHAPE = ("beam_width", "branching", "max_steps")     # what a PRA run's time grows with


def measured_seconds(cfg: "EvalConfig", results: Path = RESULTS) -> tuple[float, int] | None:
    """(median seconds per record, runs) over the committed runs with this method, policy and backend
    (and for pra the same agent, B, b and steps); None when none was measured."""
    found = []
    for path in results.rglob("summary.json"):
        try:
            summary = json.loads(path.read_text())
            config = json.loads((path.parent / "config.json").read_text())
        except (OSError, ValueError):
            continue
        if (summary.get("method"), summary.get("policy"), config.get("backend", "transformers")) != \
                (cfg.method, cfg.policy, cfg.backend):
            continue
        if cfg.method == "pra" and (config.get("reward_agent") != cfg.reward_agent or
                                    any((config.get("search") or {}).get(k) != getattr(cfg.search, k) for k in SHAPE)):
            continue
        if summary.get("seconds_per_question"):
            found.append(summary["seconds_per_question"])
    return (statistics.median(found), len(found)) if found else None


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds / 3600:.1f} hours"


def plan(cfg: "EvalConfig", out_given: bool = True) -> list[str]:
    """The run ``cfg`` describes, in a few lines (loads the benchmark, no model)."""
    from pra.benchmarks import load_eval_benchmark, parse_shard
    from pra.selection import questions_asked

    load = load_eval_benchmark(cfg.benchmark, skip_bad=cfg.skip_bad)
    asked = questions_asked(load.questions, limit=cfg.limit, sample=cfg.sample, seed=cfg.seed,
                            shard=parse_shard(cfg.shard) if cfg.shard else None, permute=cfg.permute)
    total = len(load.questions)
    if not asked:
        raise UserError(f"{load.path}: no questions to evaluate" + (f" in shard {cfg.shard}" if cfg.shard else ""))
    how = (f"a seeded sample (--sample {cfg.sample}, seed {cfg.seed})" if cfg.sample else
           f"the first {cfg.limit}" if cfg.limit else "all of them")
    rotations = f", {len(asked):,} records (options {cfg.permute})" if cfg.permute == "cyclic" else ""
    lines = [f"plan: {cfg.method} on {cfg.benchmark}: {len(asked):,} of its {total:,} questions, {how}"
             + (f", shard {cfg.shard}" if cfg.shard else "") + rotations,
             f"  policy {cfg.policy} on {cfg.backend}" + (f", {cfg.dtype}" if cfg.dtype else "")]
    s = cfg.search
    if cfg.method == "pra":
        lines.append(f"  reward agent {cfg.reward_agent}, search {cfg.search_controller}, B={s.beam_width} "
                     f"b={s.branching}, {s.max_steps} steps of at most {s.step_tokens} tokens")
    elif cfg.method != "direct":
        lines.append(f"  {s.max_steps} steps of at most {s.step_tokens} tokens"
                     + (f", k={cfg.samples} samples" if reads(cfg.method, "samples") else ""))
    if uses_corpus(cfg.method):
        lines.append(f"  corpus {cfg.corpus} ({cfg.retrieval})")
    lines.append(f"  records: {Path(cfg.out) / 'records.jsonl'}" + ("" if out_given else " (no --out given)"))
    measured = measured_seconds(cfg)
    if measured:
        per, runs = measured
        lines.append(f"  estimated time: about {_duration(per * len(asked))} at {per:.1f} s/question (median of "
                     f"{runs} measured run(s) of this method and policy in eval/results; this machine may differ)")
    else:
        lines.append("  estimated time: unknown (no measured run of this method and policy in eval/results)")
    return lines
