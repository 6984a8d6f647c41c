"""The code's layers, read from its own imports: no import cycle, and no arrow that runs upward.

Every runtime import counts, at the top of a module or inside a function; an import under
``if TYPE_CHECKING:`` does not (it never runs). Layers, lowest first:

- ``pra``: the ground floor (types, prompts, readouts, the reward agent, backends, models, records,
  errors). It imports no other package of the project.
- ``corpora``: passages, their encoders, indexes and retrieval. It knows nothing of reasoning: of
  ``pra`` it imports only the plumbing (``pra.errors``, and ``pra.models``, the registry that names its
  encoders), and nothing in ``pra`` imports it.
- ``search``: the step engine, its search controllers, PULSE decoding, QWC. It stands on ``pra`` (and
  may use ``corpora``; retrievers are handed to it).
- ``training`` and ``eval``, side by side on top: labelling and training agents (and evaluating them)
  in one, running methods in the other (the runner: config, checks, the method registry, prompt fit,
  run folders, suites). Each may import the layers below, neither the other: what both need goes down
  to ``pra``.
- ``eval.analysis``, above the runner: what reads finished run folders (report, compare, quality,
  error injection, rescoring, the viewer). It may import the runner (to read its folders as it wrote
  them); the runner never imports it, so an analysis can change without touching how runs are made.

Entry modules, which no module imports, may import any layer: ``pra/cli.py``, the one way in, and the
tools run as ``python -m`` (a module with a ``__main__`` guard that no other module imports).
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGES = ("pra", "corpora", "search", "training", "eval")
ANALYSIS = "eval.analysis"      # a layer of its own inside eval, above the runner
# The layers each layer may import (besides itself).
ALLOWED = {"pra": set(), "corpora": {"pra"}, "search": {"pra", "corpora"},
           "training": {"pra", "corpora", "search"}, "eval": {"pra", "corpora", "search"},
           ANALYSIS: {"pra", "corpora", "search", "eval"}}
# What corpora may import of pra: the plumbing, nothing of reasoning.
CORPORA_USES = {"pra.errors", "pra.models"}
ENTRY = {"pra.cli"}


def layer(module: str) -> str:
    """The layer of a module: its top-level package, or ``eval.analysis`` for that package and below."""
    return ANALYSIS if module == ANALYSIS or module.startswith(ANALYSIS + ".") else module.split(".")[0]


def module_files() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = module_files()


def _resolve(name: str) -> str | None:
    """The project module that ``import name`` loads (``pra.backends.load_policy`` -> ``pra.backends``)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in MODULES:
            return ".".join(parts[:i])
    return None


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def runtime_imports(module: str, path: Path) -> list[tuple[str, int]]:
    """(imported project module, line) for every import that can run, functions' included."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((m, node.lineno) for a in node.names if (m := _resolve(a.name)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            for alias in node.names:
                if target := _resolve(f"{base}.{alias.name}") or _resolve(base):
                    found.append((target, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return [(m, line) for m, line in found if m != module]


GRAPH = {m: runtime_imports(m, p) for m, p in MODULES.items()}


def _has_main_guard(path: Path) -> bool:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) \
                and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__":
            return True
    return False


def entry_modules() -> set[str]:
    imported = {m for deps in GRAPH.values() for m, _ in deps}
    return ENTRY | {m for m, p in MODULES.items() if _has_main_guard(p) and m not in imported}


def test_the_walk_sees_imports_inside_functions_and_skips_type_checking():
    targets = {m for m, _ in GRAPH["eval.run"]}
    assert "search.controllers" in targets            # imported inside Parts.complete
    assert "search.pulse_decoding" in targets         # inside a function; its TYPE_CHECKING import skipped
    assert "eval.run" not in {m for m, _ in GRAPH["eval.prompt_fit"]}     # only under TYPE_CHECKING
    assert "pra.cli" in entry_modules() and "eval.run" not in entry_modules()
    assert layer("eval.analysis.report.runs") == ANALYSIS and layer("eval.run") == "eval"


def test_no_import_cycle():
    """Tarjan's strongly connected components of the module graph: each must be one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w, _ in GRAPH[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in GRAPH:
        if v not in index:
            connect(v)
    arrows = [f"{a}:{line} -> {b}" for cycle in cycles for a in cycle for b, line in GRAPH[a] if b in cycle]
    assert not cycles, f"import cycles {cycles}:\n" + "\n".join(arrows)


def test_no_upward_import():
    entries = entry_modules()
    upward = []
    for module, deps in GRAPH.items():
        if module in entries:
            continue
        own = layer(module)
        for target, line in deps:
            other = layer(target)
            if other == own:
                continue
            if other not in ALLOWED[own] or (own == "corpora" and target not in CORPORA_USES):
                upward.append(f"{MODULES[module].relative_to(ROOT)}:{line}: {module} -> {target}")
    assert not upward, "imports against the layers (tests/test_layers.py's docstring):\n" + "\n".join(upward)
