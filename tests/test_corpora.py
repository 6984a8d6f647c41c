"""Corpus builders on small slices of the real files, chunking, dedup and the manifest."""
import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from corpora.builders import (DATA_DIR, SHIPPED, bioasq_docs, build_corpus, evaluation_answers, load_corpus,
                              medmcqa_docs, medquad_docs, medrag_docs, pubmedqa_docs, snippet_id, txt_docs)
from corpora.chunking import Chunking, Dedup, _tokenizer, chunk, chunk_text, doc_id, normalize
from corpora.types import Passage

BENCH = DATA_DIR / "benchmarks"
needs_data = pytest.mark.requires("shared-data", BENCH.exists(), f"shared data not present at {DATA_DIR} (set PRA_DATA)")


@needs_data
def test_medquad_titles_answers_by_focus_and_question(tmp_path):
    src = sorted((DATA_DIR / "corpora/medquad/1_CancerGov_QA").glob("*.xml"))[:2]
    for f in src:
        shutil.copy(f, tmp_path)
    docs = list(medquad_docs(tmp_path))
    assert docs and all(d.source == "medquad" and d.text and d.origin.startswith("https://") for d in docs)
    assert docs[0].id == "medquad:CancerGov:0000001_1-1"
    assert docs[0].title == "Adult Acute Lymphoblastic Leukemia: What is (are) Adult Acute Lymphoblastic Leukemia ?"
    assert "  " not in docs[0].text  # whitespace of the XML collapsed


@needs_data
def test_pubmedqa_reads_contexts_never_the_answers(tmp_path):
    rows = dict(list(json.loads((BENCH / "pubmedqa_test_set.json").read_text()).items())[:3])
    (tmp_path / "p.json").write_text(json.dumps(rows))
    docs = list(pubmedqa_docs(tmp_path / "p.json"))
    pmid, row = next(iter(rows.items()))
    assert [d.id for d in docs[:2]] == [f"pubmedqa:{pmid}-0", f"pubmedqa:{pmid}-1"]
    assert docs[0].origin == f"PMID:{pmid}" and docs[0].title == "Aims"
    assert len(docs) == sum(len(r["CONTEXTS"]) for r in rows.values())
    texts = " ".join(d.text for d in docs)
    assert all(r["LONG_ANSWER"] not in texts for r in rows.values())


@needs_data
def test_bioasq_snippets_dedup_and_filter_by_type(tmp_path):
    questions = json.loads((BENCH / "bioasq/Task10BGoldenEnriched/10B1_golden.json").read_text())["questions"]
    yesno = [q for q in questions if q["type"] == "yesno"][:3]
    other = [q for q in questions if q["type"] != "yesno"][:2]
    (tmp_path / "a.json").write_text(json.dumps({"questions": yesno + other + yesno[:1]}))  # one repeated
    docs = list(bioasq_docs(tmp_path, types=("yesno",)))
    texts = {normalize(s["text"]) for q in yesno for s in q["snippets"]}
    assert {normalize(d.text) for d in docs} == texts and len(docs) == len(texts)
    assert all(d.id == snippet_id(d.text) for d in docs)
    answers = {normalize(a) for q in yesno for a in q["ideal_answer"]} - texts
    assert not answers & {normalize(d.text) for d in docs}
    assert len(list(bioasq_docs(tmp_path))) > len(docs)


@needs_data
def test_medmcqa_explanations_of_training_rows_only(tmp_path):
    lines = (BENCH / "medmcqa_train.jsonl").read_text().splitlines()[:30]
    (tmp_path / "medmcqa_train.jsonl").write_text("\n".join(lines))
    docs = list(medmcqa_docs(tmp_path / "medmcqa_train.jsonl"))
    assert len(docs) == sum(1 for l in lines if json.loads(l)["exp"])
    assert docs[0].source == "medmcqa" and docs[0].title
    with pytest.raises(ValueError, match="evaluation"):
        list(medmcqa_docs(BENCH / "medmcqa_eval.jsonl"))


def test_medrag_and_txt_folders(tmp_path):
    chunks = tmp_path / "textbooks" / "chunk"
    chunks.mkdir(parents=True)
    rows = [{"id": "Anatomy_Gray_0", "title": "Anatomy_Gray", "content": "The heart has four chambers.",
             "contents": "Anatomy_Gray. The heart has four chambers."}]
    (chunks / "Anatomy_Gray.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    [doc] = medrag_docs(chunks)
    assert doc == Passage("textbooks:Anatomy_Gray_0", "Anatomy_Gray", "The heart has four chambers.",
                          "textbooks", str(chunks / "Anatomy_Gray.jsonl"))
    notes = tmp_path / "notes"
    (notes / "sub").mkdir(parents=True)
    (notes / "sub" / "heart_failure.txt").write_text("Heart failure is ...")
    [doc] = txt_docs(notes)
    assert (doc.id, doc.title, doc.source) == ("notes:sub/heart_failure", "heart failure", "notes")


def test_chunks_are_token_windows_with_overlap_cut_between_words():
    c = Chunking(size=40, overlap=8)
    text = " ".join(f"word{i} is a hyphen-ated token, e.g. x." for i in range(60))
    parts = chunk_text(text, c)
    tok = _tokenizer(c.tokenizer)
    assert len(parts) > 5
    assert all(len(tok.encode(p, add_special_tokens=False).ids) <= 40 for p in parts)
    assert all(text.startswith(p) or f" {p}" in text for p in parts)  # each starts on a word
    assert all(p.endswith(".") or p.endswith(",") or p.split()[-1] in text.split() for p in parts)
    for a, b in zip(parts, parts[1:]):
        assert a.split()[-1] in b.split()[:8]  # consecutive windows overlap
    assert parts[0].startswith("word0") and parts[-1].endswith("word59 is a hyphen-ated token, e.g. x.")
    assert chunk_text("short text", c) == ["short text"]


def test_chunk_ids_and_dedup():
    doc = Passage("src:1", "T", "alpha  beta\n gamma", "src")
    [p] = chunk(doc)
    assert p.id == "src:1#0" and p.text == "alpha beta gamma" and doc_id(p.id) == "src:1"
    dedup = Dedup()
    out = list(dedup([p, Passage("src:2#0", "other", "alpha beta gamma", "src"), Passage("x#0", "", "new", "src")]))
    assert [q.id for q in out] == ["src:1#0", "x#0"] and dedup.removed == 1


def test_manifest_hash_counts_and_deterministic_bytes(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    for i, text in enumerate(["Aspirin inhibits COX.", "Aspirin inhibits COX.", "Insulin lowers glucose."]):
        (folder / f"n{i}.txt").write_text(text)
    m = build_corpus("notes", tmp_path / "out", kind="txt", inputs=[folder])
    raw = (tmp_path / "out" / "passages.jsonl.gz").read_bytes()
    assert hashlib.sha256(gzip.decompress(raw)).hexdigest() == m.sha256
    assert (m.count, m.sources, m.duplicates_removed) == (2, {"notes": 2}, 1)
    assert m.chunking == {"tokenizer": "minilm-l6-v2", "size": 192, "overlap": 32}
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["sha256"] == m.sha256
    build_corpus("notes", tmp_path / "out", kind="txt", inputs=[folder])
    assert (tmp_path / "out" / "passages.jsonl.gz").read_bytes() == raw
    assert [p.id for p in load_corpus(tmp_path / "out").passages] == ["notes:n0#0", "notes:n2#0"]
    (tmp_path / "out" / "passages.jsonl.gz").write_bytes(gzip.compress(b"{}\n"))
    with pytest.raises(ValueError, match="sha256"):
        load_corpus(tmp_path / "out")


def test_shipped_medcorp_mini_manifest():
    corpus = load_corpus("medcorp-mini")
    m = corpus.manifest
    assert corpus.path == SHIPPED / "medcorp-mini" and 8000 <= m.count <= 12000
    assert set(m.sources) == {"pubmedqa", "bioasq", "medmcqa", "medquad"}
    assert len({p.id for p in corpus.passages}) == m.count


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().split("\n") if line.strip()]


def _medcorp_slice(root: Path) -> dict:
    """A copy of the shared data's layout holding a few real rows of each source, among them training
    explanations and a gold snippet that repeat an evaluation answer verbatim; returns those."""
    bench = root / "benchmarks"
    (bench / "bioasq/T").mkdir(parents=True)
    shutil.copy(BENCH / "medmcqa_eval.jsonl", bench)
    eval_exps = {normalize(r["exp"]) for r in _jsonl(BENCH / "medmcqa_eval.jsonl") if r.get("exp")}
    train = [r for r in _jsonl(BENCH / "medmcqa_train.jsonl") if r.get("exp")]
    leaked = [r for r in train if normalize(r["exp"]) in eval_exps][:2]
    (bench / "medmcqa_train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in leaked + train[:4]))
    pubmedqa = dict(list(json.loads((BENCH / "pubmedqa_test_set.json").read_text()).items())[:3])
    (bench / "pubmedqa_test_set.json").write_text(json.dumps(pubmedqa))
    questions = [q for f in sorted((BENCH / "bioasq").rglob("*_golden.json")) for q in json.loads(f.read_text())["questions"]]
    quoted = next(q for q in questions if q["type"] == "yesno"
                  and {normalize(s["text"]) for s in q["snippets"]} & {normalize(a) for a in q["ideal_answer"]})
    other = [q for q in questions if q["type"] != "yesno"][:2]
    (bench / "bioasq/T/x_golden.json").write_text(json.dumps({"questions": [quoted] + other}))
    medquad = root / "corpora/medquad/1_CancerGov_QA"
    medquad.mkdir(parents=True)
    for f in sorted((DATA_DIR / "corpora/medquad/1_CancerGov_QA").glob("*.xml"))[:2]:
        shutil.copy(f, medquad)
    return {"leaked": leaked, "kept": train[:4], "quoted": quoted, "pubmedqa": pubmedqa}


@needs_data
def test_medcorp_build_is_deterministic_and_leaves_out_evaluation_answers(tmp_path):
    data = _medcorp_slice(tmp_path / "data")
    m = build_corpus("medcorp", tmp_path / "a", data_dir=tmp_path / "data")
    assert build_corpus("medcorp", tmp_path / "b", data_dir=tmp_path / "data") == m
    assert (tmp_path / "a/passages.jsonl.gz").read_bytes() == (tmp_path / "b/passages.jsonl.gz").read_bytes()
    assert set(m.sources) == {"pubmedqa", "bioasq", "medmcqa", "medquad"} and m.name == "medcorp"
    passages = load_corpus(tmp_path / "a").passages
    docs = {doc_id(p.id) for p in passages}
    assert not {f"medmcqa:{r['id']}" for r in data["leaked"]} & docs
    assert {f"medmcqa:{r['id']}" for r in data["kept"]} <= docs
    ideal = {normalize(a) for a in data["quoted"]["ideal_answer"]}
    snippets = {snippet_id(s["text"]) for s in data["quoted"]["snippets"] if normalize(s["text"]) not in ideal}
    assert snippets <= docs and not {snippet_id(a) for a in ideal} & docs
    assert not {normalize(p.text) for p in passages} & evaluation_answers(tmp_path / "data")
    text = " ".join(p.text for p in passages)
    assert all(normalize(r["LONG_ANSWER"]) not in text for r in data["pubmedqa"].values())


@needs_data
@pytest.mark.parametrize("name,least", [("medcorp", 50_000), ("medcorp-mini", 9_000)])
def test_shipped_corpus_holds_no_evaluation_answer(name, least):
    corpus = load_corpus(name)
    m = corpus.manifest
    assert corpus.path == SHIPPED / name and m.count >= least
    assert set(m.sources) == {"pubmedqa", "bioasq", "medmcqa", "medquad"}
    assert not {normalize(p.text) for p in corpus.passages} & evaluation_answers()
    explanations = " ".join(p.text for p in corpus.passages if p.source == "medmcqa")
    abstracts = " ".join(p.text for p in corpus.passages if p.source in ("pubmedqa", "bioasq"))
    eval_exps = {normalize(r["exp"]) for r in _jsonl(BENCH / "medmcqa_eval.jsonl") if r.get("exp")}
    assert not [e for e in eval_exps if len(e) >= 30 and e in explanations]
    long_answers = [normalize(r["LONG_ANSWER"]) for r in json.loads((BENCH / "pubmedqa_test_set.json").read_text()).values()]
    assert not [a for a in long_answers if a in abstracts]
