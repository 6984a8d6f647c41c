"""OpenAIBackend's waiting and its errors, against a scripted local stub (no llama.cpp needed): connect
and read timeouts, bounded retries each announced by a warning line naming the URL with its credentials
redacted, one-line errors for a reply that is not JSON or has no log-probs, the request concurrency from
the server's /props, the API key from the environment only; and a planted key that reaches no file."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pra.backends.base import SamplingParams
from pra.backends.openai_backend import OpenAIBackend, ServerError, ServerOptions
from pra.errors import UserError

MODEL = "smollm2-135m-instruct"
OK = {"choices": [{"index": 0, "text": "Step 1: ok", "finish_reason": "stop"}],
      "usage": {"prompt_tokens": 5, "completion_tokens": 7}}
LETTERS = {"choices": [{"index": 0, "text": "A", "logprobs": {"top_logprobs": [
    {"A": -0.1, "B": -2.5, "C": -3.0, "D": -3.5, "E": -4.0}]}}]}
SECRET, TOKEN = "planted-secret-k3y", "planted-t0ken"


@pytest.fixture
def stub():
    """A local server: GET /props answers ``state["props"]`` (404 if None); each POST takes the next
    reply from ``script``: an int status, a ``("raw", bytes)`` body, ``("sleep", s)`` or a dict (200)."""
    state = {"props": None, "script": [], "seen": [], "headers": [], "default": OK}

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status, body: bytes):
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            props = state["props"]
            self._send(404 if props is None else 200, json.dumps(props or {"error": "no"}).encode())

        def do_POST(self):
            state["seen"].append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            state["headers"].append(dict(self.headers))
            step = state["script"].pop(0) if state["script"] else state["default"]
            if isinstance(step, tuple) and step[0] == "sleep":
                time.sleep(step[1])
                return
            if isinstance(step, tuple):
                return self._send(200, step[1])
            if isinstance(step, int):
                return self._send(step, b'{"error": "scripted"}')
            self._send(200, json.dumps(step).encode())

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    state["url"] = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    state["secret_url"] = f"http://user:{SECRET}@127.0.0.1:{httpd.server_address[1]}/v1?api_key={TOKEN}"
    yield state
    httpd.shutdown()
    httpd.server_close()


def backend(url, **kw) -> tuple[OpenAIBackend, list[str]]:
    lines: list[str] = []
    b = OpenAIBackend(url, "stub", **{"tokenizer": MODEL, "backoff": 0.01, "max_retries": 2, "warn": lines.append, **kw})
    return b, lines


def test_each_retry_is_a_warning_naming_the_redacted_url_and_the_last_is_one_error(stub):
    stub["script"] += [503, 503, 503]
    b, lines = backend(stub["secret_url"])
    with pytest.raises(ServerError) as err:
        b.generate(["Q"], SamplingParams())
    message = str(err.value)
    assert len(message.splitlines()) == 1 and "failed 3 times; last: HTTP 503" in message
    assert len(lines) == 2 and all("pra: warning: POST http://***@127.0.0.1" in line for line in lines)
    assert "retry 1 of 2" in lines[0] and "retry 2 of 2" in lines[1]
    assert SECRET not in message + "".join(lines) and TOKEN not in message + "".join(lines)


def test_a_server_that_never_answers_times_out_with_one_line(stub):
    stub["script"] += [("sleep", 2.0), ("sleep", 2.0)]
    b, lines = backend(stub["url"], timeout=0.3, max_retries=1)
    started = time.perf_counter()
    with pytest.raises(ServerError, match=r"failed 2 times; last: ReadTimeout: no reply within 0.3 s"):
        b.generate(["Q"], SamplingParams())
    assert time.perf_counter() - started < 5 and len(lines) == 1


@pytest.mark.parametrize("reply, culprit", [
    (("raw", b"<html>busy</html>"), "the reply is not JSON: '<html>busy</html>'"),
    (("raw", b"[1, 2]"), "the reply is not a JSON object"),
    ({"choices": [{"index": 0, "text": "A"}]}, "the reply has no logprobs"),
    ({"choices": []}, "the reply has no logprobs"),
    ({"nothing": 1}, "the reply has no logprobs"),
])
def test_a_reply_without_json_or_logprobs_is_one_error(stub, reply, culprit):
    stub["script"].append(reply)
    b, _ = backend(stub["url"])
    with pytest.raises(ServerError) as err:
        b.choice_logprobs(["Q"], [["A", "B"]])
    assert culprit in str(err.value) and len(str(err.value).splitlines()) == 1


def test_a_completion_reply_without_choices_is_one_error(stub):
    stub["script"].append({"choices": [{"index": 0}]})
    b, _ = backend(stub["url"])
    with pytest.raises(ServerError, match="the reply's choices are not texts"):
        b.generate(["Q"], SamplingParams())


def test_concurrency_follows_the_servers_slots_unless_given(stub):
    assert backend(stub["url"])[0].concurrency == 16                 # /props answers 404
    stub["props"] = {"total_slots": 1, "default_generation_settings": {"n_ctx": 2048}}
    assert backend(stub["url"])[0].concurrency == 1
    stub["props"] = {"default_generation_settings": {"n_parallel": 3}}
    assert backend(stub["url"])[0].concurrency == 3
    assert backend(stub["url"], concurrency=5)[0].concurrency == 5


def test_the_api_key_comes_from_the_environment(stub, monkeypatch):
    from pra.backends import openai_backend

    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    b, _ = backend(stub["url"])
    b.generate(["Q"], SamplingParams())
    assert stub["headers"][-1]["Authorization"] == f"Bearer {SECRET}"
    monkeypatch.setenv("MY_KEY", "other-key")
    monkeypatch.setattr(openai_backend, "OPTIONS", ServerOptions(api_key_env="MY_KEY").check())
    backend(stub["url"])[0].generate(["Q"], SamplingParams())
    assert stub["headers"][-1]["Authorization"] == "Bearer other-key"
    with pytest.raises(UserError, match="--api-key-env NOT_SET_ANYWHERE: no such environment variable is set"):
        ServerOptions(api_key_env="NOT_SET_ANYWHERE").check()


def test_no_base_url_is_one_error():
    with pytest.raises(UserError, match="needs --base-url"):
        OpenAIBackend(None, "stub", tokenizer=MODEL)


def test_a_planted_key_reaches_no_file(stub, tmp_path, monkeypatch, capsys):
    """A --base-url with user:KEY@ and ?api_key=, and a key in OPENAI_API_KEY: a direct run against the stub,
    then `pra show`; neither secret is in config.json, the records, summary.json or viewer.html."""
    from pra import cli

    monkeypatch.setenv("OPENAI_API_KEY", SECRET + "-env")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    stub["default"] = LETTERS
    bench = tmp_path / "bench.jsonl"
    bench.write_text("".join(json.dumps({"id": f"q{i}", "question": f"q{i}?", "options": ["x", "y"], "answer": "A"}) + "\n"
                             for i in range(3)))
    out = tmp_path / "run"
    cli.main(["eval", "--method", "direct", "--backend", "openai", "--base-url", stub["secret_url"],
              "--policy", MODEL, "--benchmark", str(bench), "--limit", "3", "--out", str(out)])
    cli.main(["show", str(out)])
    printed = capsys.readouterr()
    assert stub["headers"][-1]["Authorization"].startswith("Basic ")     # the URL's user:KEY@, sent as HTTP auth
    files = {p.name: p.read_text() for p in out.iterdir() if p.is_file() and p.name != ".lock"}
    assert {"config.json", "records.jsonl", "summary.json", "viewer.html"} <= set(files)
    for name, text in {**files, "stdout": printed.out, "stderr": printed.err}.items():
        assert SECRET not in text and TOKEN not in text, name
    assert json.loads(files["config.json"])["base_url"].startswith("http://***@127.0.0.1:")
    assert "api_key=***" in files["config.json"]


@pytest.mark.parametrize("reply, extra, culprit", [
    (("raw", b"<html>busy</html>"), [], "the reply is not JSON: '<html>busy</html>'"),
    ({"choices": [{"index": 0, "text": "A"}]}, [], "the reply has no logprobs"),
    (("sleep", 2.0), ["--read-timeout", "0.3", "--retries", "1"], "failed 2 times; last: ReadTimeout: no reply within 0.3 s"),
])
def test_a_bad_server_is_one_error_line_from_the_command_line(stub, tmp_path, capsys, monkeypatch, reply, extra, culprit):
    """``pra eval --backend openai`` against a server that answers HTML, answers without log-probs or never
    answers: exit 2, one error line naming the redacted URL (and a warning line per retry before it)."""
    from pra import cli

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    stub["default"] = reply
    bench = tmp_path / "bench.jsonl"
    bench.write_text(json.dumps({"id": "q0", "question": "q?", "options": ["x", "y"], "answer": "A"}) + "\n")
    with pytest.raises(SystemExit) as stop:
        cli.main(["eval", "--method", "direct", "--backend", "openai", "--base-url", stub["secret_url"], "--policy", MODEL,
                  "--benchmark", str(bench), "--limit", "1", "--out", str(tmp_path / "run"), *extra])
    lines = [line.split("\r")[-1] for line in capsys.readouterr().err.split("\n")]    # after a progress bar's \r
    err = [line for line in lines if line.startswith("pra ")]
    errors = [line for line in err if line.startswith("pra eval: error: ")]
    assert stop.value.code == 2 and len(errors) == 1 and culprit in errors[0], err
    assert "http://***@127.0.0.1" in errors[0] and SECRET not in "\n".join(err) and TOKEN not in "\n".join(err)
