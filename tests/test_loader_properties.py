"""Property-based tests of the loaders: benchmark JSON-lines and CSV files and resumable record files.
Any well-formed file loads back exactly; any one damaged row (bad JSON, a byte that is not UTF-8) is
named by file and line, and ``skip_bad`` skips exactly that row and lists it."""
import csv
import io
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pra.benchmarks import LETTERS, BenchmarkError, load_benchmark
from pra.records import JsonlWriter, read_records

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40).filter(str.strip)


@st.composite
def generic_rows(draw):
    n = draw(st.integers(1, 8))
    ids = draw(st.lists(st.text("abcdefgh0123456789", min_size=1, max_size=8), min_size=n, max_size=n, unique=True))
    rows = []
    for qid in ids:
        options = draw(st.lists(text, min_size=2, max_size=6))
        rows.append({"id": qid, "question": draw(text), "options": options,
                     "answer": LETTERS[draw(st.integers(0, len(options) - 1))]})
    return rows


def _write(data: bytes, suffix: str) -> Path:
    folder = Path(tempfile.mkdtemp())
    path = folder / f"bench{suffix}"
    path.write_bytes(data)
    return path


@FAST
@given(generic_rows())
def test_well_formed_jsonl_loads_back_exactly(rows):
    path = _write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode(), ".jsonl")
    load = load_benchmark(str(path))
    assert load.skipped == 0
    assert [(q.id, q.question, list(q.options.values()), q.answer) for q in load.questions] == \
           [(r["id"], r["question"], r["options"], r["answer"]) for r in rows]


@FAST
@given(generic_rows(), st.data())
def test_one_truncated_json_row_is_named_and_skippable(rows, data):
    lines = [json.dumps(r, ensure_ascii=False) for r in rows]
    bad = data.draw(st.integers(0, len(lines) - 1))
    lines[bad] = lines[bad][:data.draw(st.integers(1, len(lines[bad]) - 1))]
    path = _write(("\n".join(lines) + "\n").encode(), ".jsonl")
    with pytest.raises(BenchmarkError, match=rf"{path}:{bad + 1}: invalid JSON: .* \(column \d+\)"):
        load_benchmark(str(path))
    load = load_benchmark(str(path), skip_bad=True)
    assert [q.id for q in load.questions] == [r["id"] for i, r in enumerate(rows) if i != bad]
    assert len(load.skipped_rows) == 1 and load.skipped_rows[0].startswith(f"{path}:{bad + 1}: invalid JSON")


@FAST
@given(generic_rows(), st.data())
def test_a_byte_that_is_not_utf8_is_named_by_line_and_column_and_skippable(rows, data):
    lines = [json.dumps(r, ensure_ascii=False).encode() for r in rows]
    bad = data.draw(st.integers(0, len(lines) - 1))
    cut = lines[bad].index(b'"question": "') + len(b'"question": "')      # inside the question's text
    lines[bad] = lines[bad][:cut] + b"\xff" + lines[bad][cut:]
    path = _write(b"\n".join(lines) + b"\n", ".jsonl")
    column = len(lines[bad][:cut].decode()) + 1
    with pytest.raises(BenchmarkError, match=rf"{path}:{bad + 1}: not UTF-8: byte 0xff at column {column}$"):
        load_benchmark(str(path))
    load = load_benchmark(str(path), skip_bad=True)
    assert [q.id for q in load.questions] == [r["id"] for i, r in enumerate(rows) if i != bad]
    assert load.skipped == 1


@FAST
@given(st.lists(st.tuples(text, text, text, text, text, st.sampled_from("ABCD")), min_size=1, max_size=8))
def test_mmlu_csv_loads_back_exactly(rows):
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    path = _write(buffer.getvalue().encode(), ".csv")
    load = load_benchmark(str(path))
    assert [(q.question, *q.options.values(), q.answer) for q in load.questions] == [tuple(r) for r in rows]


@FAST
@given(st.lists(st.dictionaries(st.sampled_from(["a", "b", "text"]), st.integers() | text, max_size=3), max_size=10),
       st.integers(1, 30))
def test_records_resume_and_a_torn_tail_is_dropped(records, tear):
    path = Path(tempfile.mkdtemp()) / "r.jsonl"
    with JsonlWriter(path) as w:
        for i, r in enumerate(records):
            w.write({"id": str(i), **r})
    written = [{"id": str(i), **r} for i, r in enumerate(records)]
    assert list(read_records(path)) == written
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"id": "torn", "text": "x" * 40})[:tear])            # a write cut short by a kill
    assert list(read_records(path)) == written
    with JsonlWriter(path) as w:
        assert w.done == {r["id"] for r in written}
        w.write({"id": "next"})
    assert [r["id"] for r in read_records(path)] == [r["id"] for r in written] + ["next"]


id_text = st.text(alphabet=st.sampled_from("ab@r01-_ µ"), min_size=1, max_size=8).filter(str.strip)


@settings(max_examples=150, deadline=None)
@given(st.lists(id_text, min_size=1, max_size=8), st.sampled_from(["none", "balanced", "cyclic"]),
       st.integers(0, 2**31 - 1), st.randoms(use_true_random=False))
def test_ids_stay_unique_after_any_permutation(ids, permute, seed, rnd):
    """Whatever ids a benchmark file holds (including ``q`` beside ``q@r1``) and in whatever row order:
    it loads with unique ids or stops naming the row, and every permutation asks each (question,
    rotation) once, under an id that maps back to its question."""
    from pra.selection import questions_asked, split_id

    rnd.shuffle(ids)
    rows = [{"id": qid, "question": "q?", "options": ["x", "y", "z"], "answer": "A"} for qid in ids]
    path = _write("".join(json.dumps(r) + "\n" for r in rows).encode(), ".jsonl")
    try:
        questions = load_benchmark(str(path)).questions
    except BenchmarkError as err:
        assert "duplicate" in str(err) or "rotated question's id" in str(err), err
        assert len(str(err).splitlines()) == 1
        return
    asked = questions_asked(questions, seed=seed, permute=permute)
    assert len({q.id for q in asked}) == len(asked) == len(questions) * (3 if permute == "cyclic" else 1)
    assert {split_id(q.id)[0] for q in asked} == {q.id for q in questions}


def test_duplicate_ids_name_both_lines_and_rotation_like_ids_are_refused(tmp_path):
    row = lambda qid: json.dumps({"id": qid, "question": "q?", "options": ["x", "y"], "answer": "A"}) + "\n"
    path = tmp_path / "dup.jsonl"
    path.write_text(row("a") + row("b") + row("a"))
    with pytest.raises(BenchmarkError, match=rf"dup.jsonl:3: field 'id' duplicate 'a', already at {path}:1"):
        load_benchmark(str(path))
    path.write_text(row("q") + row("q@r1"))
    with pytest.raises(BenchmarkError, match=r"dup.jsonl:2: field 'id' 'q@r1' ends like a rotated question's id"):
        load_benchmark(str(path))
