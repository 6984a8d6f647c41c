"""Reward-agent training on 8 synthetic labelled steps: examples, loss, checkpoints, the saved adapter."""
import json
from dataclasses import replace

import pytest
import torch

import training.train as train_module
from pra.errors import UserError
from pra.records import read_records
from pra.reward_agent import RewardAgent, load_reward_agent, two_way
from training.config import TrainConfig
from training.dataset import encode, load_examples, split_by_question
from training.train import SlotLossTrainer, pad_left, slot_logits, slot_loss, train

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
    # always-search: each step with its documents and, for the controllers that read it without, without
    assert len(always) == 16 and all(e.search == 1 for e in always)
    assert {e.id for e in always if not e.request.docs} == {e.id.removesuffix("+docs") for e in always if e.request.docs}
    assert {e.reward for e in always if e.id == "q0/t0/s2"} == {e.reward for e in always if e.id == "q0/t0/s2+docs"} == {0.0}
    only_docs = load_examples(labels, "judge", "always", without_docs=False)
    assert len(only_docs) == 8 and all(e.request.docs for e in only_docs)
    margin = load_examples(labels, "judge", "margin")
    plain = [e for e in margin if not e.request.docs]
    with_docs = [e for e in margin if e.request.docs]
    assert len(plain) == 8 and [e.search for e in plain] == [0, 1] * 4         # first read: no documents
    assert [e.id for e in with_docs] == [f"q{i}/t0/s2+docs" for i in range(4)]   # re-read after a search
    step2 = next(e for e in plain if e.id == "q0/t0/s2")
    assert step2.request.steps == ("Scurvy comes from a lack of vitamin C.",) and step2.request.rewards == (None,)
    assert (step2.trace, step2.step_index) == ("q0/t0", 2)
    assert [e.reward for e in load_examples(labels, "soft") if e.request.docs][:2] == [0.75, 0.0]
    with pytest.raises(ValueError, match="rollout_label"):
        load_examples(labels, "rollout")
    train_set, val_set = split_by_question(margin, 0.25, seed=0)
    assert val_set and not {e.question_id for e in train_set} & {e.question_id for e in val_set}


def test_training_inputs_read_the_same_slots_as_the_readouts(smollm2, labels):
    examples = load_examples(labels, "judge", "margin")[:4]
    readouts = RewardAgent(smollm2).score([e.request for e in examples])
    batch = [encode(smollm2, e, 400) for e in examples]
    with torch.no_grad():
        logits = slot_logits(smollm2.model, pad_left(batch, smollm2.tokenizer.pad_token_id), smollm2.token_ids(["0", "1"]))
    for e, r, slots in zip(examples, readouts, logits):
        assert abs(two_way(dict(zip("01", slots[0].tolist()))) - r.reward) < 1e-4
        if (r.reward >= 0.5) == (e.reward >= 0.5):    # slot 2 follows the same first digit
            assert abs(two_way(dict(zip("01", slots[1].tolist()))) - r.action) < 1e-4


def config(labels, out):
    return TrainConfig(labels=str(labels), out=str(out), search_label="margin", lr=2e-3, warmup_steps=0,
                       batch_size=5, grad_accum=1, epochs=2, save_every=2, val_fraction=0.25, max_tokens=512,
                       bf16=False)     # the same arithmetic on every CPU


@pytest.fixture(scope="module")
def trained(labels, tmp_path_factory):
    cfg = config(labels, tmp_path_factory.mktemp("agent"))
    return cfg, train(cfg)


def batch_loss(backend, examples) -> float:
    """Mean slot loss of ``examples`` as one batch: the training objective, read without gradients."""
    inputs = pad_left([encode(backend, e, 400) for e in examples], backend.tokenizer.pad_token_id)
    with torch.no_grad():
        logits = slot_logits(backend.model, inputs, backend.token_ids(["0", "1"]))
    return slot_loss(logits, torch.tensor([e.reward for e in examples]), torch.tensor([e.search for e in examples])
                     ).mean().item()


def test_training_lowers_the_loss_and_writes_its_records(trained, smollm2):
    cfg, metrics = trained
    assert len(metrics["train_loss"]) == 4
    # the same batch (the whole training split) before and after: logged losses are of different minibatches
    train_set = split_by_question(load_examples(cfg.labels, cfg.reward_label, cfg.search_label, cfg.always_without_docs),
                                  cfg.val_fraction, cfg.seed)[0]
    before, after = batch_loss(smollm2, train_set), batch_loss(load_reward_agent(cfg.out).backend, train_set)
    assert after < before - 0.1, (before, after)
    assert metrics["initial"]["step"] == 0 and metrics["final"]["step"] == 4
    assert metrics["final"]["examples"] > 0 and "reward_auroc" in metrics["final"]
    out = train_module.Path(cfg.out)
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == "smollm2-135m-instruct"
    assert json.loads((out / "training_args.json").read_text())["optimizer_steps"] == 4
    assert json.loads((out / "metrics.json").read_text()) == json.loads(json.dumps(metrics))


def test_metrics_json_holds_the_held_out_keys_with_question_intervals(trained):
    cfg, metrics = trained
    for key in ("reward_auroc", "reward_pr_auc", "untrained_reward_auroc", "action_std", "search_accuracy",
                "reward_auroc_gain", "answer_rule_reward_auroc", "reward_auroc_minus_answer_rule"):
        assert key in metrics
    assert metrics["untrained_reward_auroc"] == metrics["initial"]["reward_auroc"]      # step 0: no adapter yet
    assert metrics["reward_auroc"] == metrics["final"]["reward_auroc"]
    assert metrics["action_std"] == metrics["final"]["action_std"] > 0
    assert metrics["examples"] == 3 and metrics["questions"] == 1        # q2: 2 steps without documents, 1 re-read with them
    # q2's labels are 1, 0, 0: the AUROC is defined, but one question gives no interval (every resample
    # would be itself), so nothing is claimed about chance
    for key in ("reward_auroc", "untrained_reward_auroc"):
        assert isinstance(metrics[key], float) and metrics[f"{key}_ci"] is None
    assert metrics["reward_auroc_excludes_chance"] is None
    share = metrics["search_positive_share"]
    assert share in (1 / 3, 2 / 3) and metrics["constant_search_accuracy"] == max(share, 1 - share)
    assert all("reward_readouts" not in e for e in metrics["history"])


def test_trained_agent_reads_at_inference_the_prompt_it_was_trained_on(trained, labels, smollm2):
    """Training shows no earlier rewards; the engine passes the agent's own readouts, which the agent
    trained here (its folder says so) leaves out: the two prompts are the same text."""
    from pra.reward_agent import PROMPT_RECORD, render_prompt
    from training.dataset import EARLIER_REWARDS

    cfg, _ = trained
    assert json.loads((train_module.Path(cfg.out) / PROMPT_RECORD).read_text()) == {"earlier_rewards": False}
    agent = load_reward_agent(cfg.out)
    assert agent.earlier_rewards is False
    example = next(e for e in load_examples(labels, "judge", "margin") if e.id == "q0/t0/s2")
    at_inference = replace(example.request, rewards=(0.37,))           # what engine._reward passes
    trained_on = render_prompt(smollm2, example.request, 400, EARLIER_REWARDS)
    assert render_prompt(agent.backend, at_inference, agent.max_doc_chars, agent.earlier_rewards) == trained_on
    assert "(reward" not in "".join(trained_on)
    ids = encode(smollm2, example, 400)
    assert "(reward" not in smollm2.tokenizer.decode(ids)


def test_saved_adapter_loads_and_scores(trained, labels, smollm2):
    cfg, _ = trained
    requests = [e.request for e in load_examples(labels)[:2]]
    tuned = load_reward_agent(cfg.out).score(requests)
    base = RewardAgent(smollm2).score(requests)
    assert all(0.0 < r.reward < 1.0 and 0.0 < r.action < 1.0 for r in tuned)
    assert any(abs(a.reward - b.reward) > 1e-3 for a, b in zip(tuned, base))   # the adapter is applied


def reference_loss(backend, examples, max_doc_chars: int) -> float:
    """The hand-written loop's loss, computed apart: each example alone (no padding), the two-way
    cross-entropy over the digit logits at the last prompt token and at ``,``, summed and divided by
    the examples of the optimizer step."""
    zero, one = backend.token_ids(["0", "1"])
    total = 0.0
    for e in examples:
        with torch.no_grad():
            logits = backend.model(torch.tensor([encode(backend, e, max_doc_chars)])).logits[0].float()
        slot1, slot2 = logits[-3, [zero, one]].log_softmax(-1), logits[-1, [zero, one]].log_softmax(-1)
        total += float(-(e.reward * slot1[1] + (1 - e.reward) * slot1[0]) - slot2[e.search])
    return total / len(examples)


def test_trainer_loss_equals_the_loops_on_uneven_micro_batches(labels, smollm2, tmp_path):
    # 9 training examples in micro-batches of 5 and 4, one optimizer step: the step's logged loss is the
    # mean over all 9 (a mean of the two micro-batch means would weigh the 4 as 5). LoRA starts as the
    # identity and dropout is off, so the backbone alone gives the reference.
    cfg = replace(config(labels, tmp_path), batch_size=5, grad_accum=2, max_steps=1, lora_dropout=0.0)
    train_set, _ = split_by_question(load_examples(labels, "judge", "margin"), cfg.val_fraction, cfg.seed)
    assert len(train_set) == 9
    metrics = train(cfg)
    assert metrics["train_loss"][0] == pytest.approx(reference_loss(smollm2, train_set, cfg.max_doc_chars), abs=1e-5)


def test_a_stopped_run_resumes_on_the_same_trajectory(trained, labels, tmp_path, monkeypatch):
    from safetensors.torch import load_file

    cfg, metrics = trained
    stopped = config(labels, tmp_path)
    save = SlotLossTrainer._save_checkpoint

    def save_then_stop(self, *args, **kwargs):
        save(self, *args, **kwargs)
        if self.state.global_step == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(SlotLossTrainer, "_save_checkpoint", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        train(stopped)
    monkeypatch.undo()
    assert [p.name for p in (tmp_path / "checkpoints").glob("checkpoint-*")] == ["checkpoint-2"]
    (tmp_path / "checkpoints" / "checkpoint-4").mkdir()        # a checkpoint write cut short
    resumed = train(stopped)
    assert resumed["train_loss"] == pytest.approx(metrics["train_loss"], abs=1e-6)
    numbers = lambda m: {k: v for k, v in m["final"].items() if isinstance(v, float)}
    assert numbers(resumed) == pytest.approx(numbers(metrics), abs=1e-6)
    weights = [load_file(f"{run}/adapter_model.safetensors") for run in (cfg.out, tmp_path)]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.allclose(weights[0][k], weights[1][k], atol=1e-6) for k in weights[0])
    ids = [r["id"] for r in read_records(tmp_path / "log.jsonl")]
    assert len(ids) == len(set(ids))
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
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
    assert f"| action readout p(s=1): std | {metrics['initial']['action_std']:.3f} | {metrics['action_std']:.3f} |" in card
    assert "earlier steps without rewards" in card
    assert "(the default)" not in card and "Monte-Carlo rollouts" in card and "gold probability" not in card
    shipped = json.loads((folder / "metrics.json").read_text())
    assert shipped["subgroups"] == metrics["subgroups"]
    assert shipped["final"] == metrics["final"] and shipped["untrained_reward_auroc"] == metrics["untrained_reward_auroc"]
    assert shipped["answer_rule_reward_auroc"] == metrics["answer_rule_reward_auroc"]
    assert (metrics["answer_rule_reward_auroc"] is None) != ("The string rule that ranks every step stating an answer" in card)
    assert json.loads((folder / "prompt.json").read_text()) == {"earlier_rewards": False}
    assert load_reward_agent(str(folder)).backend.name == "smollm2-135m-instruct"
    command = next(line for line in card.splitlines() if line.startswith("pra train --recipe cpu"))
    assert f"--out {cfg.out}" in command and "--val-fraction 0.25" in command and "--lr 0.002" in command
    assert "--no-bf16" in command            # trained in float32, where the recipe lets the CPU decide
    assert "under bf16 autocast" not in card        # its validation was read in float32
    assert "Licenses: HuggingFaceTB/SmolLM2-135M-Instruct (Apache-2.0)" in card
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        ship_module.ship(tmp_path / "no-run", "x", "cpu")


def test_a_card_says_how_much_of_an_epoch_a_run_capped_by_max_steps_saw():
    from training.ship import training_extent

    run = {"optimizer_steps": 240, "effective_batch": 8, "train_examples": 7513, "epochs": 1}
    assert training_extent({**run, "max_steps": 240}) == (
        "240 optimizer steps (stopped by max_steps: 1920 examples seen, 0.26 of an epoch of 7513 examples)")
    assert training_extent({**run, "max_steps": None}) == "1 epoch(s), 240 optimizer steps on 7513 examples"
    whole = {**run, "optimizer_steps": 940, "max_steps": 2000}       # a cap the epochs end before
    assert training_extent(whole) == "1 epoch(s), 940 optimizer steps on 7513 examples"


def test_a_card_gives_the_search_readout_where_it_decides_beside_always_searching():
    from training.ship import search_line

    metrics = {"prompts_without_docs": 586, "search_accuracy_without_docs": 0.61,
               "always_search_accuracy_without_docs": 0.48, "search_minus_always_without_docs": 0.13,
               "search_minus_always_without_docs_ci": [0.05, 0.2]}
    line = search_line(metrics)
    assert "586 prompts without documents" in line and "0.610 against always-searching's 0.480" in line
    assert "a difference of 0.130 [0.050, 0.200]" in line
    assert search_line({"search_accuracy_without_docs": None}) == ""      # an older run's metrics: no line


def test_flags_for_a_config_parse_back_into_it():
    """A model card's `pra train` line: the flags that turn the recipe's config into the run's, read back
    by the command's own parser, give the run's config (bools through their store_true/false flags)."""
    import argparse
    from dataclasses import asdict
    from pra.options import add_flags, flags_for
    from training.config import load_config

    recipe = load_config(TrainConfig, "train", "qwen-goldprob", {})
    run = replace(recipe, val_fraction=0.2, base="smollm2-135m-instruct", lora=False, always_without_docs=False,
                  bf16=True, lora_targets=["q_proj", "up_proj"], max_steps=3)
    flags = flags_for(TrainConfig, asdict(run), recipe)
    assert "--full" in flags and "--only-with-docs" in flags and "--bf16" in flags
    assert flags_for(TrainConfig, asdict(recipe), recipe) == []
    parser = argparse.ArgumentParser()
    add_flags(parser, TrainConfig)
    assert load_config(TrainConfig, "train", "qwen-goldprob", vars(parser.parse_args(flags))) == run
    float32 = replace(recipe, bf16=False)            # bf16 unset follows the CPU; False is said as --no-bf16
    assert recipe.bf16 is None and flags_for(TrainConfig, asdict(float32), recipe) == ["--no-bf16"]
    assert load_config(TrainConfig, "train", "qwen-goldprob", vars(parser.parse_args(["--no-bf16"]))) == float32


def test_bf16_unset_follows_the_device_and_a_recipe_value_wins():
    from pra.models import default_dtype
    from training.train import native_bf16

    assert native_bf16(TrainConfig(device="cpu")) == (default_dtype("cpu") == "bfloat16")
    assert native_bf16(TrainConfig(device="cpu", bf16=True)) is True
    assert native_bf16(TrainConfig(device="cuda", bf16=False)) is False
    assert native_bf16(TrainConfig(device="cuda")) is True


def test_lora_targets_come_from_the_command_line_and_unknown_ones_are_named(labels, tmp_path, capsys):
    """`pra train --lora-targets` (the planted-signal recipe adapts every linear layer) reaches the adapter;
    a name the backbone lacks is a one-line error listing the linear layers it has."""
    from pra.cli import main

    out = tmp_path / "agent"
    args = ["train", "--recipe", "cpu", "--labels", str(labels), "--out", str(out), "--max-steps", "1",
            "--search-label", "margin", "--lora-r", "4"]
    main(args + ["--lora-targets", "q_proj,up_proj"])
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert set(adapter["target_modules"]) == {"q_proj", "up_proj"} and adapter["r"] == 4
    with pytest.raises(SystemExit) as exit_info:
        main(args + ["--out", str(tmp_path / "other"), "--lora-targets", "q_proj,qkv_proj"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "lora_targets" in err and "qkv_proj" in err and "down_proj" in err
    assert "Traceback" not in err


def test_perf_train_times_both_modes_on_the_same_steps(labels, capsys):
    """`pra perf train`: the same optimizer steps in float32 and under bf16 autocast. Their losses start
    from the same adapter on the same examples, so they differ only by bf16's rounding: not zero (autocast
    was on) and small (same examples, same order)."""
    from eval.perf.train import main

    main(["--recipe", "cpu", "--labels", str(labels), "--batch-size", "1", "--grad-accum", "2", "--steps", "3"])
    out = capsys.readouterr().out.splitlines()
    per_example = {line.split()[0]: float(line.split("s an example")[0].split()[-1]) for line in out if "s an example" in line}
    assert set(per_example) == {"float32", "bf16"} and all(s > 0 for s in per_example.values())
    moved = float(next(line for line in out if "differs by at most" in line).split()[-4])
    assert 0 < moved < 0.25
    assert out[-1].startswith("summary: bf16 autocast runs ") and "smollm2-135m-instruct" in out[-1]


def test_perf_train_names_a_label_set_too_small_for_its_steps(labels):
    from eval.perf.train import main

    with pytest.raises(UserError, match="fewer than the 400"):
        main(["--recipe", "cpu", "--labels", str(labels), "--batch-size", "10", "--grad-accum", "10", "--steps", "4"])
