"""Retrieval speed on this machine: index build throughput and per-query latency of each mode.

    pra perf retrieval [--corpus medcorp-mini] [--build-subset 500]

The build is timed on a subset (every n-th passage; embedding all 10k takes ~10 minutes on 2 cores),
model load included. Latency is per query, uncached, top-20: p50/p95 over single queries at batch 1
and over batches (batch time / 32) at batch 32. Targets: dense under 20 ms/query at batch 32, hybrid
under 2x dense.
"""
from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from corpora.builders import load_corpus, write_corpus
from corpora.chunking import Chunking
from corpora.index import build_index
from eval.retrieval_recall import bioasq_questions, pubmedqa_questions
from corpora.retrieval import load_retriever


def time_build(corpus, n: int) -> tuple[float, int]:
    step = max(1, len(corpus.passages) // n)
    subset = corpus.passages[::step][:n]
    with tempfile.TemporaryDirectory() as tmp:
        write_corpus("perf-subset", subset, Path(tmp), Chunking(**corpus.manifest.chunking))
        t = time.perf_counter()
        build_index(Path(tmp), "minilm-l6-v2", "flat")
        return time.perf_counter() - t, len(subset)


def latencies(retriever, queries: list[str], batch: int, k: int = 20) -> list[float]:
    """Seconds per query of each call of ``batch`` queries."""
    retriever.retrieve(queries[:batch], k)  # warm up
    out = []
    for s in range(0, len(queries) - batch + 1, batch):
        t = time.perf_counter()
        retriever.retrieve(queries[s:s + batch], k)
        out.append((time.perf_counter() - t) / batch)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="medcorp-mini")
    ap.add_argument("--build-subset", type=int, default=500)
    ap.add_argument("--queries", type=int, default=256, help="queries timed at batch 32 (64 at batch 1)")
    args = ap.parse_args(argv)

    corpus = load_corpus(args.corpus)
    seconds, n = time_build(corpus, args.build_subset)
    print(f"index build: {n} passages (a subset of {len(corpus.passages)}) in {seconds:.1f} s = "
          f"{n / seconds:.1f} passages/s (minilm-l6-v2, flat, model load included)")

    questions = [q for q, _ in pubmedqa_questions() + bioasq_questions()]
    queries = questions[::max(1, len(questions) // (args.queries + 64))][:args.queries + 64]
    p50 = {}
    for mode in ("dense", "bm25", "hybrid"):
        t = time.perf_counter()
        retriever = load_retriever(corpus, mode).inner  # the uncached retriever
        retriever.retrieve(queries[:1], 20)
        ready = time.perf_counter() - t
        for batch, qs in ((1, queries[-64:]), (32, queries[:args.queries])):
            ms = np.array(latencies(retriever, qs, batch)) * 1000
            p50[mode, batch] = float(np.percentile(ms, 50))
            print(f"{mode:>6} batch {batch:>2}: p50 {p50[mode, batch]:7.2f} ms/query, "
                  f"p95 {np.percentile(ms, 95):7.2f} ms/query  (load + first query {ready:.1f} s)")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory: {peak:.0f} MB (max RSS)")
    print(f"summary: dense b32 {p50['dense', 32]:.1f} ms/q (target <20), hybrid/dense b32 "
          f"{p50['hybrid', 32] / p50['dense', 32]:.2f}x (target <2), bm25/dense b32 "
          f"{p50['bm25', 32] / p50['dense', 32]:.2f}x, dense b1 {p50['dense', 1]:.1f} ms/q, "
          f"build {n / seconds:.1f} passages/s, peak {peak:.0f} MB")


if __name__ == "__main__":
    main()
