"""An agent export is all or nothing: ``training.ship`` writes a temporary folder and renames it into
place, ``pra train``'s export moves its files in with the loadable config last, and a folder holding half
an adapter is refused with one line before any weights load."""
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from pra.errors import UserError
from pra.reward_agent import PROMPT_RECORD, agent_folder_problem, load_reward_agent


def fake_run(root: Path) -> Path:
    run, labels = root / "run", root / "labels"
    run.mkdir()
    labels.mkdir()
    (run / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "smollm2-135m-instruct"}))
    (run / "adapter_model.safetensors").write_bytes(b"weights")
    (run / PROMPT_RECORD).write_text('{"earlier_rewards": false}\n')
    (run / "metrics.json").write_text(json.dumps({"initial": {}, "final": {}, "train_loss": 0.1}))
    (run / "training_args.json").write_text(json.dumps({"labels": str(labels / "labels.jsonl")}))
    (labels / "label_config.json").write_text("{}")
    (labels / "label_stats.json").write_text("{}")
    return run


def test_a_ship_cut_short_leaves_no_agent_and_keeps_the_earlier_one(tmp_path, monkeypatch):
    from training import ship

    agents = tmp_path / "agents"
    (agents / "mine").mkdir(parents=True)
    (agents / "mine" / "README.md").write_text("the earlier agent")
    monkeypatch.setattr(ship, "AGENTS_DIR", agents)
    run = fake_run(tmp_path)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(ship, "model_card", killed)
    with pytest.raises(KeyboardInterrupt):
        ship.ship(run, "mine", "cpu")
    assert sorted(p.name for p in agents.iterdir()) == ["mine"]          # no temporary folder left
    assert (agents / "mine" / "README.md").read_text() == "the earlier agent"
    monkeypatch.setattr(ship, "model_card", lambda *a, **k: "card")
    folder = ship.ship(run, "mine", "cpu")
    assert folder == agents / "mine" and sorted(p.name for p in agents.iterdir()) == ["mine"]
    assert {p.name for p in folder.iterdir()} == {"adapter_config.json", "adapter_model.safetensors", PROMPT_RECORD,
                                                  "metrics.json", "label_stats.json", "README.md"}


class FakeModel:
    def __init__(self, fail: bool = False):
        self.fail = fail

    def save_pretrained(self, folder, **kwargs):
        (Path(folder) / "adapter_model.safetensors").write_bytes(b"weights")
        if self.fail:
            raise KeyboardInterrupt
        (Path(folder) / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "smollm2-135m-instruct"}))


def test_an_export_cut_short_leaves_nothing_loadable(tmp_path):
    from training.train import export

    cfg = SimpleNamespace(lora=True)
    with pytest.raises(KeyboardInterrupt):
        export(FakeModel(fail=True), None, tmp_path, cfg)
    assert list(tmp_path.iterdir()) == []
    export(FakeModel(), None, tmp_path, cfg)
    assert {p.name for p in tmp_path.iterdir()} == {"adapter_config.json", "adapter_model.safetensors", PROMPT_RECORD}
    assert agent_folder_problem(str(tmp_path)) is None


def test_half_an_adapter_is_refused_before_any_weights_load(tmp_path, monkeypatch):
    monkeypatch.setattr("pra.backends.transformers_backend.TransformersBackend.__init__",
                        lambda *a, **k: pytest.fail("a model was loaded for a broken agent folder"))
    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "smollm2-135m-instruct"}))
    with pytest.raises(UserError, match=r"has adapter_config.json but not its weights .*an export cut short"):
        load_reward_agent(str(tmp_path))
    (tmp_path / "adapter_config.json").unlink()
    (tmp_path / "adapter_model.safetensors").write_bytes(b"w")
    with pytest.raises(UserError, match=r"has adapter weights but not adapter_config.json"):
        load_reward_agent(str(tmp_path))
    (tmp_path / "adapter_config.json").write_text("{")                   # torn mid-write
    with pytest.raises(UserError, match=r"is not a peft adapter config naming its base model"):
        load_reward_agent(str(tmp_path))
    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "smollm2-135m-instruct"}))
    (tmp_path / PROMPT_RECORD).write_text('{"earlier_rewards": "no"}')
    with pytest.raises(UserError, match=r"expected \{\"earlier_rewards\": true or false\}"):
        load_reward_agent(str(tmp_path))
