"""Retrievers over a built corpus: dense (FAISS), BM25 (bm25s), hybrid (reciprocal rank fusion, as
MedRAG fuses its retrievers), optional cross-encoder reranking, and an LRU cache in front of any of them.
``load_retriever`` is the one entry point callers need."""
from __future__ import annotations

from collections import OrderedDict, defaultdict
from pathlib import Path
from typing import Callable, Sequence

from corpora.builders import Corpus, load_corpus
from corpora.encoders import Encoder, EncoderConfig
from corpora.index import DenseIndex, load_index
from corpora.types import Hit, Passage, Retriever
from pra.errors import UserError

Scorer = Callable[[list[tuple[str, str]]], Sequence[float]]


def _ranked(pairs) -> list[Hit]:
    return [Hit(p, float(s), rank) for rank, (p, s) in enumerate(pairs, 1)]


def _doc_text(p: Passage) -> str:
    return f"{p.title}. {p.text}" if p.title else p.text


class DenseRetriever:
    def __init__(self, corpus: Corpus, index: DenseIndex, encoder: Encoder):
        self.corpus, self.index, self.encoder = corpus, index, encoder

    def retrieve(self, queries: list[str], k: int) -> list[list[Hit]]:
        if not queries:
            return []
        scores, rows = self.index.search(self.encoder.encode_queries(queries), min(k, len(self.corpus.passages)))
        return [_ranked((self.corpus.passages[r], s) for r, s in zip(rr, ss) if r >= 0) for rr, ss in zip(rows, scores)]


class BM25Retriever:
    """Okapi BM25 over title + text, English stopwords removed, stemmed when PyStemmer is installed.
    Passages that share no term with the query are left out, so a query may get fewer than k hits."""

    def __init__(self, corpus: Corpus):
        import bm25s
        try:
            import Stemmer
            self.stemmer = Stemmer.Stemmer("english").stemWords
        except ImportError:
            self.stemmer = None
        self.corpus, self.bm25s = corpus, bm25s
        self.model = bm25s.BM25()
        self.model.index(self._tokenize([_doc_text(p) for p in corpus.passages], ids=True), show_progress=False)

    def _tokenize(self, texts: list[str], ids: bool = False):
        return self.bm25s.tokenize(texts, stopwords="en", stemmer=self.stemmer, return_ids=ids, show_progress=False)

    def retrieve(self, queries: list[str], k: int) -> list[list[Hit]]:
        if not queries:
            return []
        rows, scores = self.model.retrieve(self._tokenize(queries), k=min(k, len(self.corpus.passages)),
                                           show_progress=False)
        return [_ranked((self.corpus.passages[r], s) for r, s in zip(rr, ss) if s > 0) for rr, ss in zip(rows, scores)]


class HybridRetriever:
    """Reciprocal rank fusion: score = sum over retrievers of 1 / (rrf_k + rank), over each one's top ``depth``."""

    def __init__(self, retrievers: Sequence[Retriever], depth: int = 50, rrf_k: int = 60):
        self.retrievers, self.depth, self.rrf_k = retrievers, depth, rrf_k

    def retrieve(self, queries: list[str], k: int) -> list[list[Hit]]:
        runs = [r.retrieve(queries, max(k, self.depth)) for r in self.retrievers]
        fused = []
        for per_query in zip(*runs):
            scores: dict[str, float] = defaultdict(float)
            passages: dict[str, Passage] = {}
            for hits in per_query:
                for h in hits:
                    scores[h.passage.id] += 1.0 / (self.rrf_k + h.rank)
                    passages[h.passage.id] = h.passage
            best = sorted(scores, key=scores.__getitem__, reverse=True)[:k]
            fused.append(_ranked((passages[i], scores[i]) for i in best))
        return fused


def cross_encoder(name: str, device: str | None = None, batch_size: int = 32) -> Scorer:
    """A (query, passage) scorer from a cross-encoder, e.g. ``ncbi/MedCPT-Cross-Encoder``."""
    from sentence_transformers import CrossEncoder

    from pra.models import resolve
    model = CrossEncoder(resolve(name), device=device)
    return lambda pairs: model.predict(pairs, batch_size=batch_size, show_progress_bar=False)


class Reranked:
    """Takes ``candidates`` hits from ``base`` and keeps the ``k`` the scorer likes best."""

    def __init__(self, base: Retriever, scorer: Scorer, candidates: int = 50):
        self.base, self.scorer, self.candidates = base, scorer, candidates

    def retrieve(self, queries: list[str], k: int) -> list[list[Hit]]:
        runs = self.base.retrieve(queries, max(k, self.candidates))
        scores = iter(self.scorer([(q, _doc_text(h.passage)) for q, hits in zip(queries, runs) for h in hits]))
        out = []
        for hits in runs:
            scored = [(h.passage, float(next(scores))) for h in hits]
            out.append(_ranked(sorted(scored, key=lambda x: x[1], reverse=True)[:k]))
        return out


class CachedRetriever:
    """An LRU cache of recent results keyed by (query, k, mode); misses go to ``inner`` in one batch."""

    def __init__(self, inner: Retriever, mode: str, size: int = 4096):
        self.inner, self.mode, self.size = inner, mode, size
        self.cache: OrderedDict[tuple[str, int, str], list[Hit]] = OrderedDict()
        self.hits = self.misses = 0

    def retrieve(self, queries: list[str], k: int) -> list[list[Hit]]:
        if k < 1:
            raise UserError(f"k, the passages per query, must be at least 1, got {k}")
        if any(not q.strip() for q in queries):
            raise UserError("an empty query matches nothing in particular; give it some words")
        keys = [(q, k, self.mode) for q in queries]
        found = {}
        for key in keys:
            if key in self.cache:
                self.cache.move_to_end(key)
                found[key] = self.cache[key]
        missing = [key for key in dict.fromkeys(keys) if key not in found]
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        if missing:
            for key, hits in zip(missing, self.inner.retrieve([q for q, _, _ in missing], k)):
                found[key] = self.cache[key] = hits
            while len(self.cache) > self.size:
                self.cache.popitem(last=False)
        return [list(found[key]) for key in keys]


def load_retriever(corpus: str | Path | Corpus = "medcorp-mini", mode: str = "dense",
                   encoder: str | EncoderConfig = "minilm-l6-v2", rerank: str | Scorer | None = None, *,
                   kind: str | None = None, candidates: int = 50, cache_size: int = 4096,
                   device: str | None = None) -> Retriever:
    """A cached retriever: ``mode`` dense | bm25 | hybrid over a built corpus (name or folder), with
    the dense index of ``encoder`` and ``kind`` (by default the one built, flat first:
    ``corpora.index.built_kind``); ``rerank`` names a cross-encoder (or is a scorer) that reorders
    ``candidates`` hits."""
    if mode not in ("dense", "bm25", "hybrid"):
        raise UserError(f"unknown retrieval mode {mode!r}; one of dense, bm25, hybrid")
    corpus = corpus if isinstance(corpus, Corpus) else load_corpus(corpus)
    parts: list[Retriever] = []
    if mode in ("dense", "hybrid"):
        enc = Encoder(encoder, device)
        parts.append(DenseRetriever(corpus, load_index(corpus, enc.config, kind), enc))
    if mode in ("bm25", "hybrid"):
        parts.append(BM25Retriever(corpus))
    retriever = parts[0] if len(parts) == 1 else HybridRetriever(parts)
    if rerank is not None:
        retriever = Reranked(retriever, cross_encoder(rerank, device) if isinstance(rerank, str) else rerank, candidates)
    name = getattr(rerank, "__name__", rerank)
    return CachedRetriever(retriever, f"{mode}:{getattr(encoder, 'name', encoder)}:{kind}:{name}", cache_size)


def format_hits(hits: list[Hit], width: int = 240) -> str:
    """Numbered hits for a terminal: rank, score, id and provenance, then the start of the text."""
    lines = []
    for h in hits:
        p = h.passage
        text = _doc_text(p)
        lines.append(f"{h.rank:>3}. {h.score:.4f}  {p.id}  [{p.source}; {p.origin}]\n"
                     f"     {text[:width]}{'…' if len(text) > width else ''}")
    return "\n".join(lines)
