"""PRA beam search end to end on the embedded SmolLM2 (policy and untrained reward agent)."""
import json

import pytest

from pra.benchmarks import load_eval_benchmark
from eval.run import EvalConfig, run_eval
from pra.reward_agent import RewardAgent
from search.controllers import Always, Never
from search.engine import Engine, SearchConfig, Trace

GREEDY = SearchConfig(beam_width=2, branching=2, max_steps=2, step_tokens=12, temperature=0.0)


@pytest.fixture(scope="module")
def questions():
    return load_eval_benchmark("medmcqa-eval", limit=3).questions


@pytest.fixture(scope="module")
def bm25():
    from corpora.retrieval import load_retriever
    return load_retriever("medcorp-mini", mode="bm25")


def summary(t):
    return ([s.text for s in t.best.steps], [round(s.reward, 4) for s in t.best.steps], t.prediction)


def test_greedy_question_in_a_queue_equals_it_alone(smollm2, questions):
    engine = Engine(smollm2, GREEDY, reward_agent=RewardAgent(smollm2), controller=Never())
    together = {t.question.id: summary(t) for t in engine.run([Trace(x) for x in questions])}
    for x in questions:
        (alone,) = engine.run([Trace(x)])
        assert summary(alone) == together[x.id]


def test_same_seed_gives_the_same_records(smollm2, bm25, tmp_path):
    cfg = dict(method="pra", limit=2, search_controller="threshold:0.5",
               search=SearchConfig(beam_width=2, branching=2, max_steps=2, step_tokens=12, temperature=0.8, seed=7))
    agent = RewardAgent(smollm2)
    runs = []
    for name in ("a", "b"):
        smollm2.prefix_cache.clear()    # a new command starts cold; cached states differ in the last bits
        run_eval(EvalConfig(**cfg, out=str(tmp_path / name)), policy=smollm2, reward_agent=agent, retriever=bm25)
        rows = [json.loads(l) for l in open(tmp_path / name / "records.jsonl")]
        runs.append([(r["id"], r["prediction"], r["steps"], r["scores"]) for r in rows])
    assert runs[0] == runs[1]


def test_always_search_records_documents_per_kept_step(smollm2, bm25, tmp_path):
    cfg = EvalConfig(method="pra", limit=1, out=str(tmp_path), search_controller="always",
                     search=SearchConfig(beam_width=2, branching=2, max_steps=2, step_tokens=12, docs_per_search=2))
    s = run_eval(cfg, policy=smollm2, reward_agent=RewardAgent(smollm2), retriever=bm25)
    (r,) = [json.loads(l) for l in open(tmp_path / "records.jsonl")]
    assert all(st["searched"] and 1 <= len(st["doc_ids"]) <= 2 for st in r["steps"])
    assert all(0.0 <= st["reward"] <= 1.0 and 0.0 <= st["action"] <= 1.0 for st in r["steps"])
    assert r["stats"]["searches"] == r["stats"]["candidates"] and r["stats"]["reward_tokens"] > 0
    assert s["searches_per_question"] == r["stats"]["searches"]
    assert len(r["answers"]) == 2 and r["prediction"] in "ABCD"
