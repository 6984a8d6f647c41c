"""A run folder knows what it holds. Every record carries the fingerprint of the settings that made it
(a hash of the config, the id of the policy's prompt among it, without the fields that only say where or
how fast, ``NO_EFFECT``, and without the fields its method never reads, ``READ_BY`` from ``eval.methods``), so a folder
cannot mix two configurations: a rerun with other settings is refused, naming the fields that differ,
unless ``force_new`` sets the old files aside; ``pra merge`` and ``pra report`` check the records' own
fingerprints. One process writes a folder at a time (``pra.folder_lock``)."""
from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from eval.methods import SELECTIVE, readers
from pra.errors import UserError
from pra.folder_lock import exclusive
from pra.records import read_records
from pra.redact import redact_config
from pra.resume import changes, flat, refuse

# Fields that do not change a run's results: where it writes, which share of the questions it takes, how
# many at once, and the throughput knobs. Every other config field, present or future, is in the fingerprint.
NO_EFFECT = frozenset({"out", "shard", "limit", "max_active", "skip_bad", "batch_size", "base_url", "agent_base_url",
                       "fingerprint", "show",
                       "benchmark_hash"})   # what the benchmark held (for compare and merge), not a setting
# Fields only some methods read (``eval.methods``): for the other methods they are not part of the
# fingerprint, so that a new default (another default reward agent, say) leaves every CoT or direct run
# resumable. The search block's fields are in every fingerprint, as they always were.
READ_BY = {name: frozenset(readers(name)) for name in SELECTIVE if not name.startswith("search.")}
FILES = ("records.jsonl", "config.json", "summary.json")


def settings(config: dict[str, Any], every_field: bool = False,
             assumed: dict[str, Any] | None = None) -> dict[str, Any]:
    """The config as flat ``field`` / ``search.field`` names, without the fields in ``NO_EFFECT``; without
    those its method does not read, unless ``every_field`` (the fingerprints of folders written before
    ``READ_BY``); and without a field that holds its ``assumed`` value, the value folders written before
    the field existed were made with, so that their fingerprints still hold."""
    method = config.get("method")
    assumed = assumed or {}
    return flat({key: value for key, value in config.items()
                 if not (key in NO_EFFECT or (not every_field and key in READ_BY and method not in READ_BY[key]))
                 and not (key in assumed and value == assumed[key])})


def fingerprint(config: dict[str, Any], every_field: bool = False, assumed: dict[str, Any] | None = None) -> str:
    return hashlib.sha256(json.dumps(settings(config, every_field, assumed), sort_keys=True).encode()).hexdigest()[:16]


def differences(old: dict[str, Any], new: dict[str, Any], only_old_fields: bool = False) -> list[str]:
    """``field (old -> new)`` for each setting that differs; ``only_old_fields`` skips fields the old
    config does not have (configs written before records carried fingerprints)."""
    return changes(settings(old), settings(new), only_old_fields)


def check_records(path: Path, records: Iterable[dict[str, Any]], expected: str | None = None) -> None:
    """Refuse records that were made with different settings (or with other settings than ``expected``);
    records written before fingerprints existed carry none and pass."""
    counts = Counter(str(r["fingerprint"]) for r in records if isinstance(r, dict) and r.get("fingerprint"))
    if len(counts) > 1:
        mix = ", ".join(f"{fp}: {n} records" for fp, n in counts.most_common())
        raise UserError(f"{path}: records made with {len(counts)} different settings ({mix}); the folder mixes runs")
    if expected and counts and expected not in counts:
        (found,) = counts
        raise UserError(f"{path}: records made with settings {found}, but its config.json says {expected}")


def _read_config(out: Path) -> dict[str, Any] | None:
    path = out / "config.json"
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise UserError(f"{path}:{err.lineno}: not valid JSON ({err.msg}); use --force-new or another --out") from None


def _refusal(old: dict[str, Any] | None, new: dict[str, Any], records_fp: str | None,
             assumed: dict[str, Any]) -> list[str]:
    """The settings that keep a folder whose records carry ``records_fp`` (None: written before
    fingerprints) and whose config.json is ``old`` from taking records made with ``new`` ([] if it can
    take them). ``assumed``: the values of fields that configs written before those fields existed were
    made with."""
    fp = fingerprint(new, assumed=assumed)
    if records_fp == fp:
        return []
    if old is None or (records_fp is not None and records_fp != old.get("fingerprint")):
        return [f"fingerprint ({records_fp!r} -> {fp!r})"]       # no config.json that tells which
    changed = differences({**assumed, **old}, new, only_old_fields=records_fp is None)
    if records_fp is not None and not changed and records_fp != fingerprint(old, every_field=True):
        changed = [f"fingerprint ({records_fp!r} -> {fp!r})"]
    return changed


def _restamp(path: Path, records: list[dict[str, Any]], fp: str) -> None:
    """Give a folder written before ``READ_BY`` this scheme's fingerprint (same settings, records kept):
    the whole file is rewritten beside it and then moved over it, so a crash leaves the old one."""
    tmp = path.with_suffix(".restamp")
    with open(tmp, "w") as fh:
        for r in records:
            fh.write(json.dumps({**r, "fingerprint": fp}, ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _set_aside(out: Path) -> None:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for name in FILES:
        if (out / name).exists():
            (out / name).rename(out / f"{name}.replaced-{stamp}")


@contextmanager
def open_run_folder(out: Path, config: dict[str, Any], force_new: bool = False,
                    assumed: dict[str, Any] | None = None) -> Iterator[str]:
    """Hold ``out`` for one run with ``config`` and yield its fingerprint, after checking that the records
    already there were made with the same settings (``force_new``: set them aside instead; ``assumed``:
    what a config written before a field existed is taken to hold there). The folder's config.json is
    written once the check passes."""
    assumed = assumed or {}
    with exclusive(out / ".lock") as holder:
        if holder is not None:
            raise UserError(f"{out}: another pra process (PID {holder}) is writing this run folder; "
                            "wait for it to finish or use another --out")
        records = list(read_records(out / "records.jsonl"))
        check_records(out / "records.jsonl", records)
        fp = fingerprint(config, assumed=assumed)
        if records:
            records_fp = next((r["fingerprint"] for r in records if r.get("fingerprint")), None)
            why = _refusal(_read_config(out), config, records_fp, assumed)
            if not force_new:
                refuse(out, "records", why, force="--force-new")
            if why:
                _set_aside(out)
            elif records_fp not in (None, fp):
                _restamp(out / "records.jsonl", records, fp)
        # stored without credentials (a --base-url's user:KEY@ or ?token=); resumes read the flags, not this
        (out / "config.json").write_text(json.dumps(redact_config({**config, "fingerprint": fp}), indent=2))
        yield fp
