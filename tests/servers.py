"""Real OpenAI-compatible servers (llama.cpp, vLLM) as test fixtures: started on loopback, waited for,
and watched, so that a server that dies fails the test with its own log rather than as a connection
error three layers down."""
from __future__ import annotations

import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
import requests


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, name: str, proc: subprocess.Popen, log: Path, url: str):
        self.name, self.proc, self.log, self.url = name, proc, log, url

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def check_alive(self) -> None:
        """Fail with the server's log if it has exited."""
        if self.proc.poll() is not None:
            pytest.fail(f"{self.name} server exited ({self.proc.returncode}); its log ends:\n{self.tail()}",
                        pytrace=False)


@contextmanager
def serve(name: str, command: list[str], port: int, log: Path, startup_s: float) -> Iterator[ServerProcess]:
    """Run ``command`` (a server listening on 127.0.0.1:``port``) until the block ends; ready once
    ``/v1/models`` answers."""
    url = f"http://127.0.0.1:{port}"
    with open(log, "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    server = ServerProcess(name, proc, log, url)
    try:
        deadline = time.monotonic() + startup_s
        while True:
            server.check_alive()
            try:
                if requests.get(url + "/v1/models", timeout=1).ok:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"{name} server not up after {startup_s:.0f} s; its log ends:\n{server.tail()}",
                            pytrace=False)
            time.sleep(0.5)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
