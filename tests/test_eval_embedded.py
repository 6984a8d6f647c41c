"""Real runs of each baseline on the embedded SmolLM2, kept tiny (2 questions, short steps)."""
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

from eval.run import EvalConfig, run_eval
from pra import prompts
from pra.prompts import DIRECT_PREFIX, copies_example, policy_messages, policy_prompt_id
from pra.backends.base import SamplingParams
from search.engine import SearchConfig
from tests.test_engine import q

SMALL = SearchConfig(max_steps=2, step_tokens=16)


def records(path):
    return [json.loads(l) for l in open(path / "records.jsonl")]


@pytest.mark.parametrize("method", ["direct", "cot", "sc"])
def test_each_method_runs_on_smollm2(method, smollm2, tmp_path):
    cfg = EvalConfig(method=method, limit=2, out=str(tmp_path), samples=2, search=SMALL)
    summary = run_eval(cfg, policy=smollm2)
    rs = records(tmp_path)
    assert summary["n"] == 2 and len(rs) == 2
    assert all(r["prediction"] in "ABCD" and r["correct"] == (r["prediction"] == r["gold"]) for r in rs)
    if method == "direct":
        assert all(set(r["logprobs"]) == set("ABCD") for r in rs)
    else:
        assert all(1 <= len(r["steps"]) <= 2 and r["tokens"] > 0 for r in rs)
        assert all(len(r["answers"]) == (2 if method == "sc" else 1) for r in rs)
    assert json.loads((tmp_path / "summary.json").read_text())["accuracy"] == summary["accuracy"]


def test_greedy_generation_cuts_at_stop_strings(smollm2):
    prompt = smollm2.render(policy_messages(q(0), True), "Step 1:")
    (outs,) = smollm2.generate([prompt], SamplingParams(n=2, max_tokens=24, stop=("\n",)))
    assert outs[0].text == outs[1].text                     # greedy: both samples equal
    assert "\n" not in outs[0].text and 0 < outs[0].tokens <= 24


def test_choice_logprobs_are_normalised_over_letters(smollm2):
    prompt = smollm2.render(policy_messages(q(0), True, direct=True), DIRECT_PREFIX)
    (lp,) = smollm2.choice_logprobs([prompt], [["A", "B", "C", "D"]])
    assert abs(sum(math.exp(v) for v in lp.values()) - 1) < 1e-5


def test_killed_run_resumes_to_exactly_n_records(tmp_path):
    cmd = [sys.executable, "-m", "pra.cli", "eval", "--method", "cot", "--limit", "4", "--max-steps", "2",
           "--step-tokens", "16", "--max-active", "1", "--out", str(tmp_path)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd + ["--seed", "0"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    path = tmp_path / "records.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and (not path.exists() or not path.read_text().strip()):
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = len(path.read_text().splitlines())
    assert 1 <= first < 4
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ids = [r["id"] for r in records(tmp_path)]
    assert len(ids) == 4 and len(set(ids)) == 4


def test_rag_puts_retrieved_passages_before_the_question(smollm2, tmp_path):
    from corpora.retrieval import load_retriever

    cfg = EvalConfig(method="rag", limit=1, out=str(tmp_path), rag_docs=2, search=SMALL)
    summary = run_eval(cfg, policy=smollm2, retriever=load_retriever("medcorp-mini", mode="bm25"))
    (r,) = records(tmp_path)
    assert len(r["context"]) == 2 and r["prediction"] in "ABCD"
    assert summary["searches_per_question"] == 1      # one retrieval per question, before it


@pytest.fixture(scope="module")
def gemma():
    from pra.backends.transformers_backend import TransformersBackend
    return TransformersBackend("gemma3-270m")


def test_gemma_base_model_runs_cot_from_plain_text(gemma, tmp_path):
    assert not gemma.has_chat_template
    summary = run_eval(EvalConfig(method="cot", policy="gemma3-270m", limit=1, out=str(tmp_path), search=SMALL),
                       policy=gemma)
    (r,) = records(tmp_path)
    assert summary["n"] == 1 and r["prediction"] in "ABCD" and r["steps"]
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["policy_prompt"] == policy_prompt_id(False, "steps") and summary["copied_example"] in (0, 1)


# The one worked example the base-model prompt had before BASE_EXAMPLES.
SCURVY = ("Question: Which vitamin deficiency causes scurvy?\nOptions:\nA. Vitamin A\nB. Vitamin B12\n"
          "C. Vitamin C\nD. Vitamin D\nAnswer:\n"
          "Step 1: Scurvy presents with bleeding gums, poor wound healing and perifollicular hemorrhages.\n"
          "Step 2: These follow from defective collagen synthesis, which needs ascorbic acid.\n"
          "Step 3: Ascorbic acid is vitamin C, so the answer is (C).")


def test_gemma_writes_its_own_steps_not_a_worked_example(gemma, monkeypatch):
    """Greedy CoT on 8 seeded training questions. With the single example Gemma-3-270M copied its steps
    and its answer into every question (8 of 8 here, 24 of 24 on 24); with one example per letter its
    steps are its own (0 of 8 copy; 2 of 24)."""
    from pra.benchmarks import load_benchmark
    from pra.selection import questions_asked
    from search.engine import Engine, Trace

    questions = questions_asked(load_benchmark("medmcqa-train").questions, sample=8, seed=7, permute="balanced")

    def cot(examples: tuple[str, ...]) -> list[tuple[bool, str]]:
        monkeypatch.setattr(prompts, "BASE_EXAMPLES", examples)
        traces = Engine(gemma, SearchConfig(max_steps=3, step_tokens=32)).run([Trace(q) for q in questions])
        return [(copies_example(t.best.texts, examples), t.prediction) for t in traces]

    shipped = prompts.BASE_EXAMPLES
    one = cot((SCURVY,))
    assert sum(copied for copied, _ in one) >= 6 and [p for _, p in one].count("C") >= 6
    assert sum(copied for copied, _ in cot(shipped)) <= 1
