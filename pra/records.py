"""Append-only JSON-lines files that a long run can resume: finished ids are read back and skipped."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator
from pra.errors import UserError


class RecordFileError(UserError):
    pass


def read_records(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield the records of a JSONL file; a torn last line (a run killed mid-write) is ignored."""
    path = Path(path)
    if not path.exists():
        return
    # split on "\n" only: splitlines() also splits inside records at U+0085, U+2028 and friends
    lines = path.read_text(encoding="utf-8").split("\n")
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError as err:
            if lineno == len(lines):
                return  # the write in flight when the run stopped
            raise RecordFileError(f"{path}:{lineno}: not valid JSON ({err.msg})") from err


class JsonlWriter:
    """Appends one JSON object per line and flushes it to disk at once; knows which ids are done."""

    def __init__(self, path: str | Path, key: str = "id", stamp: dict[str, Any] | None = None):
        self.path = Path(path)
        self.key = key
        self.stamp = stamp or {}      # fields every record gets (a run's settings fingerprint)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._repair_tail()
        self.done: set[str] = {str(r[key]) for r in read_records(self.path)}
        self._fh = self.path.open("a", encoding="utf-8")

    def _repair_tail(self) -> None:
        """Cut a torn last line so the next append starts on a fresh line."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        data = self.path.read_bytes()
        if data.endswith(b"\n"):
            return
        cut = data.rfind(b"\n") + 1
        with self.path.open("r+b") as fh:
            fh.truncate(cut)

    def write(self, record: dict[str, Any]) -> None:
        rid = str(record[self.key])
        if rid in self.done:
            return
        self._fh.write(json.dumps({**record, **self.stamp}, ensure_ascii=False) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.done.add(rid)

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> "JsonlWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
