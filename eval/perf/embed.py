"""Passage embedding on this machine: float32 against bfloat16 autocast, at several batch sizes, and
whether bfloat16 vectors retrieve what float32 vectors retrieve.

    OMP_NUM_THREADS=1 pra perf embed [--corpus medcorp-mini] [--passages 256] [--batches 16 32 64]

Throughput is timed on every n-th passage of the corpus (model load excluded, one warm-up batch),
each (dtype, batch) in turn, ``--rounds`` times over, best round kept: on shared cores the ratios of
one run are what to compare, not the absolute rates. Retrieval agreement: ``--overlap-passages``
passages embedded both ways, then for ``--queries`` PubMedQA and BioASQ questions (float32 query
vectors) the share of the float32 top 10 that the bfloat16 top 10 also holds, and the cosine of each
passage's two vectors.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from corpora.builders import load_corpus
from corpora.encoders import Encoder, EncoderConfig, encoder_config
from eval.retrieval_recall import bioasq_questions, pubmedqa_questions


def every_nth(items: list, n: int) -> list:
    return items[::max(1, len(items) // n)][:n]


def throughput(encoder: Encoder, passages: list, dtype: str, rounds: int) -> float:
    """Best passages per second over ``rounds`` embeddings of ``passages``."""
    encoder.encode_passages(passages[:encoder.config.batch_size], dtype=dtype)  # warm-up
    best = 0.0
    for _ in range(rounds):
        start = time.perf_counter()
        encoder.encode_passages(passages, dtype=dtype)
        best = max(best, len(passages) / (time.perf_counter() - start))
    return best


def top_k_overlap(queries: np.ndarray, reference: np.ndarray, other: np.ndarray, k: int = 10) -> np.ndarray:
    """Per query, the share of its top k by ``reference`` that ``other`` also ranks in its top k."""
    top = lambda emb: np.argsort(-(queries @ emb.T), axis=1, kind="stable")[:, :k]
    return np.array([len(set(a) & set(b)) / k for a, b in zip(top(reference), top(other))])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="medcorp-mini")
    ap.add_argument("--encoder", default="minilm-l6-v2")
    ap.add_argument("--passages", type=int, default=256, help="passages timed per (dtype, batch)")
    ap.add_argument("--batches", type=int, nargs="+", default=[16, 32, 64])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--overlap-passages", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args(argv)

    passages = load_corpus(args.corpus).passages
    config = encoder_config(args.encoder)
    rate = {}
    for batch in args.batches:
        encoder = Encoder(EncoderConfig(**{**config.to_dict(), "batch_size": batch}), "cpu")
        for dtype in ("float32", "bfloat16"):
            rate[dtype, batch] = throughput(encoder, every_nth(passages, args.passages), dtype, args.rounds)
            print(f"{dtype:9s} batch {batch:3d}: {rate[dtype, batch]:6.1f} passages/s")
    base_batch = 32 if 32 in args.batches else args.batches[0]
    base = rate["float32", base_batch]
    for (dtype, batch), r in rate.items():
        print(f"{dtype:9s} batch {batch:3d}: {r / base:5.2f}x float32 at batch {base_batch}")

    encoder = Encoder(config, "cpu")
    sample = every_nth(passages, args.overlap_passages)
    f32, bf16 = (encoder.encode_passages(sample, dtype=d) for d in ("float32", "bfloat16"))
    cosine = (f32 * bf16).sum(1) / (np.linalg.norm(f32, axis=1) * np.linalg.norm(bf16, axis=1))
    questions = every_nth([q for q, _ in pubmedqa_questions() + bioasq_questions()], args.queries)
    query_vectors = encoder.encode_queries(questions)
    overlap, same_first = top_k_overlap(query_vectors, f32, bf16), top_k_overlap(query_vectors, f32, bf16, k=1)
    print(f"bfloat16 vs float32 over {len(sample)} passages: cosine mean {cosine.mean():.5f}, min {cosine.min():.5f}; "
          f"top-10 overlap over {len(questions)} queries mean {overlap.mean():.3f}, min {overlap.min():.2f}; "
          f"same top 1 {same_first.mean():.3f}")
    fastest = {d: max(args.batches, key=lambda b: rate[d, b]) for d in ("float32", "bfloat16")}
    print(f"summary: bfloat16/float32 {rate['bfloat16', fastest['bfloat16']] / rate['float32', fastest['float32']]:.2f}x "
          f"(each at its best batch: {fastest['float32']}, {fastest['bfloat16']}; "
          f"bfloat16 {rate['bfloat16', fastest['bfloat16']]:.1f} passages/s), "
          f"top-10 overlap {overlap.mean():.3f}, cosine min {cosine.min():.5f}")


if __name__ == "__main__":
    main()
