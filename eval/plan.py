"""What a ``pra eval`` would do, said before it does it: the questions, the method, the models, where
the records go, how many of them the folder already holds and, from this run's own records or from
runs of the same kind measured before (``eval/results``), about how long the rest takes. For a suite,
one line a run and a total: where a grid that spans sessions stands."""
from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from eval.methods import reads, uses_corpus
from pra.errors import UserError
from pra.records import read_records

if TYPE_CHECKING:
    from eval.run import EvalConfig
    from pra.types import Question

RESULTS = Path(__file__).parent / "results"
SHAPE = ("beam_width", "branching", "max_steps")     # what a PRA run's time grows with


@lru_cache(maxsize=None)
def _measured_runs(results: Path) -> tuple[tuple[dict, dict], ...]:
    """(summary, config) of every run folder under ``results`` that has both, read once."""
    runs = []
    for path in sorted(results.rglob("summary.json")):
        try:
            runs.append((json.loads(path.read_text()), json.loads((path.parent / "config.json").read_text())))
        except (OSError, ValueError):
            continue
    return tuple(runs)


def measured_seconds(cfg: "EvalConfig", results: Path = RESULTS) -> tuple[float, int, bool] | None:
    """(median seconds per record, runs, whether they are on this benchmark) over the committed runs
    with this method, policy and backend (and for pra the same agent, B, b and steps): those on the
    same benchmark where there are any, since a benchmark's question length sets its rate (MedQA's
    vignettes take longer than medmcqa's one-liners), else all of them; None when none was measured."""
    found: dict[bool, list[float]] = {True: [], False: []}
    for summary, config in _measured_runs(results):
        if (summary.get("method"), summary.get("policy"), config.get("backend", "transformers")) != \
                (cfg.method, cfg.policy, cfg.backend):
            continue
        if cfg.method == "pra" and (config.get("reward_agent") != cfg.reward_agent or
                                    any((config.get("search") or {}).get(k) != getattr(cfg.search, k) for k in SHAPE)):
            continue
        if summary.get("seconds_per_question"):
            found[summary.get("benchmark") == cfg.benchmark].append(summary["seconds_per_question"])
    same = bool(found[True])
    rates = found[True] if same else found[False]
    return (statistics.median(rates), len(rates), same) if rates else None


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds / 3600:.1f} hours"


def asked_questions(cfg: "EvalConfig", loads: dict | None = None) -> tuple[int, list["Question"]]:
    """(the benchmark's size, what the run asks: one entry a record); ``loads`` keeps loaded benchmarks."""
    from pra.benchmarks import load_eval_benchmark, parse_shard
    from pra.selection import questions_asked

    loads = {} if loads is None else loads
    key = (cfg.benchmark, cfg.skip_bad)
    if key not in loads:
        loads[key] = load_eval_benchmark(cfg.benchmark, skip_bad=cfg.skip_bad)
    load = loads[key]
    asked = questions_asked(load.questions, limit=cfg.limit, sample=cfg.sample, seed=cfg.seed,
                            shard=parse_shard(cfg.shard) if cfg.shard else None, permute=cfg.permute)
    if not asked:
        raise UserError(f"{load.path}: no questions to evaluate" + (f" in shard {cfg.shard}" if cfg.shard else ""))
    return len(load.questions), asked


def progress(cfg: "EvalConfig", asked: list["Question"]) -> tuple[int, float | None]:
    """(records of ``asked`` the run folder holds, their mean seconds; None before the first)."""
    wanted = {q.id for q in asked}
    seconds = {r["id"]: r.get("seconds") or 0.0 for r in read_records(Path(cfg.out) / "records.jsonl")
               if r.get("id") in wanted}
    return len(seconds), (statistics.fmean(seconds.values()) if seconds else None)


def time_left(cfg: "EvalConfig", asked: list["Question"], started: bool = True) -> tuple[int, float | None, str]:
    """(records done, seconds the rest takes or None where nothing says, how that was estimated);
    ``started`` False: ``cfg.out`` is only a default, whatever it holds is not this run's."""
    done, own = progress(cfg, asked) if started else (0, None)
    rest = len(asked) - done
    if not rest:
        return done, 0.0, "finished"
    if own is not None:
        return done, own * rest, f"{own:.1f} s a record, this run's own so far"
    measured = measured_seconds(cfg)
    if measured is None:
        return done, None, "no measured run of this method and policy in eval/results"
    per, runs, same = measured
    where = "on this benchmark" if same else "on other benchmarks"
    return done, per * rest, (f"{per:.1f} s a record, the median of {runs} measured run(s) of this method and "
                              f"policy {where} in eval/results; this machine may differ")


def plan(cfg: "EvalConfig", out_given: bool = True) -> list[str]:
    """The run ``cfg`` describes, in a few lines (loads the benchmark, no model)."""
    from pra.selection import split_id

    total, asked = asked_questions(cfg)
    how = (f"a seeded sample (--sample {cfg.sample}, seed {cfg.seed})" if cfg.sample else
           f"the first {cfg.limit}" if cfg.limit else "all of them")
    n_questions = len({split_id(q.id)[0] for q in asked})
    rotations = f", {len(asked):,} records (options {cfg.permute})" if len(asked) != n_questions else ""
    lines = [f"plan: {cfg.method} on {cfg.benchmark}: {n_questions:,} of its {total:,} questions, {how}"
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
    done, seconds, basis = time_left(cfg, asked, started=out_given)
    lines.append(f"  records: {Path(cfg.out) / 'records.jsonl'}" + ("" if out_given else " (no --out given)")
                 + (f", {done:,} of {len(asked):,} there" if done else "")
                 + (" (the run resumes after them)" if 0 < done < len(asked) else ""))
    estimate = ("nothing left" if done == len(asked) else "unknown" if seconds is None else f"about {_duration(seconds)}")
    lines.append(f"  estimated time: {estimate} ({basis})")
    return lines


def suite_plan(configs: list["EvalConfig"], shard: str | None = None) -> list[str]:
    """One line a run of a suite (records there of those it asks, the time its rest takes), then the
    total: how many runs are finished, started, not started, and the hours left where measured."""
    loads: dict = {}
    lines, states, left, unknown, records_left = [], Counter(), 0.0, 0, 0
    for i, cfg in enumerate(configs, 1):
        cfg = replace(cfg, shard=shard or cfg.shard)
        _, asked = asked_questions(cfg, loads)
        done, seconds, _ = time_left(cfg, asked)
        states["finished" if done == len(asked) else "started" if done else "not started"] += 1
        records_left += len(asked) - done
        if seconds is None:
            unknown += 1
        else:
            left += seconds
        estimate = ("finished" if done == len(asked) else "time unknown" if seconds is None else
                    f"about {_duration(seconds)} left")
        lines.append(f"[{i}/{len(configs)}] {done:>5,} of {len(asked):<5,} {cfg.method} {cfg.benchmark} {cfg.policy}: "
                     f"{estimate}  ({cfg.out})")
    lines.append(f"{len(configs)} runs: {states['finished']} finished, {states['started']} started, "
                 f"{states['not started']} not started; {records_left:,} records left, about {_duration(left)} "
                 f"at the measured rates" + (f" and {unknown} run(s) not measured yet" if unknown else ""))
    return lines
