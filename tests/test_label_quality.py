"""The label-quality reference: rotated rollouts cancel a letter preference exactly, answering states
are their own outcome, and the per-teacher report reads agreement and AUROC against the reference."""
import json

import pytest

from pra.benchmarks import load_benchmark
from pra.errors import UserError
from pra.types import Question
from tests.fakes import ScriptedPolicy
from training.config import LabelConfig
from training.label_quality import quality, reference_shares

Q = Question("q1", "Which vitamin prevents scurvy?",
             {"A": "Vitamin A", "B": "Vitamin C", "C": "Vitamin D", "D": "Vitamin K"}, "B", "train")


def test_rotated_rollouts_score_a_letter_preference_at_chance():
    policy = ScriptedPolicy(lambda *_: "Think about it.", force="A")    # never answers; forced: always A
    cfg = LabelConfig(rollout_steps=1, temperature=0.7)
    got = reference_shares(cfg, policy, [(Q, ()), (Q, ("Vitamin C.",)), (Q, ("So the answer is (B).",)),
                                         (Q, ("So the answer is (A).",))], rollouts=16)
    assert [g["share"] for g in got] == [0.25, 0.25, 1.0, 0.0]
    assert [len(a["answers"]) for a in got[0]["answers"]] == [4, 4, 4, 4]     # 16 = 4 per rotation
    assert {a["rotation"] for a in got[0]["answers"]} == {"q1", "q1@r1", "q1@r2", "q1@r3"}


QID = load_benchmark("medmcqa-train", limit=1).questions[0].id


def record(step_index: int, step: str, **labels) -> dict:
    steps = ["a", "b", "c"][:step_index - 1]
    return {"id": f"q1/t0/s{step_index}", "question_id": "q1", "trace": 0, "step_index": step_index,
            "options": Q.options, "gold": "B", "steps": steps, "step": step, **labels}


def test_report_per_teacher():
    # reference after each state: () 0.25, a 0.5, a b 0.1875, a b c 0.4, then an answering step (wrong)
    shares = {("q1", ()): 0.25, ("q1", ("a",)): 0.5, ("q1", ("a", "b")): 0.1875, ("q1", ("a", "b", "c")): 0.4,
              ("q1", ("a", "b", "c", "So the answer is (A).")): 0.0}
    gold = lambda dp: {"goldprob_dp": dp, "goldprob_label": int(dp > 0)}
    records = [record(1, "a", **gold(0.1)), record(2, "b", **gold(-0.2)), record(3, "c", **gold(0.05)),
               record(4, "So the answer is (A).", **gold(-0.3))]
    report = quality(records, shares)
    every, open_steps = report["all_steps"], report["steps_without_answer"]
    assert (every["steps"], open_steps["steps"]) == (4, 3)
    assert every["reference"]["value_positive"] == 0.5 and every["reference"]["rise_positive"] == 0.5
    assert open_steps["reference"]["value_constant_agreement"] == round(2 / 3, 4)    # 2 of 3 open steps: value 1
    # one question: no interval (each resample would be that question)
    assert every["goldprob"]["rise"] == {"agreement": 1.0, "auroc": 1.0, "auroc_ci95": None}
    assert every["goldprob"]["value"]["agreement"] == 1.0 and open_steps["goldprob"]["positive"] == round(2 / 3, 4)
    assert "judge" not in every and "rollout" not in every and "auroc_differences" not in every
    records[1] = record(2, "b", **gold(0.2))            # now it calls the falling step a rise
    assert quality(records, shares)["all_steps"]["goldprob"]["rise"]["agreement"] == 0.75
    # a second teacher that ranks every rise below every fall (AUROC 0), goldprob now 0.5 against rise
    for r, m in zip(records, (-1.0, 0.5, -0.5, 1.0)):
        r.update(m_docs=m, judge_label=int(m > 0))
    diff = quality(records, shares)["all_steps"]["auroc_differences"]
    assert list(diff) == ["goldprob - judge"] and diff["goldprob - judge"]["rise"] == {"difference": 0.5, "ci95": None}


def labelled_folder(tmp_path, name: str, steps: list[str], **labels):
    """A labels folder as ``pra label`` leaves it: label_config.json (with its fingerprint), traces, labels."""
    from training.label import _check_settings
    folder = tmp_path / name
    folder.mkdir()
    _check_settings(folder / "label_config.json", LabelConfig(out=str(folder), benchmark="medmcqa-train", limit=2,
                                                              rollout_steps=1), "training", chat=False)
    (folder / "traces.jsonl").write_text(json.dumps({"id": QID, "traces": [{"steps": steps, "answer": None}]}) + "\n")
    (folder / "labels.jsonl").write_text("".join(
        json.dumps({**record(k, s), "question_id": QID, "id": f"{QID}/t0/s{k}", **labels}) + "\n"
        for k, s in enumerate(steps, 1)))
    return folder


def test_reference_reads_the_settings_pra_label_wrote_and_merges_teachers_over_the_same_traces(tmp_path, monkeypatch):
    import training.label_quality as lq
    monkeypatch.setattr(lq, "_backend", lambda *a: ScriptedPolicy(lambda *_: "Think.", force="A"))
    gold = labelled_folder(tmp_path, "gold", ["a", "b"], goldprob_dp=0.1, goldprob_label=1)
    second = load_benchmark("medmcqa-train", limit=2).questions[1].id     # its trace finished first
    traces = gold / "traces.jsonl"
    traces.write_text(json.dumps({"id": second, "traces": [{"steps": ["x"], "answer": None}]}) + "\n" + traces.read_text())
    judge = labelled_folder(tmp_path, "judge", ["a", "b"], m_docs=0.5, judge_label=1)
    report = lq.main([str(gold / "labels.jsonl"), str(judge / "labels.jsonl"), "--questions", "1", "--rollouts", "4"])
    assert report["all_steps"]["steps"] == 2
    assert {"goldprob", "judge"} <= set(report["all_steps"]) and "rollout" not in report["all_steps"]
    assert set(report["all_steps"]["auroc_differences"]) == {"goldprob - judge"}
    assert [json.loads(line)["id"] for line in (gold / "reference-r4-s1.jsonl").open()] == [QID]   # the benchmark's first
    assert (gold / "label_quality.json").is_file()
    other = labelled_folder(tmp_path, "other", ["a", "c"], m_docs=0.5, judge_label=1)
    with pytest.raises(UserError, match="same traces"):
        lq.main([str(gold / "labels.jsonl"), str(other / "labels.jsonl"), "--questions", "1", "--rollouts", "4"])
