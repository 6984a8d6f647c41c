"""PULSE: feature maths, extraction shapes and pooling, the probe, detection metrics, the controller in
the engine, and PULSE decoding on the embedded SmolLM2."""
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from pra.backends.base import render_chat
from pra.pulse.baselines import baseline_scores, coe_scores
from pra.pulse.dataset import StepTable, load_features, write_features
from pra.pulse.extract import StepReader, StepReadout, step_text
from pra.pulse.features import Trajectory, pulse_features, trajectory
from pra.pulse.metrics import detection_metrics, youden_threshold
from pra.pulse.probe import Probe, ProbeConfig, mlp, train_probe
from pra.prompts import steps_prefix
from search.controllers import Pulse, make_controller
from search.engine import Engine, SearchConfig, Trace
from tests.fakes import FixedRetriever, ScriptedPolicy, TableRewardAgent, tiny_llama
from tests.test_engine import q


# -- feature maths -----------------------------------------------------------------------------------

def test_angle_and_magnitude_changes_on_known_vectors():
    # layers 0..3: (1,0) -> (0,2) -> (0,3) -> (3,0): angles pi/2, 0, pi/2; norms 1, 2, 3, 3
    states = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [0.0, 3.0], [3.0, 0.0]]])
    t = trajectory(states)
    assert np.allclose(t.norm, [[1, 2, 3, 3]])
    assert np.allclose(t.angle, [[math.pi / 2, 0, math.pi / 2]], atol=1e-6)
    assert np.allclose(t.shift, [[math.sqrt(5), 1, math.sqrt(18)]])
    assert np.allclose(t.end_angle, [0.0], atol=1e-6) and np.allclose(t.end_shift, [2.0])
    assert np.allclose(pulse_features(t, (0, 3)), [[math.pi / 2, 0, math.pi / 2, 1, 1, 0]], atol=1e-6)
    assert np.allclose(pulse_features(t, (1, 3), "angle"), [[0, math.pi / 2]], atol=1e-6)
    assert np.allclose(pulse_features(t, (1, 3), "magnitude"), [[1, 0]])
    # scale-free angles: the same directions at ten times the size turn by the same angles
    assert np.allclose(trajectory(states * 10).angle, t.angle, atol=1e-6)
    with pytest.raises(ValueError, match="0 <= a < b <= 3"):
        pulse_features(t, (2, 4))
    with pytest.raises(ValueError, match="parts"):
        pulse_features(t, (0, 3), "norms")


def test_coe_scores_on_a_straight_and_a_turning_path():
    straight = trajectory(torch.tensor([[[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]]]))
    coe_r, coe_c = coe_scores(straight)
    # equal steps along one line: M_l = 1/2 each, no angle (0/0 is taken as 0)
    assert np.allclose(coe_r, [0.5]) and np.allclose(coe_c, [0.5])
    scores = baseline_scores(np.array([0.0]), np.array([0.9]), np.array([0.1]), straight)
    assert np.allclose(scores["perplexity"], [1.0]) and np.allclose(scores["max_prob"], [-0.9])


# -- extraction on a tiny random model -------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny():
    """A 4-layer random Llama with SmolLM2's (fast) tokenizer, as a backend-like object."""
    model, tok = tiny_llama(layers=4)
    model.eval()
    return SimpleNamespace(name="tiny", model=model, tokenizer=tok, has_chat_template=True,
                           render=lambda messages, prefix="": render_chat(tok, messages, prefix))


def test_step_text_matches_the_policy_prefix_and_locates_each_step():
    steps = ["Scurvy is vitamin C deficiency.", "So the answer is (C)."]
    item = step_text("HEAD\n", steps)
    assert item.text == "HEAD\n" + steps_prefix(steps, None)
    assert [item.text[a:b] for a, b in item.spans] == steps
    noted = step_text("H\n", steps, [None, "Evidence: x"])
    assert noted.text == "H\nStep 1: " + steps[0] + "\nEvidence: x\nStep 2: " + steps[1]


def test_readouts_pool_the_step_tokens_at_every_layer(tiny):
    reader = StepReader(tiny.model, tiny.tokenizer, special_tokens=False, batch_size=4)
    short = step_text("Question: what?\n", ["A fact about the liver.", "Another fact."])
    longer = step_text("Question: a much longer head that pads the other row.\n", ["One step only here."])
    (a, b), (c,) = reader.read([short, longer], token_stats=True)
    assert a.trajectories["last"].norm.shape == (1, 5) and a.trajectories["mean"].angle.shape == (1, 4)
    assert a.tokens > 1 and a.nll > 0 and 0 < a.max_prob <= 1 and a.entropy > 0
    # pooling by hand on the same forward pass: last token, and mean over the step's tokens
    ids, spans = reader._token_spans(short)
    with torch.no_grad():
        hs = tiny.model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
    (s0, e0), (s1, e1) = spans
    assert tiny.tokenizer.decode(ids[s1:e1]).strip() == "Another fact."
    states = torch.stack([h[0] for h in hs])                       # [L+1, T, d]
    assert np.allclose(b.trajectories["last"].norm[0], states[:, e1 - 1].norm(dim=-1).numpy(), atol=1e-4)
    assert np.allclose(a.trajectories["mean"].norm[0], states[:, s0:e0].mean(1).norm(dim=-1).numpy(), atol=1e-4)
    # batched with padding = alone; only_last reads the last step only
    ((alone,),) = reader.read([longer])
    assert np.allclose(alone.trajectories["last"].angle, c.trajectories["last"].angle, atol=1e-5)
    ((last,),) = reader.read([short], only_last=True)
    assert np.allclose(last.trajectories["mean"].norm, b.trajectories["mean"].norm, atol=1e-5)
    # candidates of one beam share the head, which runs once: the same readouts as one by one
    head = "Question: which vitamin deficiency causes scurvy, and what are its signs?\n"
    beam = [step_text(head, ["Collagen needs vitamin C.", x]) for x in ("So (C).", "It is iron, so (A).")]
    together = reader.read(beam, token_stats=True)
    for item, got in zip(beam, together):
        (alone,) = reader.read([item], token_stats=True)
        for x, y in zip(alone, got):
            assert np.allclose(x.trajectories["mean"].angle, y.trajectories["mean"].angle, atol=1e-5)
            assert np.allclose(x.trajectories["last"].norm, y.trajectories["last"].norm, rtol=1e-5)
            assert abs(x.nll - y.nll) < 1e-4 and abs(x.entropy - y.entropy) < 1e-4
    # over an interval [a, b]: b - a angles and b - a magnitude changes
    assert pulse_features(b.trajectories["last"], (1, 4)).shape == (1, 6)
    assert pulse_features(b.trajectories["last"], (2, 3), "angle").shape == (1, 1)


def _label_records(n_questions: int) -> list[dict]:
    out = []
    for i in range(n_questions):
        steps = [f"Fact {i} about nerves.", f"More on {i}.", "So the answer is (A)."]
        for k in range(1, 4):
            out.append({"id": f"q{i}/t0/s{k}", "question_id": f"q{i}", "trace": 0, "step_index": k,
                        "question": f"Question {i}?", "options": {"A": "a", "B": "b"}, "gold": "A",
                        "steps": steps[:k - 1], "step": steps[k - 1], "judge_label": int(k != 2),
                        "rollout_label": 1, "goldprob_label": int(k == 3)})
    return out


def test_feature_file_from_labels_resumes_and_reads_back(tiny, tmp_path):
    labels = tmp_path / "labels" / "labels.jsonl"
    labels.parent.mkdir()
    labels.write_text("".join(json.dumps(r) + "\n" for r in _label_records(3)))
    out = tmp_path / "features.jsonl"
    assert write_features(tiny, labels, out, batch_size=2) == 9
    assert write_features(tiny, labels, out, batch_size=2) == 0          # resumed: nothing left
    table = load_features(out)
    assert len(table) == 9 and table.backbone == "tiny" and table.purpose == "train"
    assert table.errors("judge").tolist() == [0, 1, 0] * 3
    assert table.errors("goldprob").tolist() == [1, 1, 0] * 3              # a step that did not raise p(gold)
    assert table.trajectories["last"].norm.shape == (9, 5) and not np.isnan(table.nll).any()
    # labels marked for detection give features that training refuses
    (labels.parent / "label_config.json").write_text(json.dumps({"purpose": "detection"}))
    write_features(tiny, labels, tmp_path / "detect.jsonl")
    with pytest.raises(ValueError, match="detection-only"):
        train_probe(load_features(tmp_path / "detect.jsonl"), ProbeConfig(layers=(1, 3)))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({k: v for k, v in _label_records(1)[0].items() if k != "options"}) + "\n")
    with pytest.raises(ValueError, match="field 'options'"):
        write_features(tiny, bad, tmp_path / "x.jsonl")


# -- the probe and the metrics ---------------------------------------------------------------------------

def synthetic_table(n: int, seed: int, purpose: str = "train") -> StepTable:
    """Errors (a quarter of the steps) turn further between layers 4 and 8; norms are noise."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.25).astype(int)
    angle = rng.normal(0.5, 0.1, (n, 10)) + 0.3 * y[:, None] * (np.arange(10) >= 4)
    norm = rng.normal(10, 1, (n, 11))
    t = Trajectory(norm, angle, np.abs(rng.normal(1, 0.1, (n, 10))), rng.random(n) + 0.5, rng.random(n) + 1)
    qids = np.array([f"{seed}-{i // 2}" for i in range(n)])
    return StepTable(None, "synthetic", purpose, [f"s{i}" for i in range(n)], qids,
                     {"judge": 1 - y, "rollout": 1 - y, "goldprob": 1 - y}, {"last": t, "mean": t},
                     rng.random(n), rng.random(n), rng.random(n))


def test_probe_beats_chance_on_separable_data_and_round_trips(tmp_path):
    train, test = synthetic_table(400, 0), synthetic_table(200, 1)
    probe = train_probe(train, ProbeConfig(layers=(2, 9), max_epochs=100, patience=10))
    assert probe.layers == (2, 9) and probe.net[0].in_features == 14
    assert [m.out_features for m in probe.net if isinstance(m, torch.nn.Linear)] == [128, 64, 1]
    m = detection_metrics(test.errors("judge"), probe.score(test.trajectories["last"]), probe.threshold)
    assert m["auroc"] > 0.9 and m["f1"] > 0.6
    probe.save(tmp_path / "p.pt")
    again = Probe.load(tmp_path / "p.pt")
    assert (again.backbone, again.layers, again.pooling, again.parts, again.threshold) == \
           ("synthetic", (2, 9), "last", "both", probe.threshold)
    assert np.allclose(again.score(test.trajectories["last"]), probe.score(test.trajectories["last"]))
    # magnitude only carries no signal here
    flat = train_probe(train, ProbeConfig(layers=(2, 9), parts="magnitude", max_epochs=30, patience=5))
    assert detection_metrics(test.errors("judge"), flat.score(test.trajectories["last"]), 0.5)["auroc"] < 0.7


def test_probe_training_needs_both_kinds_of_step():
    table = synthetic_table(50, 0)
    table.teacher["judge"][:] = 1
    with pytest.raises(ValueError, match="needs both kinds"):
        train_probe(table, ProbeConfig(layers=(2, 9)))


def test_youden_threshold_and_f1():
    y = np.array([0, 0, 0, 1, 1])
    s = np.array([0.1, 0.2, 0.3, 0.8, 0.9])
    assert youden_threshold(y, s) == 0.8
    m = detection_metrics(y, s, 0.8)
    assert m["auroc"] == 1.0 and m["pr_auc"] == 1.0 and m["f1"] == 1.0 and m["positives"] == 2
    with pytest.raises(ValueError, match="both"):
        youden_threshold(np.zeros(3), s[:3])


def test_detection_evaluation_orients_baselines_on_validation():
    from eval.analysis.pulse_detect import evaluate_detection, markdown

    train, test = synthetic_table(300, 0), synthetic_table(100, 1)
    probe = train_probe(train, ProbeConfig(layers=(2, 9), max_epochs=50, patience=5))
    rows = evaluate_detection(probe, train, {"held-out": test})
    assert [r["score"].split(" ")[0] for r in rows] == ["pulse", "perplexity", "max_prob", "entropy", "coe_r", "coe_c"]
    assert rows[0]["auroc"] > 0.9 and all(r["n"] == 100 for r in rows)
    assert "| held-out | pulse both 2:9 last |" in markdown(rows)
    with pytest.raises(ValueError, match="also in the training"):
        evaluate_detection(probe, train, {"same": train}, with_baselines=False)


# -- the controller in the engine --------------------------------------------------------------------

class MarkReader:
    """Stands in for the hidden states: a step's first-layer angle is 1 if it says "wrong", else 0."""

    def __init__(self):
        self.items = []

    def read(self, items, token_stats=False, only_last=False):
        self.items.append(items)
        out = []
        for it in items:
            a, b = it.spans[-1]
            hit = float("wrong" in it.text[a:b])
            t = Trajectory(np.ones((1, 3)), np.array([[hit, 0.0]]), np.ones((1, 2)), np.zeros(1), np.ones(1))
            out.append([StepReadout({"last": t, "mean": t}, tokens=1)])
        return out


def test_pulse_controller_searches_only_for_flagged_candidates():
    # the root's three candidates: fine, wrong, and an empty step (the trace ends: nothing to read)
    policy = ScriptedPolicy(lambda qt, step, i: ["a fine claim", "a wrong claim", ""][i] if step == 1
                            else "the answer is (B)")
    probe = SimpleNamespace(pooling="last", score=lambda t: t.angle[:, 0])
    reader = MarkReader()
    controller = Pulse(probe, reader, policy.render, chat=False, threshold=0.5)
    retriever = FixedRetriever()
    engine = Engine(policy, SearchConfig(beam_width=3, branching=1, max_steps=2),
                    reward_agent=TableRewardAgent({}), retriever=retriever, controller=controller)
    (t,) = engine.run([Trace(q(0))])
    first = reader.items[0]
    assert len(first) == 2                       # the two non-empty candidates, read in one batch
    assert "Question: question 0" in first[0].text and first[1].text.endswith("Step 1: a wrong claim")
    assert t.stats["searches"] == 1 and len(retriever.queries) == 1 and "a wrong claim" in retriever.queries[0]
    searched = [c.steps[0] for c in t.beam if c.steps[0].text == "a wrong claim"]
    assert searched and searched[0].searched and searched[0].doc_ids == ["doc1"]
    assert t.prediction == "B"


def test_pulse_spec_checks_the_probe_file_and_its_backbone(tmp_path):
    probe = Probe("smollm2-135m-instruct", (1, 3), "last", "both", "judge", 0.4, np.zeros(4, np.float32),
                  np.ones(4, np.float32), mlp(4, (128, 64)), (128, 64))
    probe.save(tmp_path / "p.pt")
    with pytest.raises(ValueError, match="probe trained on smollm2-135m-instruct"):
        make_controller(f"pulse:{tmp_path / 'p.pt'}", policy=SimpleNamespace(name="gemma3-270m"))
    with pytest.raises(FileNotFoundError, match="no probe file"):
        make_controller(f"pulse:{tmp_path / 'missing.pt'}:0.3", policy=SimpleNamespace(name="x"))
    with pytest.raises(ValueError, match="needs the probe file"):
        make_controller("pulse:", policy=SimpleNamespace(name="x"))


# -- PULSE decoding on the embedded model -------------------------------------------------------------------

@pytest.fixture(scope="module")
def bm25():
    from corpora.retrieval import load_retriever
    return load_retriever("medcorp-mini", mode="bm25")


@pytest.mark.slow
@pytest.mark.parametrize("method", ["pulse-front", "pulse-step", "ircot"])
def test_pulse_decoding_on_smollm2(smollm2, bm25, tmp_path, method):
    from eval.run import EvalConfig, run_eval

    n = smollm2.model.config.num_hidden_layers
    probe = Probe("smollm2-135m-instruct", (n - 4, n - 1), "last", "both", "judge", 0.5,
                  np.zeros(6, np.float32), np.ones(6, np.float32), mlp(6, (128, 64)), (128, 64))
    probe.save(tmp_path / "probe.pt")
    # threshold 0 flags every step: each one is retrieved for and regenerated
    cfg = EvalConfig(method=method, limit=2, out=str(tmp_path / "run"), search_controller=f"pulse:{tmp_path / 'probe.pt'}:0",
                     search=SearchConfig(max_steps=2, step_tokens=12))
    summary = run_eval(cfg, policy=smollm2, retriever=bm25)
    records = [json.loads(l) for l in open(tmp_path / "run" / "records.jsonl")]
    assert summary["n"] == 2 and all(r["prediction"] in "ABCD" for r in records)
    for r in records:
        docs = [d for s in r["steps"] for d in s["doc_ids"]]
        assert len(docs) == len(set(docs))                      # a passage is used once per question
        if method == "ircot":
            assert len(r["context"]) >= 1 and all(f["score"] is None for f in r["pulse"])
        else:
            assert all(f["flagged"] and 0 <= f["score"] <= 1 for f in r["pulse"])
            assert all(s["searched"] and len(s["doc_ids"]) == 1 for s in r["steps"])
            assert all("replaced" in f for f in r["pulse"]) and r["stats"]["searches"] == len(r["steps"])
            assert (len(r["context"]) == len(r["steps"])) == (method == "pulse-front")


# -- detection-only labels on evaluation sets ------------------------------------------------------------

def test_detection_labels_are_explicit_and_marked(tmp_path):
    from pra.pulse.dataset import labels_purpose
    from training.config import LabelConfig
    from training.label import run_label

    with pytest.raises(ValueError, match="not an evaluation set"):
        run_label(LabelConfig(benchmark="medmcqa-train", out=str(tmp_path)), purpose="detection")
    policy = ScriptedPolicy(lambda qt, step, i: "a fact" if step == 1 else "the answer is (A)")
    cfg = LabelConfig(benchmark="medmcqa-eval", limit=2, out=str(tmp_path / "d"), teachers=["judge"])
    stats = run_label(cfg, policy=policy, judge=policy, retriever=FixedRetriever(), purpose="detection")
    assert stats["steps"] == 4 and stats["questions"] == 2
    assert labels_purpose(tmp_path / "d" / "labels.jsonl") == "detection"
