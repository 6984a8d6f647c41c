"""One writer per folder: an advisory ``fcntl`` lock that the system drops when its holder exits,
however it exits, with the holder's PID written into the lock file so that the loser can name it."""
from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def exclusive(lock_file: Path) -> Iterator[int | None]:
    """Hold ``lock_file`` for the ``with`` block: yields None when this process holds it, else the PID
    of the process that does (0 if it has not written it yet); never waits."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)     # no truncation: the file holds the holder's PID
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            yield int(text) if text.isdigit() else 0
            return
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield None
    finally:
        os.close(fd)
