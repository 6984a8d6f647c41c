"""Corpus builders: read each source in its own format, chunk, drop duplicates, write passages + manifest.

A built corpus is a folder holding ``passages.jsonl.gz`` (one ``{id, title, text, source, origin}`` per
line) and ``manifest.json`` (counts per source, sha256 of the uncompressed passages, chunking). The
manifest is written last, so a folder without one is an unfinished build.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import asdict, dataclass
from itertools import chain, islice
from pathlib import Path
from typing import Callable, Iterable, Iterator

from corpora.chunking import Chunking, Dedup, chunk, normalize
from corpora.types import Passage
from pra.errors import MissingFile, UserError


def _data_dir() -> Path:
    """The shared raw data: $PRA_DATA, else ``shared/data`` beside the checkout (as CI lays it out)."""
    if "PRA_DATA" in os.environ:
        return Path(os.environ["PRA_DATA"])
    beside = Path(__file__).resolve().parents[2] / "shared" / "data"
    return beside if beside.exists() else Path("/work/shared/data")


DATA_DIR = _data_dir()
SHIPPED = Path(__file__).parent / "data"     # corpora that ship with the project
PASSAGES, MANIFEST = "passages.jsonl.gz", "manifest.json"


def _origin(path: Path) -> str:
    """A path relative to the shared data folder when it lies there, so manifests do not name a machine."""
    try:
        return str(path.resolve().relative_to(DATA_DIR.resolve()))
    except ValueError:
        return str(path)


def _files(path: Path, pattern: str) -> list[Path]:
    return sorted(path.rglob(pattern)) if path.is_dir() else [path]


# ---- sources: each yields whole documents (Passage records before chunking) ----

def medquad_docs(path: Path) -> Iterator[Passage]:
    """MedQuAD XML: one document per non-empty answer, titled by its focus and question.

    Question ids repeat across the nine sites, so an id is ``medquad:<site>:<qid>``.
    """
    for f in _files(path, "*.xml"):
        root = ET.parse(f).getroot()
        focus = normalize(root.findtext("Focus") or "")
        site, url = root.get("source") or f.parent.name, root.get("url") or _origin(f)
        for pair in root.iter("QAPair"):
            q, a = pair.find("Question"), normalize(pair.findtext("Answer") or "")
            if a:
                title = f"{focus}: {normalize(q.text or '')}" if focus else normalize(q.text or "")
                yield Passage(f"medquad:{site}:{q.get('qid')}", title, a, "medquad", url)


def pubmedqa_docs(path: Path) -> Iterator[Passage]:
    """PubMedQA abstracts: ``CONTEXTS`` only, never ``LONG_ANSWER`` or ``final_decision`` (the answers)."""
    for pmid, row in json.loads(path.read_text()).items():
        labels = row.get("LABELS") or []
        for i, text in enumerate(row["CONTEXTS"]):
            label = labels[i].capitalize() if i < len(labels) else ""
            yield Passage(f"pubmedqa:{pmid}-{i}", label, text, "pubmedqa", f"PMID:{pmid}")


def snippet_id(text: str) -> str:
    """BioASQ snippets have no ids of their own: name one by its text, so duplicates collapse."""
    return "bioasq:" + hashlib.sha1(normalize(text).encode()).hexdigest()[:16]


def bioasq_docs(path: Path, types: tuple[str, ...] | None = None) -> Iterator[Passage]:
    """BioASQ golden sets: ``snippets[].text`` of questions of ``types`` (all when None), each text once.

    ``ideal_answer`` and ``exact_answer`` are answers and never read.
    """
    seen = set()
    for f in _files(path, "*.json"):
        for q in json.loads(f.read_text())["questions"]:
            if types and q["type"] not in types:
                continue
            for s in q.get("snippets") or []:
                pid = snippet_id(s["text"])
                if pid not in seen and normalize(s["text"]):
                    seen.add(pid)
                    yield Passage(pid, "", s["text"], "bioasq", s.get("document", _origin(f)))


def medmcqa_docs(path: Path) -> Iterator[Passage]:
    """MedMCQA expert explanations (``exp``), titled by subject and topic; training rows only."""
    if any(w in path.name for w in ("eval", "test", "dev", "val")):
        raise UserError(f"{path}: MedMCQA explanations of evaluation rows are answers; use the training file")
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("exp") and normalize(row["exp"]):
            title = ": ".join(x for x in (row.get("subject_name"), row.get("topic_name")) if x)
            yield Passage(f"medmcqa:{row['id']}", title, row["exp"], "medmcqa", f"{_origin(path)}#{row['id']}")


def medrag_docs(path: Path, source: str | None = None) -> Iterator[Passage]:
    """MedRAG chunk files (JSONL ``{id, title, content}``), e.g. ``textbooks/chunk/*.jsonl``.

    The source is named after the corpus folder (``textbooks``) unless given.
    """
    source = source or (path.parent.name if path.name == "chunk" else path.stem if path.is_file() else path.name)
    for f in _files(path, "*.jsonl"):
        for line in f.open(encoding="utf-8"):
            if line.strip():
                row = json.loads(line)
                yield Passage(f"{source}:{row['id']}", row.get("title", ""), row["content"], source, _origin(f))


def txt_docs(path: Path, source: str | None = None) -> Iterator[Passage]:
    """A folder of plain ``.txt`` files: one document per file, titled by the file name."""
    source = source or path.name
    for f in _files(path, "*.txt"):
        rel = f.relative_to(path).with_suffix("") if path.is_dir() else Path(f.stem)
        yield Passage(f"{source}:{rel.as_posix()}", f.stem.replace("_", " "), f.read_text(encoding="utf-8"),
                      source, _origin(f))


SOURCES: dict[str, Callable[[Path], Iterator[Passage]]] = {
    "medquad": medquad_docs, "pubmedqa": pubmedqa_docs, "bioasq": bioasq_docs,
    "medmcqa": medmcqa_docs, "medrag": medrag_docs, "txt": txt_docs,
}
DEFAULT_INPUTS = {
    "medquad": "corpora/medquad", "pubmedqa": "benchmarks/pubmedqa_test_set.json",
    "bioasq": "benchmarks/bioasq", "medmcqa": "benchmarks/medmcqa_train.jsonl",
}


# ---- writing and reading a corpus ----

@dataclass(frozen=True)
class Manifest:
    name: str
    count: int
    sources: dict[str, int]
    sha256: str                 # of the uncompressed passages file: what an index is bound to
    chunking: dict
    duplicates_removed: int
    passages: str = PASSAGES


def write_corpus(name: str, passages: Iterable[Passage], out_dir: Path, chunking: Chunking,
                 dedup: Dedup | None = None) -> Manifest:
    """Write passages and then the manifest, each through a temporary file and a rename.

    ``dedup`` is the filter the passages came through; its count is read once all are written.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    digest, sources, buf = hashlib.sha256(), Counter(), io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0) as gz:  # same input, same bytes
        for p in passages:
            line = (json.dumps(asdict(p), ensure_ascii=False) + "\n").encode()
            digest.update(line)
            gz.write(line)
            sources[p.source] += 1
    manifest = Manifest(name, sum(sources.values()), dict(sorted(sources.items())), digest.hexdigest(),
                        asdict(chunking), dedup.removed if dedup else 0)
    _replace(out_dir / PASSAGES, buf.getvalue())
    _replace(out_dir / MANIFEST, (json.dumps(asdict(manifest), indent=2) + "\n").encode())
    return manifest


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


@dataclass
class Corpus:
    path: Path
    manifest: Manifest
    passages: list[Passage]


def corpus_dir(name_or_path: str | Path) -> Path:
    """An existing folder as given; else a shipped corpus of that name; else the user's cache."""
    from pra.models import cache_dir
    path = Path(name_or_path)
    if path.is_dir():
        return path
    if (SHIPPED / str(name_or_path) / MANIFEST).exists():
        return SHIPPED / str(name_or_path)
    return cache_dir() / "corpora" / str(name_or_path)


def load_corpus(name_or_path: str | Path) -> Corpus:
    """Read a built corpus and check its passages against the manifest's hash."""
    path = corpus_dir(name_or_path)
    if not (path / MANIFEST).exists():
        raise MissingFile(f"no built corpus at {path} (no {MANIFEST}); build it with build_corpus({str(name_or_path)!r})")
    manifest = Manifest(**json.loads((path / MANIFEST).read_text()))
    data = gzip.decompress((path / manifest.passages).read_bytes())
    if hashlib.sha256(data).hexdigest() != manifest.sha256:
        raise UserError(f"{path / manifest.passages} does not match the sha256 in its manifest; rebuild the corpus")
    passages = [Passage(**json.loads(line)) for line in data.decode().split("\n") if line]
    return Corpus(path, manifest, passages)


# ---- the named corpora ----

def medcorp_mini(data_dir: Path = DATA_DIR, chunking: Chunking = Chunking(), size: int = 10_000
                 ) -> tuple[list[Passage], Dedup]:
    """All PubMedQA contexts, the snippets of BioASQ yes/no questions and MedMCQA training
    explanations, then MedQuAD answers in a fixed pseudo-random order (by a hash of their ids, so
    every site is represented) until ``size`` passages, less any document whose text is an evaluation
    answer (``evaluation_answers``). Returns the passages and their dedup filter."""
    dedup = Dedup()
    core = chain(pubmedqa_docs(data_dir / DEFAULT_INPUTS["pubmedqa"]),
                 bioasq_docs(data_dir / DEFAULT_INPUTS["bioasq"], types=("yesno",)),
                 medmcqa_docs(data_dir / DEFAULT_INPUTS["medmcqa"]))
    passages = list(dedup(p for d in without_answers(core, data_dir) for p in chunk(d, chunking)))
    medquad = sorted(medquad_docs(data_dir / DEFAULT_INPUTS["medquad"]),
                     key=lambda d: hashlib.sha1(d.id.encode()).digest())
    passages += islice(dedup(p for d in medquad for p in chunk(d, chunking)), max(0, size - len(passages)))
    return passages, dedup


def evaluation_answers(data_dir: Path = DATA_DIR) -> set[str]:
    """The answer texts of the evaluation questions, normalised: the ``exp`` of MedMCQA evaluation rows,
    PubMedQA ``LONG_ANSWER`` and the ``ideal_answer`` of BioASQ yes/no questions. Some training
    explanations (near-duplicate questions) and gold snippets repeat one of them verbatim."""
    bench = data_dir / "benchmarks"
    rows = [json.loads(line) for line in (bench / "medmcqa_eval.jsonl").read_text().split("\n") if line.strip()]
    texts = [r.get("exp") or "" for r in rows]
    texts += [r["LONG_ANSWER"] for r in json.loads((data_dir / DEFAULT_INPUTS["pubmedqa"]).read_text()).values()]
    for f in _files(data_dir / DEFAULT_INPUTS["bioasq"], "*.json"):
        for q in json.loads(f.read_text())["questions"]:
            ideal = q.get("ideal_answer") or [] if q["type"] == "yesno" else []
            texts += ideal if isinstance(ideal, list) else [ideal]
    return {t for t in map(normalize, texts) if t}


def without_answers(docs: Iterable[Passage], data_dir: Path = DATA_DIR) -> Iterator[Passage]:
    """The documents whose text is not an evaluation answer (``evaluation_answers``)."""
    answers = evaluation_answers(data_dir)
    return (d for d in docs if normalize(d.text) not in answers)


def medcorp(data_dir: Path = DATA_DIR, chunking: Chunking = Chunking()) -> tuple[list[Passage], Dedup]:
    """All of the shared data that is not an evaluation answer: every PubMedQA context, the snippets of
    every BioASQ question (all types), every MedMCQA training explanation and every MedQuAD answer,
    in that order, less any document whose text is an evaluation answer (``evaluation_answers``).
    Returns the passages and their dedup filter."""
    dedup = Dedup()
    docs = chain(pubmedqa_docs(data_dir / DEFAULT_INPUTS["pubmedqa"]),
                 bioasq_docs(data_dir / DEFAULT_INPUTS["bioasq"]),
                 medmcqa_docs(data_dir / DEFAULT_INPUTS["medmcqa"]),
                 medquad_docs(data_dir / DEFAULT_INPUTS["medquad"]))
    return list(dedup(p for d in without_answers(docs, data_dir) for p in chunk(d, chunking))), dedup


NAMED: dict[str, Callable[..., tuple[list[Passage], Dedup]]] = {"medcorp-mini": medcorp_mini, "medcorp": medcorp}


def build_corpus(name: str, out_dir: str | Path | None = None, *, kind: str | None = None,
                 inputs: Iterable[str | Path] = (), chunking: Chunking = Chunking(),
                 data_dir: Path = DATA_DIR) -> Manifest:
    """Build corpus ``name`` into ``out_dir``.

    ``name`` is one of ``NAMED`` (``medcorp-mini``, ``medcorp``: the shipped corpora, written into the
    project by default), or any name together with ``kind``, one of ``SOURCES`` (defaults to ``name``),
    reading ``inputs`` (paths; the shared data files by default where there are some). Other corpora go
    to the cache by default.
    """
    if name in NAMED and kind is None:
        passages, dedup = NAMED[name](data_dir, chunking)
        out = Path(out_dir) if out_dir else SHIPPED / name
        return write_corpus(name, passages, out, chunking, dedup)
    kind = kind or name
    if kind not in SOURCES:
        raise UserError(f"unknown corpus kind {kind!r}; one of {sorted(SOURCES)} or {' / '.join(NAMED)}")
    paths = [Path(p).expanduser() for p in inputs] or (
        [data_dir / DEFAULT_INPUTS[kind]] if kind in DEFAULT_INPUTS else [])
    if not paths:
        raise UserError(f"corpus kind {kind!r} needs inputs (files or folders)")
    dedup = Dedup()
    passages = dedup(p for path in paths for d in SOURCES[kind](path) for p in chunk(d, chunking))
    out = Path(out_dir) if out_dir else corpus_dir(name)
    return write_corpus(name, passages, out, chunking, dedup)
