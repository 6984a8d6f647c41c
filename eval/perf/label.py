"""Label-read benchmark: ``pra perf label [--labels DIR] [--questions N] [--reader NAME]``.

The gold-probability teacher (``pra label``, teacher ``goldprob``) reads the policy's permutation-averaged
answer after every step of every trace, with and without the step's passages; most of a label set's
time goes there. On llama.cpp the reads share their prefixes: the rotations of a question share its
head, and a trace read after step k+1 extends the read after step k. On the first N questions of a
committed label set (its traces, and the passages its labels recorded), in chunks as ``pra label``
makes them, one run measures:
  1. the reads with prefix reuse against the same reads with every prompt computed from its first
     token: prompt tokens computed, forward passes, seconds;
  2. whether both give the same labels, and how far the gold probability moves between them.
The last line is a one-line summary.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from types import SimpleNamespace

from pra.backends.llamacpp_backend import LlamaCppBackend
from pra.benchmarks import load_benchmark
from pra.errors import UserError
from pra.records import read_records
from training.label import goldprob_labels, step_items

LABELS = Path(__file__).parents[2] / "training" / "labels" / "qwen15-goldprob"


Chunk = tuple[list, list]      # (items, each item's passages)


def chunks(labels: Path, questions: int) -> tuple[dict, list[Chunk]]:
    """The label set's settings, and its first ``questions`` questions' items with the passages its
    labels recorded, in chunks of the set's ``chunk`` questions."""
    config_path = labels / "label_config.json"
    if not config_path.is_file():
        raise UserError(f"{labels}: no label_config.json (is it a `pra label` folder?)")
    config = json.loads(config_path.read_text())
    docs = {r["id"]: [tuple(d) for d in r.get("docs", [])] for r in read_records(labels / "labels.jsonl")}
    by_question: dict[str, list] = {}
    for item in step_items({q.id: q for q in load_benchmark(config["benchmark"], limit=config["limit"]).questions},
                           read_records(labels / "traces.jsonl")):
        if item.id in docs:
            by_question.setdefault(item.question.id, []).append(item)
    groups = list(by_question.values())[:questions]
    if len(groups) < questions:
        raise UserError(f"{labels}: {len(groups)} labelled questions, fewer than --questions {questions}")
    size = config["chunk"]
    work = [[i for g in groups[s:s + size] for i in g] for s in range(0, len(groups), size)]
    return config, [(items, [docs[i.id] for i in items]) for items in work]


def timed_reads(reader: LlamaCppBackend, config: dict, work: list[Chunk], share: bool) -> tuple[float, dict, list]:
    """Seconds, backend counters and label fields of the gold-probability reads of every chunk."""
    reader.share_prefix = share
    reader.clear_prefix_cache()
    tokens, passes = reader.stats.prompt_tokens, reader.stats.extra["forward_passes"]
    settings = SimpleNamespace(max_doc_chars=config["max_doc_chars"])
    start, fields = time.perf_counter(), []
    for items, docs in work:
        fields += goldprob_labels(settings, reader, items, docs)
    return (time.perf_counter() - start,
            {"tokens": reader.stats.prompt_tokens - tokens, "passes": reader.stats.extra["forward_passes"] - passes},
            fields)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--labels", type=Path, default=LABELS, help="a `pra label` folder (traces.jsonl, labels.jsonl)")
    ap.add_argument("--questions", type=int, default=4, help="its first N labelled questions")
    ap.add_argument("--reader", help="the model that reads (default: the label set's policy)")
    a = ap.parse_args(argv)
    config, work = chunks(a.labels, a.questions)
    reader = LlamaCppBackend(a.reader or config["policy"])
    steps = sum(len(items) for items, _ in work)
    shared_s, shared, labels = timed_reads(reader, config, work, share=True)
    naive_s, naive, naive_labels = timed_reads(reader, config, work, share=False)
    same = sum(x["goldprob_label"] == y["goldprob_label"] for x, y in zip(labels, naive_labels))
    moved = max(abs(x["p_gold"] - y["p_gold"]) for x, y in zip(labels, naive_labels))
    print(f"{a.questions} questions, {steps} steps, reader {reader.name} on llama.cpp ({reader.stats.extra['threads']} threads)")
    for name, s, c in (("prefix reuse", shared_s, shared), ("naive", naive_s, naive)):
        print(f"  {name:12s} {s:7.1f} s  {c['tokens']:>8,} prompt tokens computed  {c['passes']:>4} forward passes  "
              f"{s / steps:.2f} s a step")
    print(f"  same labels on {same} of {steps} steps; p_gold moves by at most {moved:.3f} (batch-shape noise)")
    print(f"summary: label reads {naive_s / shared_s:.2f}x faster with prefix reuse, {naive['tokens'] / shared['tokens']:.2f}x "
          f"fewer tokens; {shared_s / steps:.2f} s a step; same labels {same}/{steps}")


if __name__ == "__main__":
    main()
