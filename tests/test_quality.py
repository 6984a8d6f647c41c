"""Trajectory quality: the composite on hand-set scores, marginal contributions and the command on a
scripted judge, and the digit reading of a real embedded judge against a plain forward pass."""
import json
import math
import re

import pytest

from eval.analysis.quality import (CRITERIA, DIGITS, JudgedTrace, QualityJudge, Scores, Weights, composite, deltas,
                          expected_digit, marginal_contributions, score_run)
from pra.backends.base import BackendStats, LMBackend
from tests.test_engine import q
from tests.test_report import make_run


def test_composite_on_hand_set_scores():
    s = Scores(coherence=0.8, evidence=0.6, hallucination=0.25, completeness=0.4, traceability=1.0, answer=1.0)
    # 0.2*0.8 + 0.15*0.6 + 0.15*(1-0.25) + 0.15*0.4 + 0.15*1.0 + 0.2*1.0
    assert composite(s) == pytest.approx(0.16 + 0.09 + 0.1125 + 0.06 + 0.15 + 0.2)
    only = Weights(coherence=0, evidence=0, hallucination=2, completeness=0, traceability=0, answer=2)
    assert composite(s, only) == pytest.approx((0.75 + 1.0) / 2)         # normalised by the weights' sum
    worst = Scores(0, 0, 1, 0, 0, 0)
    assert composite(worst) == 0.0 and composite(Scores(1, 1, 0, 1, 1, 1)) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="non-negative"):
        Weights(answer=-1)
    with pytest.raises(ValueError, match="positive sum"):
        Weights(0, 0, 0, 0, 0, 0)


def test_expected_digit_reads_the_distribution():
    assert expected_digit({d: (0.0 if d in "09" else -100.0) for d in DIGITS}) == pytest.approx(0.5)
    assert expected_digit({d: (0.0 if d == "6" else -100.0) for d in DIGITS}) == pytest.approx(6 / 9)
    # not renormalised by the caller: the reading renormalises over the ten digits itself
    assert expected_digit({d: math.log(0.05) for d in DIGITS}) == pytest.approx(0.5)


class StepCountJudge(LMBackend):
    """Answers 3 x (steps shown), at most 9, on every criterion but hallucination (always 0)."""

    def __init__(self, name="counter"):
        self.name, self.stats, self.prompts = name, BackendStats(), []

    @property
    def has_chat_template(self):
        return False

    def render(self, messages, assistant_prefix=""):
        return "\n\n".join(m.content for m in messages) + assistant_prefix

    def generate(self, prompts, params):
        raise AssertionError("the judge is read, never sampled")

    def choice_logprobs(self, prompts, choices):
        self.prompts += prompts
        out = []
        for p, cs in zip(prompts, choices):
            digit = 0 if CRITERIA["hallucination"] in p else min(9, 3 * len(re.findall(r"^Step \d+:", p, re.M)))
            out.append({c: (0.0 if c == str(digit) else -60.0) for c in cs})
        return out

    def slot_logprobs(self, prompts, digits=("0", "1"), sep=","):
        raise AssertionError("not a reward agent")


def test_marginal_contribution_of_each_step_on_a_scripted_judge():
    trace = JudgedTrace(q(0), ("first fact", "second fact", "so the answer is (B)"), "B")
    prefixes = trace.prefixes()
    assert [p.answer for p in prefixes] == [None, None, "B"]
    scores = QualityJudge(StepCountJudge()).score(prefixes)
    values = [composite(s) for s in scores]
    # criteria 1/3, 2/3, 1; hallucination 0 -> 1; answer 0, 0, 1: 0.65 c + 0.15 + 0.2 a
    assert values == pytest.approx([0.65 / 3 + 0.15, 0.65 * 2 / 3 + 0.15, 1.0])
    assert deltas(values) == pytest.approx([0.65 / 3 + 0.15, 0.65 / 3, 0.65 / 3 + 0.2])
    assert sum(deltas(values)) == pytest.approx(values[-1])                 # the empty trace is worth 0
    # a prefix stating an answer keeps it; the full trace's answer is the prediction (forced ones too)
    early = JudgedTrace(q(0), ("the answer is (C)", "more"), "D").prefixes()
    assert [p.answer for p in early] == ["C", "D"]
    # the reward view: any prefix scorer, e.g. a reward agent's reward for the prefix's last step
    reward = {"a": 0.9, "b": 0.4, "c": 0.7}
    assert marginal_contributions(["a", "b", "c"], lambda p: reward[p[-1]]) == pytest.approx([0.9, -0.5, 0.3])


def _run(tmp_path, doc_id):
    """medqa-0 with two steps (the first searched doc_id), medqa-1 with one, medqa-2 without steps."""
    steps = [[{"text": "Plaques on extensor surfaces suggest psoriasis.", "doc_ids": [doc_id]},
              {"text": "The answer is (A)."}, {"text": ""}],
             [{"text": "The answer is (B)."}], []]
    return make_run(tmp_path, "run", "pra", [True, False, False], benchmark="medqa",
                    ids=["medqa-0", "medqa-1", "medqa-2"], extra=[{"steps": s} for s in steps])


def test_command_writes_resumes_and_refuses_another_judge(tmp_path):
    from corpora.builders import load_corpus

    passage = load_corpus("medcorp-mini").passages[0]
    run, out = _run(tmp_path, passage.id), tmp_path / "quality.jsonl"
    judge = StepCountJudge()
    assert score_run(run, judge, out, first=1) == (1, 0)
    assert any(f"Evidence for step 1 [1] ({passage.title})" in p for p in judge.prompts)
    first_line = out.read_text()
    assert score_run(run, judge, out) == (1, 1)                # medqa-1 now; medqa-2 has no steps
    lines = [json.loads(l) for l in out.read_text().splitlines()]
    assert out.read_text().startswith(first_line) and [l["id"] for l in lines] == ["medqa-0", "medqa-1"]
    a, b = lines
    assert a["steps"] == 2 and len(a["marginal"]) == 2 and a["correct"] and not b["correct"]
    assert a["criteria"]["coherence"] == pytest.approx(6 / 9, abs=1e-4) and a["criteria"]["answer"] == 1.0
    assert sum(a["marginal"]) == pytest.approx(a["composite"], abs=1e-3)
    assert b["composite"] == pytest.approx(0.65 / 3 + 0.15, abs=1e-4)     # answered B, gold D
    assert a["method"].startswith("pra (untrained smollm2-135m-instruct") and a["judge"] == "counter"
    with pytest.raises(ValueError, match="quality.jsonl: record 1 has judge 'counter', not 'other'"):
        score_run(run, StepCountJudge("other"), out)


def test_bad_records_name_file_and_field(tmp_path):
    run = make_run(tmp_path, "bad", "cot", [True], benchmark="medqa", ids=["medqa-0"])
    with pytest.raises(ValueError, match="bad/records.jsonl: record 1: field 'steps' missing"):
        score_run(run, StepCountJudge(), tmp_path / "q.jsonl")
    lost = make_run(tmp_path, "lost", "cot", [True], benchmark="medqa", ids=["medqa-0"],
                    extra=[{"steps": [{"text": "x", "doc_ids": ["no-such-passage"]}]}])
    with pytest.raises(ValueError, match="passage 'no-such-passage' is not in corpus 'medcorp-mini'"):
        score_run(lost, StepCountJudge(), tmp_path / "q.jsonl")


def test_embedded_judge_reading_matches_a_plain_forward_pass(smollm2, tmp_path):
    """SmolLM2 as the judge (two short traces): each criterion is E[digit]/9 of the next-token
    distribution over the ten digits, as a forward pass without any cache computes it."""
    import torch

    from eval.analysis.quality import main

    judge = QualityJudge(smollm2)
    good = JudgedTrace(q(0), ("Option b follows from the question.", "The answer is (B)."), "B")
    bad = JudgedTrace(q(0), ("The answer is (C).",), "C")
    scores = judge.score([good, bad])
    assert all(0 <= v <= 1 for s in scores for v in vars(s).values())
    assert scores[0].answer == 1.0 and scores[1].answer == 0.0
    prompt = judge.prompts(bad)[list(CRITERIA).index("completeness")]
    ids = smollm2.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        logits = smollm2.model(ids).logits[0, -1]
    digit_ids = [smollm2.tokenizer.encode(d, add_special_tokens=False)[0] for d in DIGITS]
    p = torch.softmax(logits[digit_ids].double(), dim=-1)
    assert scores[1].completeness == pytest.approx(float((p * torch.arange(10)).sum()) / 9, abs=1e-4)
    run = make_run(tmp_path, "run", "cot", [True], benchmark="medqa", ids=["medqa-0"],
                   extra=[{"steps": [{"text": "Silvery plaques point to psoriasis."}, {"text": "The answer is (A)."}]}])
    main([str(run), "--judge", "smollm2-135m-instruct", "--out", str(tmp_path / "q.jsonl")])
    (line,) = [json.loads(l) for l in (tmp_path / "q.jsonl").read_text().splitlines()]
    assert line["judge"] == "smollm2-135m-instruct" and len(line["prefix_composite"]) == 2
    assert 0 < line["composite"] < 1 and line["criteria"]["answer"] == 1.0
