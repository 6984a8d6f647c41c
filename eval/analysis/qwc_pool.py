"""A pool for ``--method qwc``: ``pra runs qwc-pool TRACES.jsonl --judge MODEL --out POOL.jsonl
[--benchmark medmcqa-train] [--first N]``.

Every trace of a ``pra label`` traces file (policy traces on training questions) is judged by
``eval.analysis.quality`` and written with its composite as its quality, together with its question, so that
the pool alone is enough to show it (``search/qwc.py`` reads it). Append-only and resumable.
"""
from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from pra.benchmarks import EVAL_BENCHMARKS, load_benchmark
from eval.analysis.quality import JudgedTrace, QualityConfig, QualityJudge, check_resume, composite
from pra.backends.base import LMBackend
from pra.records import JsonlWriter, read_records
from pra.errors import UserError
from pra.selection import by_record_id


def build_pool(traces: Path, judge: LMBackend, out: Path, benchmark: str = "medmcqa-train",
               first: int | None = None, config: QualityConfig = QualityConfig()) -> int:
    """Judge the traces of the first ``first`` questions of ``traces`` into ``out``; returns the
    number written now."""
    if benchmark in EVAL_BENCHMARKS:
        raise UserError(f"{benchmark!r} is an evaluation set; a qwc pool is made of training questions")
    questions = by_record_id(load_benchmark(benchmark).questions)
    records = list(read_records(traces))[:first]
    items = []
    for i, r in enumerate(records, 1):
        if "id" not in r or "traces" not in r:
            raise UserError(f"{traces}: record {i}: fields 'id' and 'traces' needed")
        if r["id"] not in questions:
            raise UserError(f"{traces}: record {i}: question {r['id']!r} is not in {benchmark!r}")
        for t, tr in enumerate(r["traces"]):
            steps = tuple(s for s in tr["steps"] if s.strip())
            if steps:
                items.append((f"{r['id']}/t{t}", JudgedTrace(questions[r["id"]], steps, tr.get("answer"))))
    check_resume(out, judge=judge.name)
    qj, written = QualityJudge(judge, config), 0
    with JsonlWriter(out) as writer:
        todo = [(key, t) for key, t in items if key not in writer.done]
        for s in range(0, len(todo), config.chunk):
            chunk = todo[s:s + config.chunk]
            for (key, t), scores in zip(chunk, qj.score([t for _, t in chunk])):
                q = t.question
                writer.write({"id": key, "question_id": q.id, "question": q.question, "options": q.options,
                              "gold": q.answer, "source": benchmark, "steps": list(t.steps), "answer": t.answer,
                              "quality": round(composite(scores, config.weights), 4),
                              "criteria": {k: round(v, 4) for k, v in asdict(scores).items()},
                              "judge": judge.name, "traces": str(traces)})
                written += 1
    return written


def main(argv: list[str] | None = None) -> None:
    from pra.backends import load_policy

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", type=Path, help="traces.jsonl from pra label (training questions)")
    ap.add_argument("--judge", required=True, help="judge model: embedded name, hub id, or the served name")
    ap.add_argument("--out", type=Path, required=True, help="the pool (JSONL, resumable)")
    ap.add_argument("--benchmark", default="medmcqa-train", help="the training set the traces answer")
    ap.add_argument("--first", type=int, help="only the first N questions of the traces file")
    a = ap.parse_args(argv)
    written = build_pool(a.traces, load_policy(a.judge), a.out, a.benchmark, a.first)
    print(f"{written} traces judged into {a.out}")


if __name__ == "__main__":
    main()
