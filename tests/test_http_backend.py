"""OpenAIBackend against a real llama.cpp server (llama-cpp-python, built for any AVX2 CPU: see the
Makefile) serving the embedded SmolLM2 GGUF, and its retry logic against a scripted stub server. The
vLLM server is in tests/test_vllm_server.py."""
from __future__ import annotations

import json
import math
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.conftest import require, require_module  # noqa: E402

require_module("llama_cpp.server", "llamacpp", "llama-cpp-python[server] is not installed: pip install 'pra[server]'")

from pra.backends.base import SamplingParams  # noqa: E402
from pra.backends.openai_backend import OpenAIBackend, ServerError  # noqa: E402
from pra.reward_agent import ScoreRequest, render_prompt  # noqa: E402
from pra.types import Message, Question  # noqa: E402
from tests.servers import free_port, serve  # noqa: E402

MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    from pra import models
    try:
        gguf = models.gguf_path(models.EMBEDDED[MODEL])
    except models.ModelNotAvailable as err:
        require("llamacpp", f"the SmolLM2 GGUF llama.cpp serves: {err}")
    port = free_port()
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
               "--port", str(port), "--n_ctx", "2048", "--chat_format", "chatml",
               "--logits_all", "true",   # logits_all: log-probs
               # one thread: on busy shared cores, threads spinning at barriers stall
               "--n_threads", "1", "--n_threads_batch", "1"]
    with serve("llama.cpp", command, port, tmp_path_factory.mktemp("llama") / "server.log", 60) as server:
        yield server


@pytest.fixture
def server(llama_server):
    return llama_server.url


@pytest.fixture(scope="module")
def backend(llama_server):
    b = OpenAIBackend(llama_server.url, MODEL, concurrency=2, max_retries=1)
    yield b
    b.close()


def test_generate_greedy_n2_cuts_at_stop(backend):
    prompt = backend.render([Message("user", "What is the capital of France?")])
    (free,), = backend.generate([prompt], SamplingParams(max_tokens=16))
    words = free.text.split()
    assert len(words) >= 3, free.text
    stop = " " + words[2]              # cut inside the text the model is known to write greedily
    (a, b), = backend.generate([prompt], SamplingParams(n=2, max_tokens=16, stop=(stop, "\n\n")))
    assert a == b
    assert a.text == free.text[:free.text.index(stop)] and a.stopped and stop not in a.text
    assert 0 < a.tokens <= 16


def test_sampled_n_gets_n_completions(backend):
    """llama-cpp-python answers one choice whatever n: the backend notices and sends one per sample."""
    prompt = backend.render([Message("user", "Name a fruit.")])
    (out,) = backend.generate([prompt], SamplingParams(n=3, temperature=0.9, max_tokens=6, seed=7))
    assert len(out) == 3 and all(c.tokens > 0 for c in out)
    assert backend._one_per_request


def test_choice_logprobs_sum_to_one(backend):
    q = "Which organ pumps blood?\nA) liver\nB) heart\nC) lung\nD) kidney\nAnswer with the letter."
    prompt = backend.render([Message("user", q)], "The answer is (")
    (lp,) = backend.choice_logprobs([prompt], [["A", "B", "C", "D"]])
    assert set(lp) == {"A", "B", "C", "D"}
    assert math.isclose(sum(math.exp(v) for v in lp.values()), 1.0, rel_tol=1e-6)


def test_slot_logprobs_shared_prefix(backend):
    q = Question("q1", "Which organ pumps blood?", {"A": "liver", "B": "heart"}, "B", "test")
    prompts = [render_prompt(backend, ScoreRequest(q, (), (), step))
               for step in ("The heart pumps blood.", "The liver pumps blood.")]
    assert prompts[0][0] == prompts[1][0]
    before = backend.stats.extra["requests"]
    out = backend.slot_logprobs(prompts)
    # two reads per prompt (slot 1, then slot 2), each asked once more, wider, if a digit missed the top 20
    assert 4 <= backend.stats.extra["requests"] - before <= 8
    for s in out:
        for slot in (s.slot1, s.slot2):
            assert set(slot) == {"0", "1"} and all(math.isfinite(v) and v <= 0 for v in slot.values())


def test_pra_eval_with_the_reward_agent_on_the_server(server, smollm2, tmp_path):
    """Scale-out wiring: the policy runs here, the reward agent is the served model."""
    from eval.run import EvalConfig, run_eval
    from search.engine import SearchConfig

    cfg = EvalConfig(method="pra", limit=1, out=str(tmp_path), reward_agent=MODEL, agent_backend="openai",
                     agent_base_url=server, search_controller="never",
                     search=SearchConfig(beam_width=1, branching=2, max_steps=1, step_tokens=12))
    summary = run_eval(cfg, policy=smollm2)
    (record,) = [json.loads(line) for line in open(tmp_path / "records.jsonl")]
    assert summary["n"] == 1 and record["stats"]["reward_calls"] >= 1
    assert all(0 <= s["reward"] <= 1 for s in record["steps"])


# --- retries, against a stub that answers from a script ---------------------------------------------

OK = {"choices": [{"index": 0, "text": "Step 1: ok\nStep 2", "finish_reason": "length"}],
      "usage": {"prompt_tokens": 5, "completion_tokens": 7}}


@pytest.fixture
def stub():
    """A local server answering POSTs with the statuses in ``script`` (then 200 with ``OK``)."""
    seen, script = [], []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            seen.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            status = script.pop(0) if script else 200
            body = json.dumps(OK if status == 200 else {"error": "scripted"}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", script, seen
    httpd.shutdown()
    httpd.server_close()


def stub_backend(url: str, **kw) -> OpenAIBackend:
    return OpenAIBackend(url, "stub", **{"tokenizer": MODEL, "backoff": 0.01, "max_retries": 3, **kw})


def test_retries_503_then_succeeds(stub):
    url, script, seen = stub
    script += [503, 503]
    b = stub_backend(url)
    (c,), = b.generate(["Q"], SamplingParams(stop=("\nStep",)))
    assert (c.text, c.tokens, c.stopped) == ("Step 1: ok", 7, True)
    assert len(seen) == 3 and b.stats.extra["retries"] == 2
    assert seen[-1]["prompt"] == "Q" and seen[-1]["model"] == "stub" and seen[-1]["cache_prompt"] is True


def test_400_fails_at_once_naming_the_url(stub):
    url, script, seen = stub
    script += [400]
    with pytest.raises(ServerError, match=f"{url}/completions.*HTTP 400"):
        stub_backend(url).generate(["Q"], SamplingParams())
    assert len(seen) == 1


def test_gives_up_after_max_retries(stub):
    url, script, seen = stub
    script += [503] * 10
    with pytest.raises(ServerError, match="failed 4 times.*HTTP 503"):
        stub_backend(url).generate(["Q"], SamplingParams())
    assert len(seen) == 4
    with pytest.raises(ServerError, match="ConnectionError"):
        stub_backend(f"http://127.0.0.1:{free_port()}", max_retries=1).generate(["Q"], SamplingParams())


def test_a_server_that_dies_fails_with_its_log(tmp_path):
    crash = [sys.executable, "-c", "print('boom: general protection fault', flush=True); raise SystemExit(3)"]
    with pytest.raises(pytest.fail.Exception, match=r"crasher server exited \(3\)[\s\S]*boom: general protection"):
        with serve("crasher", crash, free_port(), tmp_path / "server.log", 30):
            pass
