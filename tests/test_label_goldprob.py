"""The gold-probability teacher: its maths, its reads on a stand-in policy that prefers one letter and
follows the option a step names, a resumable run on SmolLM2, and training examples from its labels."""
import json
import math
import re

import pytest

from pra.records import read_records
from pra.types import Question
from tests.fakes import ScriptedPolicy
from training.config import LabelConfig
from training.dataset import load_examples
from training.label import Item, goldprob_fields, goldprob_labels, label_stats, log_odds, run_label

Q = Question("q1", "Which vitamin prevents scurvy?",
             {"A": "Vitamin A", "B": "Vitamin C", "C": "Vitamin D", "D": "Vitamin K"}, "B", "train")


def test_rise_labels_and_margin_shift():
    f = goldprob_fields(0.25, 0.4, 0.8)
    assert f["goldprob_dp"] == pytest.approx(0.15) and f["goldprob_label"] == 1
    assert f["goldprob_soft"] == pytest.approx(0.575)
    assert f["goldprob_dm"] == pytest.approx(math.log(0.4 / 0.6) - math.log(0.8 / 0.2))
    assert goldprob_fields(0.3, 0.3, 0.3)["goldprob_label"] == 0        # no change is no help
    fall = goldprob_fields(0.5, 0.1, 0.1)
    assert fall["goldprob_label"] == 0 and fall["goldprob_soft"] == pytest.approx(0.3) and fall["goldprob_dm"] == 0
    assert goldprob_fields(0.2, 1.0, 1.0)["goldprob_dm"] == 0 and math.isfinite(log_odds(1.0))


class NamingPolicy(ScriptedPolicy):
    """Prefers letter A by e^3 whatever the options, and any letter whose option text the latest step
    names by e^2: a letter preference that permutation averaging must cancel, over content it must keep."""

    def __init__(self):
        super().__init__(lambda *_: "")
        self.asked: list[str] = []

    def choice_logprobs(self, prompts, choices):
        self.asked += prompts
        out = []
        for p, letters in zip(prompts, choices):
            options = dict(re.findall(r"^([A-D])\. (.*)$", p, re.M))
            steps = re.findall(r"^Step \d+: (.*)$", p, re.M)
            named = {l for l, text in options.items() if steps and text in steps[-1]}
            raw = {l: 3.0 * (l == "A") + 2.0 * (l in named) for l in letters}
            z = math.log(sum(math.exp(v) for v in raw.values()))
            out.append({l: v - z for l, v in raw.items()})
        return out


def test_reads_follow_the_named_text_not_the_letter():
    policy = NamingPolicy()
    steps = ("Think of collagen.", "Vitamin C builds collagen.", "Vitamin K clots blood.", "So the answer is (D).")
    items = [Item(f"q1/t0/s{k}", Q, 0, steps[:k]) for k in range(1, 5)]
    docs = [[("Scurvy", "Vitamin C deficiency causes scurvy.")]] * 4
    out = goldprob_labels(LabelConfig(), policy, items, docs)
    assert out[0]["p_gold_before"] == pytest.approx(0.25) and out[0]["goldprob_dp"] == pytest.approx(0)
    assert out[1]["goldprob_label"] == 1 and out[1]["p_gold"] > 0.4        # names the gold text
    assert out[2]["goldprob_label"] == 0 and out[2]["p_gold"] < 0.25       # names a wrong one
    assert out[3]["p_gold"] == out[3]["p_gold_docs"] == 0.0 and out[3]["goldprob_dm"] == 0   # answers D: wrong
    for prev, nxt in zip(out, out[1:]):
        assert nxt["p_gold_before"] == prev["p_gold"]
    # One read per distinct state (p_0 and steps 1-3, with and without documents) and rotation: the
    # step before step k is never read twice, and an answering step needs no read.
    assert len(policy.asked) == (1 + 3 + 3) * 4 == len(set(policy.asked))
    assert sum("Vitamin C deficiency" in p for p in policy.asked) == 3 * 4


def test_stats_report_goldprob_balance_and_agreement():
    rec = lambda q, dp, dm, jl: {"question_id": q, "trace": 0, "goldprob_dp": dp, "goldprob_label": int(dp > 0),
                                 "p_gold": 0.25 + dp, "goldprob_dm": dm, "judge_label": jl, "dm": 1.0}
    stats = label_stats([rec("a", 0.1, 0.5, 1), rec("a", -0.1, 0.1, 1), rec("b", 0.3, 2.0, 0)])
    assert stats["goldprob_positive"] == round(2 / 3, 4) and stats["goldprob_mean_dp"] == round(0.1, 4)
    assert stats["goldprob_search_share"] == round(1 / 3, 4) and stats["median_abs_goldprob_dm"] == 0.5
    assert stats["judge_goldprob_agreement"] == round(1 / 3, 4) and "judge_rollout_agreement" not in stats


def test_examples_from_goldprob_alone(tmp_path):
    rows, dms = [], [0.1, 2.0, -3.0, 0.2]         # median |dm| 1.05: steps 2 and 3 are search steps
    for k, (dp, dm) in enumerate(zip([0.2, -0.1, 0.05, 0.0], dms), 1):
        rows.append({"id": f"q1/t0/s{k}", "question_id": "q1", "trace": 0, "step_index": k,
                     "question": Q.question, "options": Q.options, "gold": "B", "steps": [f"s{j}" for j in range(1, k)],
                     "step": f"s{k}", "docs": [["Scurvy", "Vitamin C."]],
                     **goldprob_fields(0.25, 0.25 + dp, 0.25), "goldprob_dm": dm})
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    margin = load_examples(path, "goldprob", "margin")
    assert [(e.id, e.reward, e.search) for e in margin] == [
        ("q1/t0/s1", 1.0, 0), ("q1/t0/s2", 0.0, 1), ("q1/t0/s2+docs", 0.0, 1), ("q1/t0/s3", 1.0, 1),
        ("q1/t0/s3+docs", 1.0, 1), ("q1/t0/s4", 0.0, 0)]
    soft = load_examples(path, "goldprob_soft", "always", without_docs=False)
    assert [e.reward for e in soft] == pytest.approx([0.6, 0.45, 0.525, 0.5])
    with pytest.raises(ValueError, match="judge.s margin shift"):
        load_examples(path, "judge", "margin")


@pytest.fixture(scope="module")
def bm25():
    from corpora.retrieval import load_retriever
    return load_retriever("medcorp-mini", mode="bm25")


def test_goldprob_run_on_smollm2_is_resumable(smollm2, bm25, tmp_path):
    cfg = LabelConfig(limit=2, out=str(tmp_path), max_steps=2, step_tokens=12, teachers=["goldprob"], docs=2, chunk=1)
    stats = run_label(cfg, policy=smollm2, retriever=bm25)
    labels = tmp_path / "labels.jsonl"
    first = list(read_records(labels))
    assert stats["steps"] == len(first) >= 2 and 0 <= stats["goldprob_positive"] <= 1
    by_id = {r["id"]: r for r in first}
    for r in first:
        assert r["teacher"] == {"goldprob": smollm2.name} and "judge_label" not in r and "soft_label" not in r
        assert all(0.0 <= r[k] <= 1.0 for k in ("p_gold_before", "p_gold", "p_gold_docs", "goldprob_soft"))
        assert r["goldprob_dp"] == pytest.approx(r["p_gold"] - r["p_gold_before"])
        assert r["goldprob_label"] == int(r["goldprob_dp"] > 0) and math.isfinite(r["goldprob_dm"])
        prev = by_id.get(f"{r['question_id']}/t{r['trace']}/s{r['step_index'] - 1}")
        if prev:
            assert r["p_gold_before"] == prev["p_gold"]
        else:       # before the first step: the question alone, near chance for a 135M policy
            assert 0.1 < r["p_gold_before"] < 0.5
    kept = [r for r in first if r["question_id"] == first[0]["question_id"]]
    labels.write_text("".join(json.dumps(r) + "\n" for r in kept) + '{"id": "torn')
    assert run_label(cfg, policy=smollm2, retriever=bm25) == stats
    second = list(read_records(labels))
    assert sorted(r["id"] for r in second) == sorted(by_id) and len(second) == len({r["id"] for r in second})
    for r in second:       # the re-labelled question reads the same probabilities (same batch shapes aside)
        assert r["p_gold"] == pytest.approx(by_id[r["id"]]["p_gold"], abs=1e-4)
