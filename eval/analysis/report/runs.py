"""Saved runs as the report reads them: a run folder's config and records, optionally cut to the
benchmark's first N questions (``pra report --first N``), so runs of different sizes
compare on the same questions."""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from pra.benchmarks import load_eval_benchmark
from eval.methods import reads, retrieves
from eval.run import EvalConfig, summarize
from eval.run_folder import check_records
from pra.records import read_records
from pra.selection import split_id
from pra.errors import UserError

REQUIRED = ("benchmark", "method", "policy")


class RunError(UserError):
    """A run folder the report cannot read: names the file and the field."""


@dataclass(frozen=True)
class Run:
    path: Path
    config: dict[str, Any]
    records: tuple[dict[str, Any], ...]

    @property
    def benchmark(self) -> str:
        return self.config["benchmark"]

    @property
    def method(self) -> str:
        return self.config["method"]

    @property
    def policy(self) -> str:
        return self.config["policy"]

    @property
    def reward_agent(self) -> str | None:
        return self.config.get("reward_agent") if self.method == "pra" else None

    @property
    def controller(self) -> str:
        """The search controller; methods without a reward agent never search."""
        return self.config.get("search_controller", "never") if self.method == "pra" else "never"

    @property
    def aggregation(self) -> str:
        """How PRA ranked its traces by their step rewards (the paper's sum unless the run says)."""
        return (self.config.get("search") or {}).get("reward_aggregation", "sum") if self.method == "pra" else "sum"

    @property
    def corpus(self) -> str | None:
        """The corpus the run retrieved from; None for a run that reads none."""
        if not retrieves(self.method, self.controller):
            return None
        return self.config.get("corpus", EvalConfig.corpus)

    @property
    def variant(self) -> str:
        """What sets the run apart from its method's default setting ('' for none): a reward aggregation
        other than the paper's sum, a corpus other than the default. Such a run is its own row and never
        stands for the default setting."""
        parts = [] if self.aggregation == "sum" else [f"ranked by {self.aggregation} reward"]
        if self.corpus not in (None, EvalConfig.corpus):
            parts.append(f"corpus {self.corpus}")
        return ", ".join(parts)

    @property
    def searches(self) -> bool:
        return self.controller != "never"

    @property
    def width(self) -> int:
        """Traces sampled per step: B x b for PRA, k for self-consistency, 1 otherwise."""
        if self.method == "pra":
            s = self.config.get("search", {})
            return int(s.get("beam_width", 1)) * int(s.get("branching", 1))
        if reads(self.method, "samples"):
            return int(self.config.get("samples", 1))
        return 1

    @property
    def trained(self) -> bool | None:
        """Whether the reward agent is fine-tuned: a bare embedded backbone is the paper's untrained
        ablation row; a shipped agent or adapter folder (even one not present here) is trained."""
        if self.reward_agent is None:
            return None
        from pra.models import EMBEDDED, resolve_reward_agent

        return resolve_reward_agent(self.reward_agent)[1] is not None or self.reward_agent not in EMBEDDED

    @property
    def readout(self) -> str:
        """How answers read from logits were read (direct, forced): argmax | permavg | calibrate."""
        return self.config.get("search", {}).get("readout", "argmax")

    @property
    def label(self) -> str:
        if self.method == "direct":
            return f"direct ({self.readout})"
        if self.method == "pra":
            agent = "trained" if self.trained else "untrained"
            s = self.config.get("search", {})
            return (f"pra ({agent} {self.reward_agent}, B={s.get('beam_width')} b={s.get('branching')}, "
                    f"search {self.controller}{', ' + self.variant if self.variant else ''})")
        details = [self.variant] if self.variant else []
        if reads(self.method, "samples"):
            details.insert(0, f"k={self.width}")
        if reads(self.method, "search_controller"):
            details.insert(0, str(self.config.get("search_controller")))
        return f"{self.method} ({', '.join(details)})" if details else self.method

    @cached_property
    def summary(self) -> dict[str, Any]:
        return summarize(list(self.records))

    @property
    def correct(self) -> dict[str, bool]:
        return {r["id"]: bool(r["correct"]) for r in self.records}


def find_runs(paths: list[Path]) -> list[Path]:
    """Each path is a run folder (config.json + records.jsonl) or a folder holding run folders."""
    found: list[Path] = []
    for path in paths:
        if not path.exists():
            raise RunError(f"{path}: no such run folder")
        if (path / "config.json").exists():
            found.append(path)
        else:
            found += sorted(p.parent for p in path.rglob("config.json") if (p.parent / "records.jsonl").exists())
    return list(dict.fromkeys(found))


def _first_ids(benchmark: str, first: int, cache: dict[str, set[str]]) -> set[str]:
    if benchmark not in cache:
        cache[benchmark] = {q.id for q in load_eval_benchmark(benchmark, limit=first).questions}
    return cache[benchmark]


def load_run(path: Path, first: int | None = None, _ids: dict[str, set[str]] | None = None) -> Run:
    config_path = path / "config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RunError(f"{config_path}: cannot read ({err})") from None
    if not isinstance(config, dict):
        raise RunError(f"{config_path}: expected a JSON object of settings, got {type(config).__name__}")
    for key in REQUIRED:
        if key not in config:
            raise RunError(f"{config_path}: field {key!r} missing")
        if not isinstance(config[key], str):
            raise RunError(f"{config_path}: field {key!r} must be text, got {config[key]!r:.40}")
    records = list(read_records(path / "records.jsonl"))
    check_records(path / "records.jsonl", records, config.get("fingerprint"))
    for i, r in enumerate(records, 1):
        for key in ("id", "correct"):
            if key not in r:
                raise RunError(f"{path / 'records.jsonl'}: record {i}: field {key!r} missing")
    if first is not None:
        ids = _first_ids(config["benchmark"], first, {} if _ids is None else _ids)
        records = [r for r in records if split_id(r["id"])[0] in ids]     # every rotation of them
    return Run(path, config, tuple(records))


def load_runs(paths: list[Path], first: int | None = None) -> tuple[list[Run], list[str]]:
    """The runs with at least one record, and a note for each folder left out."""
    runs, notes, ids = [], [], {}
    for path in find_runs(paths):
        run = load_run(path, first, ids)
        if run.records:
            runs.append(run)
        else:
            notes.append(f"`{path}`: no records{' among the first ' + str(first) if first else ''}, left out")
    return runs, notes
