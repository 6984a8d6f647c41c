"""Recall of bm25, dense and hybrid retrieval over a corpus (medcorp-mini by default).

BioASQ yes/no questions are scored against their gold snippets, PubMedQA questions against the
passages of their own abstract. Gold is matched by provenance id (``doc_id`` of a hit), never by
looking at text. recall@k: the share of a question's gold documents in its top k, averaged over
questions; hit@k: the share of questions with at least one gold document in the top k.

    pra corpus recall [--corpus medcorp-mini] [--modes bm25 dense hybrid] [--out r.json]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from corpora.builders import load_corpus, snippet_id
from corpora.chunking import doc_id
from corpora.retrieval import load_retriever
from pra.benchmarks import BENCHMARKS


def bioasq_questions(path: Path = BENCHMARKS["bioasq"][1]) -> list[tuple[str, set[str]]]:
    """(question, gold snippet document ids) for each BioASQ yes/no question of the shipped file."""
    return [(q["body"], {snippet_id(s["text"]) for s in q["snippets"]})
            for q in json.loads(path.read_text())["questions"] if q["type"] == "yesno" and q["snippets"]]


def pubmedqa_questions(path: Path = BENCHMARKS["pubmedqa"][1]) -> list[tuple[str, set[str]]]:
    """(question, ids of its own abstract's passages) for each PubMedQA question."""
    rows = json.loads(path.read_text())
    return [(r["QUESTION"], {f"pubmedqa:{pmid}-{i}" for i in range(len(r["CONTEXTS"]))}) for pmid, r in rows.items()]


def evaluate(corpus: str = "medcorp-mini", modes=("bm25", "dense", "hybrid"), encoder: str = "minilm-l6-v2",
             kind: str | None = None, ks=(5, 20), limit: int | None = None) -> list[dict]:
    docs = {doc_id(p.id) for p in load_corpus(corpus).passages}
    benchmarks = {"bioasq-yesno": bioasq_questions(), "pubmedqa": pubmedqa_questions()}
    rows = []
    for mode in modes:
        retriever = load_retriever(corpus, mode, encoder, kind=kind)
        for bench, questions in benchmarks.items():
            questions = [(q, gold & docs) for q, gold in questions[:limit] if gold & docs]
            runs = retriever.retrieve([q for q, _ in questions], max(ks))
            row = {"benchmark": bench, "mode": mode, "questions": len(questions)}
            found = {k: [len({doc_id(h.passage.id) for h in hits[:k]} & gold) for (_, gold), hits in zip(questions, runs)]
                     for k in ks}
            row |= {f"recall@{k}": sum(f / len(g) for f, (_, g) in zip(found[k], questions)) / len(questions) for k in ks}
            row |= {f"hit@{k}": sum(f > 0 for f in found[k]) / len(questions) for k in ks}
            rows.append(row)
    return rows


def markdown(rows: list[dict]) -> str:
    cols = list(rows[0])
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else str(v)
    return "\n".join(["| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
                     + ["| " + " | ".join(fmt(r[c]) for c in cols) + " |" for r in rows])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="medcorp-mini")
    ap.add_argument("--encoder", default="minilm-l6-v2")
    ap.add_argument("--kind", help="dense index kind: flat, ivf, hnsw, ivfpq (default: the one built, flat first)")
    ap.add_argument("--modes", nargs="+", default=["bm25", "dense", "hybrid"])
    ap.add_argument("--limit", type=int, help="questions per benchmark")
    ap.add_argument("--out", type=Path, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    rows = evaluate(args.corpus, args.modes, args.encoder, args.kind, limit=args.limit)
    print(markdown(rows))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
