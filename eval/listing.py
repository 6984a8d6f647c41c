"""``pra list KIND``: what exists, without loading a model: benchmarks, methods, recipes, reward agents,
corpora and embedded models, each with its size, licence and whether it is ready on this machine."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).parents[1]
KINDS = ("benchmarks", "methods", "recipes", "agents", "corpora", "models")

# Benchmark format -> licence (eval/data/README.md; the licence files lie beside the data).
BENCHMARK_LICENSES = {"medqa": "MIT (LICENSE.medqa)", "medmcqa": "MIT (LICENSE.medmcqa)", "mmlu": "MIT (LICENSE.mmlu)",
                      "pubmedqa": "MIT (LICENSE.pubmedqa)", "bioasq": "BioASQ terms (eval/data/README.md)"}
CORPUS_SOURCE_LICENSES = {"pubmedqa": "MIT", "medmcqa": "MIT", "medquad": "CC BY 4.0", "bioasq": "BioASQ terms"}


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 1e5 else f"{n / 1e3:,.0f} kB"


def _first_comment(path: Path, chars: int = 110) -> str:
    """The first sentence of the file's opening comment."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# ").strip())
    text = " ".join(lines)
    end = text.find(". ")
    text = text[:end + 1] if end > 0 else text
    return text if len(text) <= chars else text[:chars - 3].rsplit(" ", 1)[0] + "..."


def benchmarks() -> list[list[str]]:
    from pra.benchmarks import BENCHMARKS, TRAIN_BENCHMARKS, load_benchmark

    rows = []
    for name, (fmt, path) in BENCHMARKS.items():
        try:
            n = f"{len(load_benchmark(name, skip_bad=True).questions):,} questions"
        except Exception as err:        # a missing file is shown, not fatal to the listing
            n = f"unreadable ({type(err).__name__})"
        use = "training only" if name in TRAIN_BENCHMARKS else "evaluation"
        rows.append([name, n, use, BENCHMARK_LICENSES.get(fmt, "see eval/data/README.md"),
                     "shipped" if path.exists() else "missing"])
    rows.append(["FILE.jsonl", "yours", "evaluation", "yours", "rows: id, question, options, answer"])
    return rows


def methods() -> list[list[str]]:
    from eval.methods import METHODS

    return [[m.name, m.about, m.flags] for m in METHODS.values()]


def recipes() -> list[list[str]]:
    from pra.config_files import recipe_blocks

    rows = [[p.stem, "pra eval --recipe", _first_comment(p)] for p in sorted((ROOT / "search" / "recipes").glob("*.yaml"))]
    rows += [[p.stem, f"pra {'/'.join(recipe_blocks(p))} --recipe", _first_comment(p)]
             for p in sorted((ROOT / "training" / "recipes").glob("*.yaml"))]
    rows += [[p.stem, "pra eval --suite", _first_comment(p)] for p in sorted((ROOT / "eval" / "suites").glob("*.yaml"))]
    return rows


def agents() -> list[list[str]]:
    from pra.models import AGENTS_DIR, DEFAULT_REWARD_AGENT, resolve_reward_agent

    rows = []
    for folder in sorted(p for p in AGENTS_DIR.iterdir() if p.is_dir()):
        base, _ = resolve_reward_agent(folder.name)
        readme = folder / "README.md"
        licence = next((line.split(":", 1)[1].strip() for line in readme.read_text().splitlines()
                        if line.startswith("Licenses:")), "see its README") if readme.exists() else ""
        rows.append([folder.name + (" (default)" if folder.name == DEFAULT_REWARD_AGENT else ""),
                     f"LoRA on {base}", _mb(_size(folder / "adapter_model.safetensors")), licence, "shipped"])
    return rows


def corpora() -> list[list[str]]:
    from corpora.builders import MANIFEST, SHIPPED
    from pra.models import cache_dir

    rows = []
    for folder in [*sorted(SHIPPED.iterdir()), *sorted((cache_dir() / "corpora").glob("*"))]:
        if not (folder / MANIFEST).exists():
            continue
        manifest = json.loads((folder / MANIFEST).read_text())
        sources = manifest.get("sources", {})
        licences = sorted({CORPUS_SOURCE_LICENSES.get(s, "see README") for s in sources})
        indexes = sorted(p.name for p in (folder / "index").glob("*") if p.is_dir()) if (folder / "index").is_dir() else []
        rows.append([manifest.get("name", folder.name), f"{manifest.get('count', 0):,} passages",
                     ", ".join(sources), "; ".join(licences),
                     ("shipped" if folder.parent == SHIPPED else f"built in {folder.parent}")
                     + f", indexes: {', '.join(indexes) or 'none (dense retrieval builds one)'}"])
    return rows


def model_state(model) -> str:
    """Whether an embedded model is ready to load: its package installed, its GGUF dequantized."""
    import importlib.util

    from pra.models import cache_dir

    prepare = "pra models --prepare" + ("" if getattr(model, "default", True) else f" {model.name}")
    cached = cache_dir() / "models" / model.name / "model.safetensors"
    if model.gguf is not None and cached.exists():
        return f"prepared ({_mb(cached.stat().st_size)} in {cached.parent})"
    if importlib.util.find_spec(model.package) is None:
        return f"not installed (`{prepare}` installs and prepares it)"
    return "ready" if model.gguf is None else f"not prepared (`{prepare}`, about a minute)"


def models() -> list[list[str]]:
    from pra.models import EMBEDDED

    rows = []
    for m in EMBEDDED.values():
        rows.append([m.name, m.kind, m.license, model_state(m)])
    return rows


LISTS: dict[str, tuple[Callable[[], list[list[str]]], tuple[str, ...]]] = {
    "benchmarks": (benchmarks, ("name", "size", "use", "licence", "state")),
    "methods": (methods, ("name", "what it does", "its flags")),
    "recipes": (recipes, ("name", "for", "what it is")),
    "agents": (agents, ("name", "what", "size", "licences", "state")),
    "corpora": (corpora, ("name", "size", "sources", "licences", "state")),
    "models": (models, ("name", "kind", "licence", "state")),
}


def listing(kind: str) -> tuple[tuple[str, ...], list[list[str]]]:
    """(column names, rows) of ``kind``."""
    make, columns = LISTS[kind]
    return columns, make()
