"""Dense index build/load, BM25, fusion, reranking, the cache, and recall on the shipped index."""
import json
from pathlib import Path

import pytest

from corpora.builders import build_corpus, load_corpus
from corpora.encoders import Encoder, EncoderConfig
from corpora.index import IndexMismatch, build_index, load_index
from corpora.retrieval import (BM25Retriever, CachedRetriever, DenseRetriever, HybridRetriever, Reranked,
                               format_hits, load_retriever)
from corpora.types import Hit, Passage
from pra.benchmarks import BENCHMARKS
from pra.errors import UserError

NOTES = {
    "aspirin": "Aspirin irreversibly inhibits cyclooxygenase and so lowers thromboxane in platelets.",
    "insulin": "Insulin lowers blood glucose by moving glucose into muscle and fat cells.",
    "warfarin": "Warfarin blocks vitamin K epoxide reductase; its effect is followed with the INR.",
    "asthma": "Inhaled corticosteroids are the mainstay of controller therapy in persistent asthma.",
    "scurvy": "Scurvy results from a lack of vitamin C, which collagen synthesis requires.",
    "gout": "Gout is an inflammatory arthritis caused by monosodium urate crystals in joints.",
}


def _notes_corpus(root: Path, notes=NOTES):
    folder = root / "notes"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in notes.items():
        (folder / f"{name}.txt").write_text(text)
    build_corpus("notes", root / "corpus", kind="txt", inputs=[folder])
    return load_corpus(root / "corpus")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A six-passage corpus with a flat and an HNSW index built by the real MiniLM."""
    root = tmp_path_factory.mktemp("tiny")
    corpus = _notes_corpus(root)
    build_index(corpus, "minilm-l6-v2", "flat")
    build_index(corpus, "minilm-l6-v2", "hnsw")  # reuses the flat index's embeddings
    return corpus


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_index_round_trip(tiny, kind):
    index = load_index(tiny, "minilm-l6-v2", kind)
    m = index.manifest
    assert (m.kind, m.dim, m.count, m.normalize, m.corpus_sha256) == (kind, 384, 6, True, tiny.manifest.sha256)
    assert (index.path / "embeddings.npy").exists() and (index.path / "index.faiss").exists() == (kind != "flat")
    r = load_retriever(tiny, "dense", kind=kind)
    [hits] = r.retrieve(["Which vitamin deficiency causes scurvy?"], k=3)
    assert hits[0].passage.id == "notes:scurvy#0" and [h.rank for h in hits] == [1, 2, 3]
    assert hits[0].score > hits[1].score


@pytest.mark.slow
def test_manifest_mismatch_names_corpus_and_encoder(tiny, tmp_path):
    changed = _notes_corpus(tmp_path, {**NOTES, "gout": "Gout: urate crystals."})
    with pytest.raises(IndexMismatch, match=r"sha256 .*minilm-l6-v2.*sha256"):
        load_index(changed, "minilm-l6-v2", "flat", path=tiny.path / "index" / "minilm-l6-v2-flat")
    other = EncoderConfig("minilm-l6-v2", "minilm-l6-v2", pooling="cls")
    with pytest.raises(IndexMismatch, match="encoder"):
        load_index(tiny, other, "flat")
    with pytest.raises(FileNotFoundError, match="build_index"):
        load_index(tiny, "minilm-l6-v2", "ivf")


def test_build_that_dies_leaves_no_index(tmp_path, monkeypatch):
    corpus = _notes_corpus(tmp_path)

    def die(self, passages, progress=False, dtype="float32"):
        raise KeyboardInterrupt

    monkeypatch.setattr(Encoder, "encode_passages", die)
    with pytest.raises(KeyboardInterrupt):
        build_index(corpus, "minilm-l6-v2", "flat")
    assert not (corpus.path / "index").exists() or not any((corpus.path / "index").iterdir())
    with pytest.raises(FileNotFoundError):
        load_index(corpus, "minilm-l6-v2", "flat")
    with pytest.raises(ValueError, match="kind"):
        build_index(corpus, "minilm-l6-v2", "annoy")


def test_bm25_ranks_term_matches_and_drops_non_matching(tmp_path):
    bm25 = BM25Retriever(_notes_corpus(tmp_path))
    [hits, none] = bm25.retrieve(["warfarin INR monitoring", "zzzz qqqq"], k=3)
    assert hits[0].passage.id == "notes:warfarin#0" and none == []


class Fixed:
    """A fake retriever: a fixed ranking of passage ids for every query; counts its calls."""

    def __init__(self, ids):
        self.ids, self.calls = ids, []

    def retrieve(self, queries, k):
        self.calls.append(list(queries))
        return [[Hit(Passage(i, "", f"text {i}", "t"), 1.0, r) for r, i in enumerate(self.ids[:k], 1)] for _ in queries]


def test_reciprocal_rank_fusion():
    [fused] = HybridRetriever([Fixed(["a", "b", "c"]), Fixed(["c", "a", "d"])], depth=3).retrieve(["q"], k=3)
    assert [h.passage.id for h in fused] == ["a", "c", "b"]
    assert fused[0].score == pytest.approx(1 / 61 + 1 / 62)


def test_rerank_keeps_k_best_by_scorer():
    base = Fixed(["a", "bbb", "cc", "dddd"])
    [hits] = Reranked(base, lambda pairs: [len(p) for _, p in pairs], candidates=4).retrieve(["q"], k=2)
    assert [h.passage.id for h in hits] == ["dddd", "bbb"] and [h.rank for h in hits] == [1, 2]


def test_lru_cache_batches_misses_and_evicts():
    inner = Fixed(["a", "b"])
    cached = CachedRetriever(inner, "dense", size=2)
    cached.retrieve(["x", "y", "x"], k=2)
    assert inner.calls == [["x", "y"]]
    cached.retrieve(["y", "z"], k=2)          # y hit; z evicts x (least recent)
    cached.retrieve(["y", "x"], k=1)          # k is part of the key
    assert inner.calls[1:] == [["z"], ["y", "x"]]
    assert (cached.hits, cached.misses) == (2, 5)


def test_format_hits():
    text = format_hits([Hit(Passage("pubmedqa:1-0#0", "Aims", "x" * 300, "pubmedqa", "PMID:1"), 0.5, 1)])
    assert text.startswith("  1. 0.5000  pubmedqa:1-0#0  [pubmedqa; PMID:1]") and text.endswith("…")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
def test_shipped_index_finds_a_pubmedqa_questions_own_abstract(mode):
    rows = list(json.loads(BENCHMARKS["pubmedqa"][1].read_text()).items())[:8]
    retriever = load_retriever("medcorp-mini", mode)
    runs = retriever.retrieve([row["QUESTION"] for _, row in rows], k=5)
    found = [any(h.passage.id.startswith(f"pubmedqa:{pmid}-") for h in hits) for (pmid, _), hits in zip(rows, runs)]
    assert sum(found) >= 7, found


@pytest.mark.slow
def test_bfloat16_passage_embedding_is_recorded_and_keeps_the_top_hit(tiny, tmp_path):
    out = build_index(tiny, "minilm-l6-v2", "flat", out_dir=tmp_path / "bf16", dtype="bfloat16")
    index = load_index(tiny, "minilm-l6-v2", "flat", path=out)
    assert index.manifest.passage_dtype == "bfloat16"
    assert load_index(tiny, "minilm-l6-v2", "flat").manifest.passage_dtype == "float32"
    [hits] = DenseRetriever(tiny, index, Encoder("minilm-l6-v2", "cpu")).retrieve(["Which vitamin deficiency causes scurvy?"], 3)
    assert hits[0].passage.id == "notes:scurvy#0"
    with pytest.raises(UserError, match="dtype 'fp8'"):
        build_index(tiny, "minilm-l6-v2", "flat", out_dir=tmp_path / "fp8", dtype="fp8")


@pytest.mark.slow
def test_shipped_medcorp_ivfpq_index_finds_vitamin_c_for_scurvy():
    corpus = load_corpus("medcorp")
    index = load_index(corpus)  # no kind asked for: the one that ships
    assert (index.manifest.kind, index.manifest.passage_dtype, index.manifest.count) == ("ivfpq", "bfloat16", len(corpus.passages))
    assert not (index.path / "embeddings.npy").exists()
    [hits] = load_retriever(corpus, "dense").retrieve(["What vitamin deficiency causes scurvy?"], k=5)
    top = hits[0].passage.text.lower()
    assert "scurvy" in top and "vitamin c" in top, format_hits(hits)


def test_a_killed_build_leaves_no_litter_and_resumes_from_its_last_shard(tmp_path, monkeypatch):
    """Embeddings are saved shard by shard in ``<index>.partial``: a build that dies in its second shard
    leaves the first, the rebuild embeds only the rest, and an index in place leaves neither the partial
    folder nor the ``.tmp-PID`` folder of a build that was killed (here: a PID that no longer runs)."""
    import numpy as np

    from corpora import index as index_module

    corpus = _notes_corpus(tmp_path)
    calls = []

    class FakeEncoder:
        def __init__(self, config, device=None):
            pass

        def encode_passages(self, passages, progress=False, dtype="float32"):
            calls.append([p.id for p in passages])
            if len(calls) == 2 and not getattr(FakeEncoder, "healed", False):
                raise KeyboardInterrupt            # killed in the second shard
            return np.array([[len(p.text), i, 1.0] for i, p in enumerate(passages)], np.float32)

    monkeypatch.setattr(index_module, "Encoder", FakeEncoder)
    monkeypatch.setattr(index_module, "EMBED_SHARD", 4)
    out = tmp_path / "corpus" / "index" / "minilm-l6-v2-flat"
    litter = out.with_name(f"{out.name}.tmp-999999999")       # a build killed with kill -9 long ago
    litter.mkdir(parents=True)
    with pytest.raises(KeyboardInterrupt):
        build_index(corpus, "minilm-l6-v2", "flat")
    partial = out.with_name(f"{out.name}.partial")
    assert sorted(p.name for p in partial.glob("shard-*.npy")) == ["shard-000000000.npy"] and not out.exists()
    FakeEncoder.healed = True
    build_index(corpus, "minilm-l6-v2", "flat")
    assert [len(c) for c in calls] == [4, 2, 2]                # the rebuild embedded only the second shard
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]
    assert np.load(out / "embeddings.npy").shape == (6, 3)
