"""Benchmark loaders: each shipped format (or a generic JSON-lines file) -> ``list[Question]``.

A malformed row stops the load with ``file:where: field ...`` so a broken file is fixed, not silently
scored on fewer questions; ``skip_bad`` is the explicit opt-out. Evaluation code calls
``load_eval_benchmark``, which refuses ``medmcqa-train``: that split trains the teacher labels, the
reward agent and the probe, and scoring on it would report memorised questions as accuracy.
"""
from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Callable, Iterator

from pra.errors import UserError
from pra.types import Question

DATA = Path(__file__).parents[1] / "eval" / "data"   # the shipped copies, with their licenses
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
# The ids --permute gives rotated questions (``ID@rN``, pra.selection): a benchmark's own id may not look
# like one, or a rotation of one question would share its id with another question.
ROTATION_ID = re.compile(r"@r[0-9]+$")

# name -> (format, file); the shipped copies, see eval/data/README.md
BENCHMARKS: dict[str, tuple[str, Path]] = {
    "medqa": ("medqa", DATA / "medqa_us_4opt_sample.jsonl"),
    "medmcqa-eval": ("medmcqa", DATA / "medmcqa_eval.jsonl"),
    "medmcqa-train": ("medmcqa", DATA / "medmcqa_train.jsonl"),
    "mmlu-med": ("mmlu", DATA / "mmlu_med"),
    "pubmedqa": ("pubmedqa", DATA / "pubmedqa_test_set.json"),
    "bioasq": ("bioasq", DATA / "bioasq_yesno.json"),
}
TRAIN_BENCHMARKS = frozenset({"medmcqa-train"})
EVAL_BENCHMARKS = frozenset(BENCHMARKS) - TRAIN_BENCHMARKS


class BenchmarkError(UserError):
    """Unknown benchmark, missing file, malformed row (``file:where: field ...``) or a refused split."""


@dataclass
class BenchmarkLoad:
    name: str
    questions: list[Question]
    skipped_rows: list[str]   # ``file:line: problem`` of each malformed row left out under ``skip_bad``
    path: Path

    @property
    def skipped(self) -> int:
        return len(self.skipped_rows)


class _Bad(Exception):
    """One malformed row; ``field`` is None when the row as a whole is broken."""

    def __init__(self, field: str | None, problem: str):
        super().__init__(f"field '{field}' {problem}" if field else problem)


# ---- field checks -------------------------------------------------------------------------------

def _get(row: dict, field: str) -> Any:
    if field not in row:
        raise _Bad(field, "is missing")
    return row[field]


def _nonempty(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _Bad(field, f"must be non-empty text, got {value!r:.60}")
    return value


def _text(row: dict, field: str) -> str:
    return _nonempty(_get(row, field), field)


def _utf8(text: str, where: str = "") -> str:
    """``text`` as read with ``surrogateescape``: a byte that is not UTF-8 makes the row malformed."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        byte = ord(text[e.start]) - 0xDC00
        raise _Bad(None, f"{where}not UTF-8: byte 0x{byte:02x} at column {e.start + 1}") from None
    return text


def _json_row(line: str) -> dict:
    try:
        row = json.loads(_utf8(line))
    except json.JSONDecodeError as e:
        raise _Bad(None, f"invalid JSON: {e.msg} (column {e.colno})") from None
    if not isinstance(row, dict):
        raise _Bad(None, f"expected a JSON object, got {type(row).__name__}")
    return row


def _options(value: Any) -> dict[str, str]:
    """A dict letter->text (letters A, B, ... in order) or a list of texts lettered by position."""
    if not isinstance(value, (dict, list)) or not 2 <= len(value) <= len(LETTERS):
        raise _Bad("options", f"must be a dict letter->text or a list of 2-26 texts, got {value!r:.60}")
    options = dict(zip(LETTERS, value)) if isinstance(value, list) else value
    if list(options) != list(LETTERS[: len(options)]):
        raise _Bad("options", f"letters must be A, B, ... in order, got {list(options)}")
    return {letter: _nonempty(text, f"options.{letter}") for letter, text in options.items()}


def _letter(row: dict, field: str, options: dict[str, str]) -> str:
    value = _get(row, field)
    if not isinstance(value, str) or value not in options:
        raise _Bad(field, f"must be one of {', '.join(options)}, got {value!r}")
    return value


# ---- row parsers: (raw row, fallback id, source) -> Question, or None for a row that is no question ----

def _medqa(line: str, fallback_id: str, source: str) -> Question:
    row = _json_row(line)
    options = _options(_get(row, "options"))
    return Question(fallback_id, _text(row, "question"), options, _letter(row, "answer_idx", options), source)


def _medmcqa(line: str, fallback_id: str, source: str) -> Question:
    row = _json_row(line)
    options = {letter: _text(row, f"op{letter.lower()}") for letter in "ABCD"}
    cop = _get(row, "cop")
    if type(cop) is not int or not 1 <= cop <= 4:
        raise _Bad("cop", f"must be 1-4, got {cop!r}")
    return Question(_text(row, "id"), _text(row, "question"), options, "ABCD"[cop - 1], source)


def _generic(line: str, fallback_id: str, source: str) -> Question:
    row = _json_row(line)
    options = _options(_get(row, "options"))
    qid = row.get("id", fallback_id)
    if not isinstance(qid, (str, int)) or isinstance(qid, bool) or not str(qid).strip():
        raise _Bad("id", f"must be text or an integer, got {qid!r:.60}")
    return Question(str(qid), _text(row, "question"), options, _letter(row, "answer", options), source)


def _mmlu(row: list[str], fallback_id: str, source: str) -> Question:
    if len(row) != 6:
        raise _Bad(None, f"expected 6 columns (question, A, B, C, D, answer), got {len(row)}")
    cells = {name: _utf8(cell, f"column {name}: ") for name, cell in zip(("question", "A", "B", "C", "D", "answer"), row)}
    options = {letter: _text(cells, letter) for letter in "ABCD"}
    return Question(fallback_id, _text(cells, "question"), options, _letter(cells, "answer", options), source)


YES_NO = {"A": "yes", "B": "no"}
YES_NO_MAYBE = {"A": "yes", "B": "no", "C": "maybe"}


def _pubmedqa(entry: Any, pmid: str, source: str) -> Question:
    """Question only (MIRAGE's question-only setting): the abstract CONTEXTS would give the answer away."""
    if not isinstance(entry, dict):
        raise _Bad(None, f"expected a JSON object, got {type(entry).__name__}")
    decision = _get(entry, "final_decision")
    if decision not in YES_NO_MAYBE.values():
        raise _Bad("final_decision", f"must be yes/no/maybe, got {decision!r}")
    gold = next(k for k, v in YES_NO_MAYBE.items() if v == decision)
    return Question(pmid, _text(entry, "QUESTION"), dict(YES_NO_MAYBE), gold, source)


def _bioasq(entry: Any, fallback_id: str, source: str) -> Question | None:
    """Yes/no questions only; other types are skipped, not counted as bad. One answer reads "Yes"."""
    if not isinstance(entry, dict):
        raise _Bad(None, f"expected a JSON object, got {type(entry).__name__}")
    if _get(entry, "type") != "yesno":
        return None
    answer = _get(entry, "exact_answer")
    if not isinstance(answer, str) or answer.strip().lower() not in YES_NO.values():
        raise _Bad("exact_answer", f"must be yes/no, got {answer!r:.60}")
    gold = "A" if answer.strip().lower() == "yes" else "B"
    return Question(_text(entry, "id"), _text(entry, "body"), dict(YES_NO), gold, source)


# ---- readers: path -> (where, fallback id, raw row) ---------------------------------------------

Row = tuple[str, str, Any]


def _read_jsonl(path: Path, name: str) -> Iterator[Row]:
    with path.open(encoding="utf-8", errors="surrogateescape") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                yield f"{path}:{n}", f"{name}-{n - 1}", line


def _read_csv(path: Path, name: str) -> Iterator[Row]:
    """One CSV or a folder of them; ids are ``<subject>-<row>`` with the ``_test`` suffix dropped."""
    for file in sorted(path.glob("*.csv")) if path.is_dir() else [path]:
        subject = file.stem.removesuffix("_test")
        with file.open(newline="", encoding="utf-8", errors="surrogateescape") as f:
            for n, row in enumerate(csv.reader(f), 1):
                yield f"{file}:row {n}", f"{subject}-{n - 1}", row


def _load_json(path: Path) -> Any:
    data = path.read_bytes()
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise BenchmarkError(f"{path}:{line}: not UTF-8: byte 0x{data[e.start]:02x} at column {column}") from None
    except json.JSONDecodeError as e:
        raise BenchmarkError(f"{path}:{e.lineno}: invalid JSON: {e.msg} (column {e.colno})") from None


def _read_pubmedqa(path: Path, name: str) -> Iterator[Row]:
    data = _load_json(path)
    if not isinstance(data, dict):
        raise BenchmarkError(f"{path}: expected a JSON object keyed by PMID")
    for pmid, entry in data.items():
        yield f"{path}:key {pmid}", pmid, entry


def _read_bioasq(path: Path, name: str) -> Iterator[Row]:
    data = _load_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("questions"), list):
        raise BenchmarkError(f"{path}: expected BioASQ golden JSON {{\"questions\": [...]}}")
    for n, entry in enumerate(data["questions"], 1):
        yield f"{path}:question {n}", f"{name}-{n - 1}", entry


FORMATS: dict[str, tuple[Callable[[Path, str], Iterator[Row]], Callable[[Any, str, str], Question | None]]] = {
    "medqa": (_read_jsonl, _medqa),
    "medmcqa": (_read_jsonl, _medmcqa),
    "generic": (_read_jsonl, _generic),
    "mmlu": (_read_csv, _mmlu),
    "pubmedqa": (_read_pubmedqa, _pubmedqa),
    "bioasq": (_read_bioasq, _bioasq),
}


def _detect(path: Path) -> str:
    """The format of a file given by path, from its extension and its fields."""
    if path.is_dir() or path.suffix == ".csv":
        return "mmlu"
    if path.suffix == ".json":
        data = _load_json(path)
        return "bioasq" if isinstance(data, dict) and "questions" in data else "pubmedqa"
    if path.suffix != ".jsonl":
        raise BenchmarkError(f"{path}: unknown file type (expected .jsonl, .json, .csv or a folder of .csv)")
    with path.open(encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict):
                return "medmcqa" if "opa" in row and "cop" in row else "medqa" if "answer_idx" in row else "generic"
    return "generic"


def _resolve(name_or_path: str) -> tuple[str, str, Path]:
    """(name, format, path): a registered name, a path to a registered file, or any other file."""
    if name_or_path in BENCHMARKS:
        fmt, path = BENCHMARKS[name_or_path]
        return name_or_path, fmt, path
    path = Path(name_or_path)
    if not path.exists():
        if path.suffix or "/" in name_or_path:
            raise BenchmarkError(f"benchmark file not found: {path}")
        raise BenchmarkError(f"unknown benchmark {name_or_path!r}; known: {', '.join(BENCHMARKS)} "
                             "(or a path to a .jsonl, .json or .csv file)")
    for name, (fmt, known) in BENCHMARKS.items():
        if known.resolve() == path.resolve():
            return name, fmt, known
    return path.stem, _detect(path), path


def _check_shard(shard: tuple[int, int]) -> tuple[int, int]:
    i, n = shard
    if n < 1 or not 0 <= i < n:
        raise BenchmarkError(f"shard i/n needs n >= 1 and 0 <= i < n, got {i}/{n}")
    return i, n


def parse_shard(text: str) -> tuple[int, int]:
    """``"1/4"`` -> (1, 4): the second of four shards, 0-based, as ``--shard`` takes it."""
    try:
        i, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise BenchmarkError(f"shard must look like i/n (e.g. 0/4), got {text!r}") from None
    return _check_shard((i, n))


def load_benchmark(name_or_path: str, *, limit: int | None = None, shard: tuple[int, int] | None = None,
                   skip_bad: bool = False) -> BenchmarkLoad:
    """Load a benchmark by name or path. ``limit`` keeps the first N questions, then ``shard=(i, n)``
    keeps positions p with p % n == i, so the n shards of one limit cover exactly its N questions."""
    if limit is not None and limit < 0:
        raise BenchmarkError(f"limit must be >= 0, got {limit}")
    name, fmt, path = _resolve(name_or_path)
    if not path.exists():
        raise BenchmarkError(f"benchmark file not found: {path}")
    read, parse = FORMATS[fmt]
    questions: list[Question] = []
    seen: dict[str, str] = {}          # id -> where it was first read
    skipped: list[str] = []
    for where, fallback_id, raw in read(path, name):
        try:
            question = parse(raw, fallback_id, name)
            if question is not None and question.id in seen:
                raise _Bad("id", f"duplicate {question.id!r}, already at {seen[question.id]}")
            if question is not None and ROTATION_ID.search(question.id):
                raise _Bad("id", f"{question.id!r} ends like a rotated question's id (ID@rN, written by --permute); "
                                 "rename it")
        except _Bad as bad:
            if not skip_bad:
                raise BenchmarkError(f"{where}: {bad}") from None
            skipped.append(f"{where}: {bad}")
            continue
        if question is not None:
            seen[question.id] = where
            questions.append(question)
    questions = questions[:limit]
    if shard is not None:
        i, n = _check_shard(shard)
        questions = questions[i::n]
    return BenchmarkLoad(name, questions, skipped, path)


def content_hash(questions: list[Question]) -> str:
    """A hash of a question set's content (ids, texts, options, gold letters; not their order): what a run
    config stores as ``benchmark_hash``, so that ``pra compare`` and ``pra merge`` can tell two runs of the
    same questions from two runs of different files that happen to share a name or ids."""
    import hashlib

    rows = sorted(json.dumps([q.id, q.question, q.options, q.answer], ensure_ascii=False) for q in questions)
    return hashlib.sha256("\n".join(rows).encode("utf-8", "surrogatepass")).hexdigest()[:16]


@cache
def _train_ids() -> frozenset[str]:
    return frozenset(q.id for name in TRAIN_BENCHMARKS for q in load_benchmark(name).questions)


def load_eval_benchmark(name_or_path: str, **kwargs: Any) -> BenchmarkLoad:
    """``load_benchmark`` for evaluation: refuses the training split by name, by path or by question id."""
    if name_or_path in TRAIN_BENCHMARKS:
        raise BenchmarkError(f"{name_or_path!r} is training data and cannot be evaluated on; "
                             f"evaluation benchmarks: {', '.join(sorted(EVAL_BENCHMARKS))}")
    load = load_benchmark(name_or_path, **kwargs)
    leaked = [q.id for q in load.questions if q.id in _train_ids()]
    if load.name in TRAIN_BENCHMARKS or leaked:
        raise BenchmarkError(f"{load.path}: holds {len(leaked)} training question(s) "
                             f"({', '.join(sorted(TRAIN_BENCHMARKS))}), e.g. {leaked[:1]}; evaluation must not read them")
    return load
