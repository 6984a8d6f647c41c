"""Quality-weighted context (``--method qwc``): pool reading and selection, the prompt, and runs on a
scripted policy and on the embedded SmolLM2 with the shipped pool."""
import json

import pytest

from eval.run import QWC_POOL, EvalConfig, run_eval
from pra.prompts import policy_messages
from search.engine import SearchConfig
from search.qwc import PoolError, load_pool, select
from tests.fakes import ScriptedPolicy
from tests.test_engine import q


def pool_row(i: int, quality: float) -> dict:
    return {"id": f"train-{i}/t0", "question_id": f"train-{i}", "question": f"training question {i}",
            "options": {"A": "x", "B": "y"}, "gold": "A", "source": "medmcqa-train",
            "steps": [f"reasoning {i}", f"the answer is (A)"], "answer": "A", "quality": quality}


def write_pool(path, qualities) -> str:
    path.write_text("".join(json.dumps(pool_row(i, v)) + "\n" for i, v in enumerate(qualities)))
    return str(path)


def test_select_takes_the_best_and_the_worst(tmp_path):
    pool = load_pool(write_pool(tmp_path / "pool.jsonl", [0.5, 0.91, 0.12, 0.7]))
    assert [e.quality for e in select(pool)] == [0.91, 0.12]
    assert [e.id for e in select(pool, 4)] == ["train-1/t0", "train-3/t0", "train-0/t0", "train-2/t0"]
    with pytest.raises(ValueError, match="even number"):
        select(pool, 3)
    with pytest.raises(ValueError, match="holds 4 traces, fewer than k=6"):
        select(pool, 6)


def test_bad_pool_lines_name_file_line_and_field(tmp_path):
    path = tmp_path / "bad.jsonl"
    rows = [pool_row(0, 0.5), {**pool_row(1, 0.5), "quality": 1.5}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(PoolError, match=r"bad.jsonl:2: field 'quality' must be a number in \[0, 1\]"):
        load_pool(path)
    row = pool_row(0, 0.5)
    del row["steps"]
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(PoolError, match="bad.jsonl:1: field 'steps' missing"):
        load_pool(path)


@pytest.mark.parametrize("chat", [True, False])
def test_prompt_shows_high_and_low_traces_with_their_values_before_the_question(tmp_path, chat):
    examples = select(load_pool(write_pool(tmp_path / "pool.jsonl", [0.5, 0.91, 0.12])))
    (text,) = [m.content for m in policy_messages(q(0), chat, examples=examples) if m.role == "user"]
    high, low = text.index("Example 1 (quality 0.91):"), text.index("Example 2 (quality 0.12):")
    assert high < text.index("training question 1") < text.index("Step 1: reasoning 1") < low
    assert low < text.index("training question 2") < text.index("Step 1: reasoning 2") < text.index("Question: question 0")
    assert "training question 0" not in text                      # the middle one is not shown
    assert "quality" not in "".join(m.content for m in policy_messages(q(0), chat))


def test_qwc_run_on_a_scripted_policy(tmp_path):
    pool = write_pool(tmp_path / "pool.jsonl", [0.3, 0.8, 0.1])
    policy = ScriptedPolicy(lambda qt, step, i: "the answer is (B)")
    cfg = EvalConfig(method="qwc", limit=1, out=str(tmp_path / "run"), qwc_pool=pool)
    assert run_eval(cfg, policy=policy)["n"] == 1
    (prompt,) = policy.calls[0]
    assert "Example 1 (quality 0.80)" in prompt and "Example 2 (quality 0.10)" in prompt
    (record,) = [json.loads(l) for l in open(tmp_path / "run" / "records.jsonl")]
    assert record["examples"] == ["train-1/t0", "train-2/t0"] and record["method"] == "qwc"


def test_qwc_refuses_an_example_under_evaluation(tmp_path):
    from pra.benchmarks import load_eval_benchmark

    first = load_eval_benchmark("medqa", limit=1).questions[0]
    path = tmp_path / "pool.jsonl"
    path.write_text(json.dumps({**pool_row(0, 0.9), "question_id": first.id}) + "\n"
                    + json.dumps(pool_row(1, 0.1)) + "\n")
    cfg = EvalConfig(method="qwc", benchmark="medqa", limit=1, out=str(tmp_path / "run"), qwc_pool=str(path))
    with pytest.raises(ValueError, match=f"holds question '{first.id}', which is being evaluated"):
        run_eval(cfg, policy=ScriptedPolicy(lambda qt, step, i: "the answer is (B)"))


def test_qwc_on_smollm2_with_the_shipped_pool(smollm2, tmp_path):
    shipped = select(load_pool(QWC_POOL))
    assert shipped[0].quality > shipped[1].quality and shipped[0].question.source == "medmcqa-train"
    cfg = EvalConfig(method="qwc", limit=1, out=str(tmp_path), search=SearchConfig(max_steps=2, step_tokens=16))
    summary = run_eval(cfg, policy=smollm2)
    (record,) = [json.loads(l) for l in open(tmp_path / "records.jsonl")]
    assert summary["n"] == 1 and record["prediction"] in "ABCD" and 1 <= len(record["steps"]) <= 2
    assert record["examples"] == [e.id for e in shipped]


def test_pool_command_judges_training_traces(tmp_path):
    from pra.benchmarks import load_benchmark
    from eval.analysis.qwc_pool import build_pool
    from tests.test_quality import StepCountJudge

    a, b = load_benchmark("medmcqa-train", limit=2).questions
    traces = tmp_path / "traces.jsonl"
    traces.write_text(json.dumps({"id": a.id, "traces": [{"steps": ["x", "y", ""], "answer": a.answer}]}) + "\n"
                      + json.dumps({"id": b.id, "traces": [{"steps": ["the answer is (Z)"], "answer": None}]}) + "\n")
    out = tmp_path / "pool.jsonl"
    assert build_pool(traces, StepCountJudge(), out) == 2 and build_pool(traces, StepCountJudge(), out) == 0
    pool = load_pool(out)
    # 2 steps, answered right: 0.65 * 6/9 + 0.15 + 0.2; 1 step, no answer: 0.65 * 3/9 + 0.15
    assert [e.quality for e in pool] == pytest.approx([0.65 * 2 / 3 + 0.35, 0.65 / 3 + 0.15], abs=1e-4)
    assert pool[0].steps == ("x", "y") and pool[0].question == a
    with pytest.raises(ValueError, match="'medqa' is an evaluation set"):
        build_pool(traces, StepCountJudge(), tmp_path / "p2.jsonl", benchmark="medqa")
