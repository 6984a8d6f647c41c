"""Teacher labelling: the margin maths on known log-probs, and tiny resumable runs on SmolLM2."""
import json
import math
from dataclasses import replace

import pytest

from pra.prompts import policy_prompt_id
from pra.records import read_records
from training.config import LabelConfig, load_config
from training.label import judge_fields, label_stats, margin, run_label, search_labels, with_search_labels


def lp(p1: float) -> dict[str, float]:
    return {"0": math.log(1 - p1), "1": math.log(p1)}


def test_margin_shift_on_known_logprobs():
    f = judge_fields(lp(0.8), lp(0.1))           # documents turn the judge from "correct" to "incorrect"
    assert f["m"] == pytest.approx(math.log(4)) and f["m_docs"] == pytest.approx(math.log(1 / 9))
    assert f["dm"] == pytest.approx(math.log(36)) and f["judge_label"] == 0   # the label is the judgement with docs
    assert judge_fields(lp(0.1), lp(0.7))["judge_label"] == 1
    shifted = {k: v - 3.0 for k, v in lp(0.8).items()}                          # unnormalised: same margin
    assert margin(shifted) == pytest.approx(margin(lp(0.8)))


def test_search_label_is_above_the_median_abs_shift():
    assert search_labels([0.1, -2.0, 3.0, -0.5, 0.05]) == ([0, 1, 1, 0, 0], 0.5)
    assert search_labels([1.0, -4.0, 2.0, -3.0]) == ([0, 1, 0, 1], 2.5)
    records = [{"id": str(i), "dm": d} for i, d in enumerate([0.1, -2.0, 3.0])] + [{"id": "r"}]
    assert [r.get("search_label") for r in with_search_labels(records)] == [0, 0, 1, None]


def test_stats():
    rec = lambda q, t, jl, dm, soft: {"question_id": q, "trace": t, "judge_label": jl, "dm": dm,
                                      "soft_label": soft, "rollout_label": int(soft >= 0.5)}
    stats = label_stats([rec("a", 0, 1, 0.2, 1.0), rec("a", 0, 0, -1.0, 0.0), rec("b", 0, 1, 3.0, 0.25)])
    assert stats["steps_per_trace"] == 1.5 and stats["judge_positive"] == round(2 / 3, 4)
    assert stats["search_share"] == round(1 / 3, 4) and stats["median_abs_dm"] == 1.0
    assert stats["rollout_positive"] == round(1 / 3, 4) and stats["judge_rollout_agreement"] == round(2 / 3, 4)


def test_evaluation_sets_are_refused(tmp_path):
    with pytest.raises(ValueError, match="evaluation set"):
        run_label(LabelConfig(benchmark="medmcqa-eval", out=str(tmp_path)))


@pytest.fixture(scope="module")
def bm25():
    from corpora.retrieval import load_retriever
    return load_retriever("medcorp-mini", mode="bm25")


def test_tiny_labelling_run_is_resumable(smollm2, bm25, tmp_path):
    cfg = LabelConfig(limit=2, out=str(tmp_path), max_steps=2, step_tokens=12, rollouts=2, rollout_steps=1,
                      docs=2, chunk=1)
    stats = run_label(cfg, policy=smollm2, retriever=bm25)
    labels = tmp_path / "labels.jsonl"
    first = list(read_records(labels))
    assert stats["steps"] == len(first) >= 2 and stats["questions"] == 2
    for r in first:
        assert r["teacher"] == {"judge": smollm2.name, "rollout": smollm2.name, "rollouts": 2}
        assert r["dm"] == pytest.approx(r["m"] - r["m_docs"]) and r["judge_label"] == int(r["m_docs"] > 0)
        assert math.exp(r["logp"]["0"]) + math.exp(r["logp"]["1"]) == pytest.approx(1.0)
        assert len(r["rollout_answers"]) == 2 and r["soft_label"] in (0.0, 0.5, 1.0) and 1 <= len(r["docs"]) <= 2
        assert r["options"][r["gold"]] and r["step"] and len(r["steps"]) == r["step_index"] - 1
    assert 0.0 <= stats["search_share"] <= 0.5
    # Stopped while writing the second question: its records are gone and the last line is torn.
    kept = [r for r in first if r["question_id"] == first[0]["question_id"]]
    labels.write_text("".join(json.dumps(r) + "\n" for r in kept) + '{"id": "torn')
    again = run_label(cfg, policy=smollm2, retriever=bm25)
    second = list(read_records(labels))
    assert [r["id"] for r in second] == [r["id"] for r in kept] + [r["id"] for r in first if r not in kept]
    assert {r["id"]: r["step"] for r in second} == {r["id"]: r["step"] for r in first}   # the traces stayed
    assert again == stats
    calls = smollm2.stats.calls
    run_label(cfg, policy=smollm2, retriever=bm25)               # nothing left: no model call at all
    assert smollm2.stats.calls == calls and len(list(read_records(labels))) == len(first)
    with pytest.raises(ValueError, match="other settings"):
        run_label(replace(cfg, rollouts=3), policy=smollm2, retriever=bm25)
    # The policy prompt its teachers read is recorded with the settings' fingerprint; a label set made
    # with another prompt is refused.
    settings = tmp_path / "label_config.json"
    recorded = json.loads(settings.read_text())
    assert recorded["policy_prompt"] == {k: policy_prompt_id(True, k) for k in ("steps", "docs")}
    assert len(recorded["fingerprint"]) == 16
    settings.write_text(json.dumps({**recorded, "policy_prompt": {"steps": "chat-0", "docs": "chat-0"}}))
    with pytest.raises(ValueError, match=r"other settings: they differ in policy_prompt.docs \(.*policy_prompt.steps"):
        run_label(cfg, policy=smollm2, retriever=bm25)


def test_each_block_is_labelled_before_the_next_is_traced(smollm2, bm25, tmp_path):
    """A stop loses at most the block in hand: the first block's steps are labelled while the traces
    file holds that block only."""
    traced_at_retrieval = []

    class Watching:
        def retrieve(self, queries, k):
            traced_at_retrieval.append(len(list(read_records(tmp_path / "traces.jsonl"))))
            return bm25.retrieve(queries, k)

    cfg = LabelConfig(limit=2, out=str(tmp_path), max_steps=1, step_tokens=8, teachers=["judge"], docs=1,
                      chunk=1, block=1)
    stats = run_label(cfg, policy=smollm2, retriever=Watching())
    assert traced_at_retrieval == [1, 2] and stats["questions"] == 2
    with pytest.raises(ValueError, match="--block"):
        load_config(LabelConfig, "label", None, {"block": 0})


def test_the_flags_choices_are_what_training_and_retrieval_read():
    from eval.checks import RETRIEVAL_MODES
    from training import config
    from training.dataset import REWARD_LABELS, SEARCH_LABELS

    assert config.REWARD_LABEL_NAMES == tuple(REWARD_LABELS) and config.SEARCH_LABEL_NAMES == tuple(SEARCH_LABELS)
    assert config.RETRIEVAL_MODES == RETRIEVAL_MODES
