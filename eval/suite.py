"""``pra eval --suite NAME|FILE``: a grid of evaluation runs from one YAML file, run in order in one
process so that each model loads once. Every run resumes where it stopped: rerun the command to finish
a grid. Workers started side by side on one machine share the grid (each takes the next run that
nobody holds); across machines, give each ``--shard i/n`` (every run gets it) and join with ``pra merge``.

    # eval/suites/NAME.yaml
    defaults: {benchmark: medmcqa-eval, limit: 50}          # for every run: EvalConfig fields, a recipe
    runs:
      - {out: runs/x/cot, method: cot}
      - {out: runs/x/pra-t0.3, recipe: pra-cpu, search_controller: "threshold:0.3", search: {branching: 4}}

A run's fields are its recipe's (``search/recipes``), then the defaults, then its own.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

from eval.checks import check_eval_config
from eval.methods import METHODS, reads, retrieves
from eval.run import EvalConfig, Parts, eval_config, run_with_parts
from pra.config_files import read_yaml, yaml_file
from pra.errors import UserError
from pra.folder_lock import exclusive

SUITES = Path(__file__).parent / "suites"


def load_suite(name: str) -> list[EvalConfig]:
    path = yaml_file(name, SUITES, "suite")
    data = read_yaml(path)
    if not isinstance(data.get("runs"), list) or not data["runs"]:
        raise UserError(f"{path}: needs a non-empty `runs:` list")
    defaults = data.get("defaults") or {}
    configs = []
    for i, run in enumerate(data["runs"], 1):
        where = f"{path}, run {i}"
        if not isinstance(run, dict) or "out" not in run:
            raise UserError(f"{where}: each run is a mapping with at least `out:`")
        merged = {**defaults, **run, "search": {**defaults.get("search", {}), **run.get("search", {})}}
        configs.append(eval_config(merged, where))
        try:
            check_eval_config(configs[-1])
        except UserError as err:
            raise UserError("\n".join(f"{where}: {line}" for line in str(err).splitlines())) from None
    outs = [c.out for c in configs]
    if len(set(outs)) != len(outs):
        raise UserError(f"{path}: two runs write to the same out folder")
    return configs


class LoadedParts:
    """The policy, agent and retriever the suite's last runs loaded, handed to the next run that uses the
    same ones. One of each is kept: a run that names another lets the old one go before it loads its own,
    so a long suite holds no more than one run needs, and a finished run loads nothing. A run is handed
    only the parts its method uses: an agent kept from a PRA run would otherwise rank a CoT or
    self-consistency run's samples."""

    def __init__(self) -> None:
        self.kept: dict[str, tuple[tuple, Any]] = {}

    @staticmethod
    def keys(cfg: EvalConfig) -> dict[str, tuple | None]:
        """Each part's identity for this run; None for a part its method does not use."""
        return {"policy": (cfg.policy, cfg.backend, cfg.base_url, cfg.batch_size),
                "reward_agent": ((cfg.reward_agent, cfg.agent_backend, cfg.agent_base_url, cfg.batch_size)
                                 if reads(cfg.method, "reward_agent") else None),
                "retriever": ((cfg.corpus, "bm25" if METHODS[cfg.method].retrieves == "steps" else cfg.retrieval)
                              if retrieves(cfg.method, cfg.search_controller) else None)}

    def parts(self, cfg: EvalConfig) -> Parts:
        keys = self.keys(cfg)
        # A part this run names differently goes; one it does not use stays for a later run.
        self.kept = {name: (key, part) for name, (key, part) in self.kept.items() if keys[name] in (key, None)}
        return Parts(**{name: part for name, (key, part) in self.kept.items() if keys[name] == key})

    def keep(self, cfg: EvalConfig, parts: Parts) -> None:
        for name, key in self.keys(cfg).items():
            if key is not None and getattr(parts, name) is not None:
                self.kept[name] = (key, getattr(parts, name))


@contextmanager
def claim(out: Path) -> Iterator[bool]:
    """Whether this process holds ``out`` for the duration: an advisory lock on ``out/.worker``, which
    the system drops when its holder exits, however it exits. Several workers on one machine thus share
    a suite, each taking the next run nobody holds (across machines, give each a ``--shard``). A run
    that a ``pra eval --out`` started by hand is writing (it holds ``out/.lock``) is not free either."""
    with exclusive(out / ".worker") as holder:
        free = holder is None
        if free:
            with exclusive(out / ".lock") as writer:
                free = writer is None
        yield free


def run_suite(name: str, shard: str | None = None) -> list[dict[str, Any]]:
    """Run (or resume) every run of the suite that no other worker holds; their summaries, in order."""
    configs = load_suite(name)       # all checked before the first run starts
    loaded, summaries = LoadedParts(), []
    for i, cfg in enumerate(configs, 1):
        cfg = replace(cfg, shard=shard or cfg.shard)
        with claim(Path(cfg.out)) as mine:
            if not mine:
                print(f"[{i}/{len(configs)}] {cfg.out}: another process runs it, next", flush=True)
                continue
            print(f"[{i}/{len(configs)}] {cfg.method} {cfg.benchmark} {cfg.policy} -> {cfg.out}", flush=True)
            parts = loaded.parts(cfg)
            summaries.append(run_with_parts(cfg, parts))
            loaded.keep(cfg, parts)
    return summaries
