"""Append-only JSON-lines files that a long run can resume: finished ids are read back and skipped.

Both reading and repairing work on bytes, before anything is decoded: a write cut short (a kill, a full
disk) can end the file inside a multi-byte UTF-8 character, and such a torn last line is dropped (and cut
off before the next append) rather than stopping every rerun with a decoding error. A bad line anywhere
else is an error naming the file and line."""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any, Iterator
from pra.errors import UserError

NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class RecordFileError(UserError):
    pass


class DiskFull(UserError):
    """A record could not be written for lack of space; the records before it are intact."""


def _record(raw: bytes, path: Path, lineno: int) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise RecordFileError(f"{path}:{lineno}: not UTF-8: byte 0x{raw[err.start]:02x} at column {err.start + 1}") from None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as err:
        raise RecordFileError(f"{path}:{lineno}: not valid JSON ({err.msg}, column {err.colno})") from None
    except RecursionError:
        raise RecordFileError(f"{path}:{lineno}: not valid JSON (nested too deeply)") from None
    if not isinstance(record, dict):
        raise RecordFileError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
    return record


def read_records(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield the records of a JSONL file; a torn last line (no newline after it: a run killed or out of
    space mid-write, perhaps inside a UTF-8 character) is ignored; any other bad line is a
    ``RecordFileError`` naming ``file:line``."""
    path = Path(path)
    if not path.exists():
        return
    # split on b"\n" only: splitlines() also splits inside records at U+0085, U+2028 and friends
    lines = path.read_bytes().split(b"\n")
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            record = _record(raw, path, lineno)
        except RecordFileError:
            if lineno == len(lines):
                return  # the write in flight when the run stopped
            raise
        yield record


def complete_length(path: Path) -> int:
    """The length of ``path`` up to and including its last newline (what survives a torn write)."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    return data.rfind(b"\n") + 1


class JsonlWriter:
    """Appends one JSON object per line and flushes it to disk at once; knows which ids are done. A full
    disk is a ``DiskFull`` error saying how many records are safe; the half-written one is cut off, and
    rerunning resumes after the last whole record."""

    def __init__(self, path: str | Path, key: str = "id", stamp: dict[str, Any] | None = None):
        self.path = Path(path)
        self.key = key
        self.stamp = stamp or {}      # fields every record gets (a run's settings fingerprint)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._repair_tail()
        self.done: set[str] = set()
        for r in read_records(self.path):
            if key not in r:
                raise RecordFileError(f"{self.path}: a record has no {key!r} field: {json.dumps(r)[:80]}")
            self.done.add(str(r[key]))
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _repair_tail(self) -> None:
        """Cut a torn last line (bytes, undecoded) so the next append starts on a fresh line."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        cut = complete_length(self.path)
        if cut != self.path.stat().st_size:
            with self.path.open("r+b") as fh:
                fh.truncate(cut)

    def write(self, record: dict[str, Any]) -> None:
        rid = str(record[self.key])
        if rid in self.done:
            return
        data = (json.dumps({**record, **self.stamp}, ensure_ascii=False) + "\n").encode("utf-8")
        start = os.fstat(self._fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
            os.fsync(self._fd)
        except OSError as err:
            if err.errno not in NO_SPACE:
                raise
            try:
                os.ftruncate(self._fd, start)   # no half record left behind
            except OSError:
                pass                            # the reader drops it as a torn last line
            self.close()                        # nothing more fits; a rerun opens the file afresh
            raise DiskFull(f"{self.path}: no space left on the device while writing a record ({err.strerror}); "
                           f"the {len(self.done)} record(s) before it are safe: free some space and rerun the same "
                           "command to resume") from None
        self.done.add(rid)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "JsonlWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
