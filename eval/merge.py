"""``pra merge OUT SHARD_DIR...``: join the run folders of one evaluation split with ``--shard i/n``
into one run folder, as if it had run on one machine.

Refused: configs that differ in anything but ``shard`` and ``out``, a question answered by two shards
(the error names both files), a record whose id is not in the benchmark's questions, an existing
OUT/records.jsonl. Reported, not refused: gaps, i.e. questions of the benchmark/limit no shard has
answered yet (a shard still running, or one not given); the summary counts them as ``missing``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pra.benchmarks import content_hash, load_eval_benchmark
from pra.selection import questions_asked
from eval.run import summarize
from eval.run_folder import check_records
from pra.records import read_records
from pra.errors import UserError

FREE_FIELDS = ("shard", "out")        # the only config fields shards may differ in


class MergeError(UserError):
    pass


@dataclass
class Merged:
    out: Path
    records: int
    missing: list[str]                # expected question ids no shard holds, in benchmark order
    summary: dict[str, Any]


def _config(shard: Path) -> dict[str, Any]:
    path = shard / "config.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise MergeError(f"{path}: cannot read the run's config ({err})") from None


def _check_configs(shards: list[Path], configs: list[dict[str, Any]]) -> None:
    first = configs[0]
    for shard, cfg in zip(shards[1:], configs[1:]):
        for key in sorted(set(first) | set(cfg)):
            if key == "benchmark_hash" and (key not in first or key not in cfg):
                continue                 # a shard written before configs held it: its ids are checked instead
            if key not in FREE_FIELDS and first.get(key) != cfg.get(key):
                raise MergeError(f"{shard / 'config.json'}: field {key!r} is {cfg.get(key)!r}, but "
                                 f"{shards[0] / 'config.json'} has {first.get(key)!r}")
    if len({cfg.get("shard") for cfg in configs}) < len(configs):
        raise MergeError("two shard folders have the same shard: " + ", ".join(
            f"{s / 'config.json'} ({c.get('shard')})" for s, c in zip(shards, configs)))


def _asked(cfg: dict[str, Any]) -> str:
    """How a run chose its questions, in words, for errors."""
    chosen = (f"sample {cfg['sample']}, seed {cfg.get('seed', 0)}" if cfg.get("sample")
              else f"first {cfg['limit']}" if cfg.get("limit") else "all")
    return f"{chosen}, options {cfg.get('permute', 'none')}"


def merge_shards(out: Path, shards: list[Path], allow_different: bool = False, warn=None) -> Merged:
    """Join ``shards`` into ``out``. The benchmark as it is now must hold what the shards ran on (their
    configs' ``benchmark_hash``); ``allow_different`` merges anyway, ``warn`` getting what differs."""
    if not shards:
        raise MergeError("give at least one shard folder")
    if (out / "records.jsonl").exists():
        raise MergeError(f"{out / 'records.jsonl'} exists; merge into a new folder")
    configs = [_config(s) for s in shards]
    for shard, c in zip(shards, configs):
        if not isinstance(c, dict) or not isinstance(c.get("benchmark"), str):
            raise MergeError(f"{shard / 'config.json'}: not a run config (no 'benchmark' field)")
    _check_configs(shards, configs)
    cfg = next((c for c in configs if c.get("benchmark_hash")), configs[0])
    load = load_eval_benchmark(cfg["benchmark"], skip_bad=cfg.get("skip_bad", False))
    if cfg.get("benchmark_hash") and cfg["benchmark_hash"] != content_hash(load.questions):
        why = (f"{cfg['benchmark']} now holds other questions (hash {content_hash(load.questions)}) than when the "
               f"shards ran (hash {cfg['benchmark_hash']})")
        if not allow_different:
            raise MergeError(f"{why}; use --allow-different to merge anyway")
        if warn is not None:
            warn(f"--allow-different: {why}")
    # What the whole run asks (first N or seeded sample, each under its rotations): the shards' union.
    questions = questions_asked(load.questions, limit=cfg.get("limit"), sample=cfg.get("sample"),
                                seed=cfg.get("seed", 0), permute=cfg.get("permute", "none"))
    expected = {q.id for q in questions}
    owner: dict[str, Path] = {}
    records: dict[str, dict[str, Any]] = {}
    for shard in shards:
        path = shard / "records.jsonl"
        if not path.exists():
            raise MergeError(f"{path}: no records file")
        shard_records = list(read_records(path))
        check_records(path, shard_records, cfg.get("fingerprint"))
        for n, r in enumerate(shard_records, 1):
            if "id" not in r:
                raise MergeError(f"{path}: record {n}: field 'id' missing")
            rid = str(r["id"])
            if rid in owner:
                raise MergeError(f"question {rid!r} is in both {owner[rid]} and {path}: shards overlap")
            if rid not in expected:
                raise MergeError(f"{path}: record {n}: id {rid!r} is not among the {len(questions)} questions "
                                 f"the run asks of {cfg['benchmark']} ({_asked(cfg)})")
            owner[rid] = path
            records[rid] = r
    ordered = [records[q.id] for q in questions if q.id in records]
    missing = [q.id for q in questions if q.id not in records]
    out.mkdir(parents=True, exist_ok=True)
    with (out / "records.jsonl").open("w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in ordered)
    (out / "config.json").write_text(json.dumps({**cfg, "shard": None, "out": str(out)}, indent=2))
    method = cfg["method"]
    # The same keys as run_eval's summary.json, plus where the records came from and the gaps.
    summary = {"benchmark": cfg["benchmark"], "method": method, "policy": cfg["policy"], "of": len(load.questions),
               "permute": cfg.get("permute", "none"),
               **({"sample": cfg["sample"], "seed": cfg.get("seed", 0)} if cfg.get("sample") else {}),
               **({"reward_agent": cfg.get("reward_agent")} if method == "pra" else {}),
               **({"search": cfg.get("search_controller")} if method in ("pra", "pulse-front", "pulse-step") else {}),
               "skipped_bad_rows": load.skipped, "merged_from": [str(s) for s in shards], "missing": len(missing), **summarize(ordered)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return Merged(out, len(ordered), missing, summary)
