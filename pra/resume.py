"""One rule for every folder a run resumes in (``pra eval``'s run folders, ``pra label``'s label sets,
``pra train``'s runs): the settings that made what the folder holds are kept beside it, and a run with
other settings is refused, naming each setting that differs, in one message."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from pra.errors import UserError


def flat(config: dict[str, Any], skip: Iterable[str] = ()) -> dict[str, Any]:
    """The settings as ``field`` and ``block.field`` names (one level of nesting: the ``search:`` block,
    ``engine_args``, a label set's prompt ids), without the fields in ``skip``."""
    skip = set(skip)
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key in skip:
            continue
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


def changes(old: dict[str, Any], new: dict[str, Any], only_old_fields: bool = False) -> list[str]:
    """``field (old -> new)`` for each setting of two ``flat`` configs that differs; ``only_old_fields``
    skips the fields ``old`` does not have."""
    keys = sorted(old if only_old_fields else set(old) | set(new))
    return [f"{k} ({old.get(k, 'not set')!r} -> {new.get(k, 'not set')!r})" for k in keys if old.get(k) != new.get(k)]


def refuse(folder: Path | str, holds: str, changed: list[str], force: str | None = None) -> None:
    """The refusal to resume: a UserError when ``changed`` (from ``changes``) names a setting. ``holds``:
    what the folder holds (records, labels, a training run); ``force``: the flag that sets it aside."""
    if changed:
        raise UserError(f"{folder} holds {holds} made with other settings: they differ in {', '.join(changed)}; "
                        "resume with the same settings, use another --out"
                        + (f", or {force} to set them aside" if force else ""))


def check_same(folder: Path | str, holds: str, old: dict[str, Any], new: dict[str, Any],
               skip: Iterable[str] = ()) -> None:
    """Refuse to resume a folder whose settings ``old`` differ from ``new`` (the fields in ``skip``,
    which only pace the work or choose its share, may change)."""
    refuse(folder, holds, changes(flat(old, skip), flat(new, skip)))
