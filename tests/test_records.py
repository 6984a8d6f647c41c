import json

import pytest

from pra.records import JsonlWriter, RecordFileError, read_records


def test_resume_skips_done_ids_and_never_duplicates(tmp_path):
    path = tmp_path / "r.jsonl"
    with JsonlWriter(path) as w:
        w.write({"id": "a", "v": 1})
        w.write({"id": "a", "v": 2})          # same id twice in one run
    with JsonlWriter(path) as w:
        assert w.done == {"a"}
        w.write({"id": "a", "v": 3})
        w.write({"id": "b", "v": 4})
    assert [r["id"] for r in read_records(path)] == ["a", "b"]


def test_torn_last_line_is_dropped_and_repaired(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"id": "a"}) + "\n" + '{"id": "b", "v"')   # killed mid-write
    assert [r["id"] for r in read_records(path)] == ["a"]
    with JsonlWriter(path) as w:
        assert w.done == {"a"}
        w.write({"id": "b"})
    assert [r["id"] for r in read_records(path)] == ["a", "b"]


def test_corrupt_middle_line_names_file_and_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"id": "a"}\nnot json\n{"id": "c"}\n')
    with pytest.raises(RecordFileError, match=r"r.jsonl:2"):
        list(read_records(path))
