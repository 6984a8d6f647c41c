"""Post-hoc rewards for saved SC traces: every sample gets step rewards and an outcome, resumably."""
import json

from eval.analysis.report.posthoc import has_outcome, posthoc_accuracy
from eval.analysis.rescore import rescore_records
from eval.run import EvalConfig, run_eval
from pra.reward_agent import RewardAgent
from pra.benchmarks import load_eval_benchmark
from search.engine import SearchConfig
from tests.fakes import TableRewardAgent


def test_steps_are_scored_in_order_with_earlier_rewards_shown_then_the_outcome():
    q = load_eval_benchmark("medmcqa-eval", limit=1).questions[0]
    record = {"id": q.id, "gold": q.answer,
              "samples": [{"answer": "A", "steps": ["good", "bad"]}, {"answer": "B", "steps": ["good"]}]}
    agent = TableRewardAgent({"good": 0.9, "bad": 0.2, "Therefore, the answer is (A).": 0.7})
    (out,) = rescore_records([record], {q.id: q}, agent)
    assert [s["rewards"] for s in out["samples"]] == [[0.9, 0.2], [0.9]]
    assert [s["outcome"] for s in out["samples"]] == [0.7, 0.5]          # 0.5: the table's default
    second_step = next(r for batch in agent.requests for r in batch if r.step == "bad")
    assert second_step.steps == ("good",) and second_step.rewards == (0.9,)
    assert has_outcome(out)
    assert posthoc_accuracy([out], "min")[0] == float(q.answer == "B")     # min: A's 0.2 loses to B's 0.9


def test_sc_records_keep_every_sample_and_rescore_on_smollm2(smollm2, tmp_path):
    cfg = EvalConfig(method="sc", samples=3, limit=1, out=str(tmp_path),
                     search=SearchConfig(max_steps=2, step_tokens=12))
    run_eval(cfg, policy=smollm2)
    (record,) = [json.loads(line) for line in open(tmp_path / "records.jsonl")]
    assert len(record["samples"]) == 3 and "rewards" not in record["samples"][0]
    assert [s["answer"] for s in record["samples"]] == record["answers"]
    q = load_eval_benchmark("medmcqa-eval", limit=1).questions[0]
    (scored,) = rescore_records([record], {q.id: q}, RewardAgent(smollm2))
    assert all(len(s["rewards"]) == len(s["steps"]) and 0 < s["outcome"] < 1 for s in scored["samples"])
