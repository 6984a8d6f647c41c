"""Reward-agent training on 8 synthetic labelled steps: examples, loss, checkpoints, the saved adapter."""
import json
from dataclasses import replace

import pytest
import torch

import training.train as train_module
from pra.records import read_records
from pra.reward_agent import RewardAgent, load_reward_agent, two_way
from training.config import TrainConfig
from training.dataset import encode, load_examples, split_by_question
from training.train import slot_logits, train

DMS = [0.1, 2.0, 0.2, 3.0, 0.3, 4.0, 0.4, 5.0]     # median |dm| 1.2: every second step is a search step


def write_labels(path):
    rows = []
    for qi in range(4):
        steps = ["Scurvy comes from a lack of vitamin C.", f"So the answer is ({'B' if qi % 2 else 'A'})."]
        for si, step in enumerate(steps, 1):
            label = 1 if si == 1 or qi % 2 else 0
            rows.append({"id": f"q{qi}/t0/s{si}", "question_id": f"q{qi}", "trace": 0, "step_index": si,
                         "question": f"Which vitamin prevents scurvy ({qi})?",
                         "options": {"A": "Vitamin A", "B": "Vitamin C"}, "gold": "B",
                         "steps": steps[:si - 1], "step": step, "docs": [["Vitamin C", "Ascorbic acid prevents scurvy."]],
                         "judge_label": label, "dm": DMS[2 * qi + si - 1], "soft_label": 0.75 * label})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def labels(tmp_path_factory):
    return write_labels(tmp_path_factory.mktemp("labels") / "labels.jsonl")


def test_examples_follow_what_the_engine_reads(labels):
    always = load_examples(labels, "judge", "always")
    assert len(always) == 8 and all(e.request.docs and e.search == 1 for e in always)
    margin = load_examples(labels, "judge", "margin")
    plain = [e for e in margin if not e.request.docs]
    with_docs = [e for e in margin if e.request.docs]
    assert len(plain) == 8 and [e.search for e in plain] == [0, 1] * 4         # first read: no documents
    assert [e.id for e in with_docs] == [f"q{i}/t0/s2+docs" for i in range(4)]   # re-read after a search
    step2 = next(e for e in plain if e.id == "q0/t0/s2")
    assert step2.request.steps == ("Scurvy comes from a lack of vitamin C.",) and step2.request.rewards == (1.0,)
    assert [e.reward for e in load_examples(labels, "soft")][:2] == [0.75, 0.0]
    with pytest.raises(ValueError, match="rollout_label"):
        load_examples(labels, "rollout")
    train_set, val_set = split_by_question(margin, 0.25, seed=0)
    assert val_set and not {e.question_id for e in train_set} & {e.question_id for e in val_set}


def test_training_inputs_read_the_same_slots_as_the_readouts(smollm2, labels):
    examples = load_examples(labels, "judge", "margin")[:4]
    readouts = RewardAgent(smollm2).score([e.request for e in examples])
    batch = [encode(smollm2, e, 400) for e in examples]
    with torch.no_grad():
        logits = slot_logits(smollm2.model, batch, smollm2.tokenizer.pad_token_id, smollm2.token_ids(["0", "1"]))
    for e, r, slots in zip(examples, readouts, logits):
        assert abs(two_way(dict(zip("01", slots[0].tolist()))) - r.reward) < 1e-4
        if (r.reward >= 0.5) == (e.reward >= 0.5):    # slot 2 follows the same first digit
            assert abs(two_way(dict(zip("01", slots[1].tolist()))) - r.action) < 1e-4


def config(labels, out):
    return TrainConfig(labels=str(labels), out=str(out), search_label="margin", lr=2e-3, warmup_steps=0,
                       batch_size=5, grad_accum=1, epochs=2, save_every=2, val_fraction=0.25, max_tokens=512)


@pytest.fixture(scope="module")
def trained(labels, tmp_path_factory):
    cfg = config(labels, tmp_path_factory.mktemp("agent"))
    return cfg, train(cfg)


def test_training_lowers_the_loss_and_writes_its_records(trained):
    cfg, metrics = trained
    assert len(metrics["train_loss"]) == 4 and metrics["train_loss"][-1] < metrics["train_loss"][0]
    assert metrics["initial"]["step"] == 0 and metrics["final"]["step"] == 4
    assert metrics["final"]["examples"] > 0 and "reward_auroc" in metrics["final"]
    out = train_module.Path(cfg.out)
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == "smollm2-135m-instruct"
    assert json.loads((out / "training_args.json").read_text())["optimizer_steps"] == 4
    assert json.loads((out / "metrics.json").read_text()) == json.loads(json.dumps(metrics))


def test_saved_adapter_loads_and_scores(trained, labels, smollm2):
    cfg, _ = trained
    requests = [e.request for e in load_examples(labels)[:2]]
    tuned = load_reward_agent(cfg.out).score(requests)
    base = RewardAgent(smollm2).score(requests)
    assert all(0.0 < r.reward < 1.0 and 0.0 < r.action < 1.0 for r in tuned)
    assert any(abs(a.reward - b.reward) > 1e-3 for a, b in zip(tuned, base))   # the adapter is applied


def test_a_stopped_run_resumes_on_the_same_trajectory(trained, labels, tmp_path, monkeypatch):
    cfg, metrics = trained
    stopped = config(labels, tmp_path)
    save = train_module.save_checkpoint

    def save_then_stop(run, step, *args):
        folder = save(run, step, *args)
        if step == 2:
            raise KeyboardInterrupt
        return folder

    monkeypatch.setattr(train_module, "save_checkpoint", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        train(stopped)
    monkeypatch.undo()
    (tmp_path / "checkpoints" / ".tmp-step-000004").mkdir()        # a checkpoint write cut short
    resumed = train(stopped)
    assert resumed["train_loss"] == pytest.approx(metrics["train_loss"], abs=1e-6)
    numbers = lambda m: {k: v for k, v in m["final"].items() if isinstance(v, float)}
    assert numbers(resumed) == pytest.approx(numbers(metrics), abs=1e-6)
    ids = [r["id"] for r in read_records(tmp_path / "log.jsonl")]
    assert len(ids) == len(set(ids))
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step-*")) == ["step-000002", "step-000004"]
    with pytest.raises(ValueError, match="other settings"):
        train(replace(stopped, lr=1e-3))


def test_ship_copies_the_adapter_with_a_card_written_from_the_run(trained, labels, tmp_path, monkeypatch):
    import training.ship as ship_module
    from dataclasses import asdict
    from training.config import LabelConfig

    cfg, metrics = trained
    (labels.parent / "label_config.json").write_text(json.dumps(asdict(LabelConfig())))
    (labels.parent / "label_stats.json").write_text(json.dumps({"questions": 4, "steps": 8, "steps_per_trace": 2.0}))
    monkeypatch.setattr(ship_module, "AGENTS_DIR", tmp_path)
    folder = ship_module.ship(train_module.Path(cfg.out), "tiny-agent", "cpu")
    card = (folder / "README.md").read_text()
    auroc = metrics["final"]["reward_auroc"]
    assert "tiny-agent" in card and (f"{auroc:.3f}" if auroc is not None else "n/a") in card
    assert json.loads((folder / "metrics.json").read_text())["final"] == metrics["final"]
    assert load_reward_agent(str(folder)).backend.name == "smollm2-135m-instruct"
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        ship_module.ship(tmp_path / "no-run", "x", "cpu")
