import errno
import json
import os
import subprocess

import pytest
from hypothesis import given, settings, strategies as st

from pra.errors import UserError
from pra.records import DiskFull, JsonlWriter, RecordFileError, read_records


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


def test_a_torn_multibyte_character_in_the_last_line_is_dropped_and_repaired(tmp_path):
    """A full disk or a kill can cut a record inside a UTF-8 character: the rest of the file still reads,
    and the writer cuts the torn bytes off before its next append (bytes first, then decoding)."""
    path = tmp_path / "r.jsonl"
    whole = json.dumps({"id": "µ1", "q": "µ" * 50}, ensure_ascii=False).encode() + b"\n"
    torn = json.dumps({"id": "µ2", "q": "µ" * 50}, ensure_ascii=False).encode()[:23]
    assert torn.endswith(b"\xc2")                       # cut between the two bytes of a µ
    path.write_bytes(whole + torn)
    assert [r["id"] for r in read_records(path)] == ["µ1"]
    with JsonlWriter(path) as w:
        assert w.done == {"µ1"}
        w.write({"id": "µ2"})
    assert [r["id"] for r in read_records(path)] == ["µ1", "µ2"]
    assert path.read_bytes().startswith(whole) and path.read_bytes().count(b"\n") == 2


def test_a_middle_line_that_is_not_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"id": "a"}\n{"id": "\xff"}\n{"id": "c"}\n')
    with pytest.raises(RecordFileError, match=r"r.jsonl:2: not UTF-8: byte 0xff at column 9"):
        list(read_records(path))
    path.write_bytes(b'{"id": "a"}\n[1, 2]\n{"id": "c"}\n')
    with pytest.raises(RecordFileError, match=r"r.jsonl:2: expected a JSON object, got list"):
        list(read_records(path))


def test_a_full_disk_is_one_error_saying_what_is_safe_and_the_rerun_resumes(tmp_path, monkeypatch):
    """Simulated ENOSPC: the write gets half a record out, then fails; the half record is cut off, the
    error says how many records are safe, and a second writer resumes after them."""
    path = tmp_path / "r.jsonl"
    with JsonlWriter(path) as w:
        w.write({"id": "a", "q": "µ" * 30})
        w.write({"id": "b", "q": "µ" * 30})
        real = os.write

        def half_then_full(fd, data):
            if len(data) > 10:
                return real(fd, bytes(data[:len(data) // 2 + 1]))
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(os, "write", half_then_full)
        with pytest.raises(DiskFull, match=r"r.jsonl: no space left on the device .*the 2 record\(s\) before it are safe"):
            w.write({"id": "c", "q": "µ" * 30})
        monkeypatch.setattr(os, "write", real)
    assert path.read_bytes().count(b"\n") == 2 and path.read_bytes().endswith(b"\n")
    with JsonlWriter(path) as w:
        assert w.done == {"a", "b"}
        w.write({"id": "c"})
    assert [r["id"] for r in read_records(path)] == ["a", "b", "c"]


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A real 128 KiB tmpfs, where this machine lets the tests mount one (root, Linux); skipped elsewhere."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()[:80]}); the simulated ENOSPC test covers it")
    yield mount
    if subprocess.run(["umount", str(mount)], capture_output=True).returncode:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)   # a file still open: detach it lazily


def test_a_run_on_a_full_tmpfs_stops_with_one_line_and_resumes(tiny_tmpfs, tmp_path, capsys):
    """The issue's reproduction: a benchmark whose ids are full of µ, a run folder on a 128 KiB tmpfs that
    fills up mid-run; the run stops with a one-line error, and after freeing space the rerun answers every
    question exactly once."""
    from eval.run import EvalConfig, run_eval
    from tests.fakes import ScriptedPolicy

    bench = tmp_path / "micro.jsonl"
    bench.write_text("".join(json.dumps({"id": f"{'µ' * 1500}-{i}", "question": f"q{i}?", "options": ["x", "y"],
                                         "answer": "A"}, ensure_ascii=False) + "\n" for i in range(30)))
    filler = tiny_tmpfs / "filler"
    filler.write_bytes(b"\0" * (128 * 1024 - 12 * 4096))      # leaves room for a dozen pages
    out = tiny_tmpfs / "run"
    cfg = EvalConfig(benchmark=str(bench), method="direct", out=str(out), batch_size=4)
    policy = ScriptedPolicy(lambda *a: "", force="A")
    with pytest.raises(UserError, match=r"no space left on the device") as err:
        run_eval(cfg, policy=policy)
    assert len(str(err.value).splitlines()) == 1
    safe = list(read_records(out / "records.jsonl"))
    assert 0 < len(safe) < 30
    filler.unlink()
    summary = run_eval(cfg, policy=policy)
    ids = [r["id"] for r in read_records(out / "records.jsonl")]
    assert summary["n"] == 30 and len(ids) == len(set(ids)) == 30


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=40))
def test_any_bytes_read_as_records_or_a_record_file_error(tmp_path_factory, head, tail):
    """Fuzz: whatever bytes a records file holds, reading it yields dicts or raises RecordFileError, and a
    writer opened on it (when it reads) appends a record that reads back."""
    path = tmp_path_factory.mktemp("fuzz") / "r.jsonl"
    path.write_bytes(b'{"id": "x"}\n' + head + b"\n" + tail)
    try:
        assert all(isinstance(r, dict) for r in read_records(path))
        with JsonlWriter(path) as w:
            w.write({"id": "new-one"})
    except RecordFileError:
        return
    assert "new-one" in {str(r.get("id")) for r in read_records(path)}


def test_a_run_whose_records_end_inside_a_utf8_character_resumes(tmp_path):
    """The issue's first case: the run folder's records end part-way through a µ (a kill, a full disk);
    the rerun reads the folder (before, the folder check decoded the whole file and died), cuts the torn
    bytes and asks that question again: every id once."""
    from eval.run import EvalConfig, run_eval
    from tests.fakes import ScriptedPolicy

    bench = tmp_path / "micro.jsonl"
    bench.write_text("".join(json.dumps({"id": f"µ{i}", "question": f"q{i}?", "options": ["x", "y"], "answer": "A"},
                                        ensure_ascii=False) + "\n" for i in range(4)))
    cfg = EvalConfig(benchmark=str(bench), method="direct", out=str(tmp_path / "run"))
    policy = ScriptedPolicy(lambda *a: "", force="A")
    run_eval(cfg, policy=policy)
    path = tmp_path / "run" / "records.jsonl"
    data = path.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    cut = data.index("µ".encode(), last) + 1                  # inside the last record's first µ
    path.write_bytes(data[:cut])
    assert len(list(read_records(path))) == 3
    summary = run_eval(cfg, policy=policy)
    ids = [r["id"] for r in read_records(path)]
    assert summary["n"] == 4 and sorted(ids) == [f"µ{i}" for i in range(4)]
