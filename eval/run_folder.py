"""A run folder knows what it holds. Every record carries the fingerprint of the settings that made it
(``pra.resume.fingerprint`` of the config, without the fields that only say where or how fast,
``NO_EFFECT``, and without the fields its method never reads, ``READ_BY`` from ``eval.methods``), so a folder
cannot mix two configurations: a rerun with other settings is refused, naming the fields that differ,
unless ``force_new`` sets the old files aside; ``pra merge`` and ``pra report`` check the records' own
fingerprints. One process writes a folder at a time (``pra.folder_lock``)."""
from __future__ import annotations

import json
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
from pra import resume
from pra.resume import changes, flat, refusal, refuse

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


def unread(config: dict[str, Any]) -> frozenset[str]:
    """The fields left out of ``config``'s fingerprint: ``NO_EFFECT`` and those its method does not read."""
    method = config.get("method")
    return NO_EFFECT | {key for key, methods in READ_BY.items() if method not in methods}


def settings(config: dict[str, Any]) -> dict[str, Any]:
    """The config as flat ``field`` / ``search.field`` names, as a resume compares them (``pra.resume``)."""
    return flat(config, unread(config))


def fingerprint(config: dict[str, Any]) -> str:
    return resume.fingerprint(config, unread(config))


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``field (old -> new)`` for each setting that differs."""
    return changes(settings(old), settings(new))


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


def _set_aside(out: Path) -> None:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for name in FILES:
        if (out / name).exists():
            (out / name).rename(out / f"{name}.replaced-{stamp}")


@contextmanager
def open_run_folder(out: Path, config: dict[str, Any], force_new: bool = False) -> Iterator[str]:
    """Hold ``out`` for one run with ``config`` and yield its fingerprint, after checking that the records
    already there were made with the same settings (``pra.resume.refusal``; ``force_new``: set them aside
    instead). The folder's config.json is written once the check passes."""
    with exclusive(out / ".lock") as holder:
        if holder is not None:
            raise UserError(f"{out}: another pra process (PID {holder}) is writing this run folder; "
                            "wait for it to finish or use another --out")
        records = list(read_records(out / "records.jsonl"))
        check_records(out / "records.jsonl", records)
        fp = fingerprint(config)
        if records:
            records_fp = next((r["fingerprint"] for r in records if r.get("fingerprint")), None)
            why = refusal(_read_config(out), config, unread(config), stamped=records_fp)
            if not force_new:
                refuse(out, "records", why, force="--force-new")
            if why:
                _set_aside(out)
        # stored without credentials (a --base-url's user:KEY@ or ?token=); resumes read the flags, not this
        (out / "config.json").write_text(json.dumps(redact_config({**config, "fingerprint": fp}), indent=2))
        yield fp
