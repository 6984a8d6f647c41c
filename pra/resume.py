"""One rule for every folder a run resumes in (``pra eval``'s run folders, ``pra label``'s label sets,
``pra train``'s runs): the settings that made what the folder holds are kept beside it with their
fingerprint (``fingerprint``: a hash of the flat settings, without the fields that do not change
results), and a run with other settings is refused, naming each setting that differs, in one message
(``check``)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterable

from pra.errors import UserError

# What the code made of the settings rather than a setting: the id of the policy's prompt
# (``pra.prompts.policy_prompt_id``). It is kept in the folder's config, compared when the folder resumes
# (``refusal``) and when shards are merged, but not hashed into the fingerprint (it never was for a chat
# model's run, so the fingerprints of those folders hold as written), so that records carry the
# fingerprint of the settings alone.
DERIVED = ("policy_prompt",)


def flat(config: dict[str, Any], skip: Iterable[str] = ()) -> dict[str, Any]:
    """The settings as ``field`` and ``block.field`` names (one level of nesting: the ``search:`` block,
    ``engine_args``, a label set's prompt ids), without the fields in ``skip`` and without the fields
    left unset (None, an empty block): a field that is not set is the same as a field that does not
    exist, so a new field whose default is unset leaves every earlier fingerprint as it was."""
    skip = set(skip) | {"fingerprint"}       # a kept config's own fingerprint is not a setting
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key in skip:
            continue
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in value.items() if v is not None})
        elif value is not None:
            out[key] = value
    return out


def _derived(name: str) -> bool:
    return any(name == d or name.startswith(d + ".") for d in DERIVED)


def fingerprint(config: dict[str, Any], skip: Iterable[str] = ()) -> str:
    """A short hash of ``flat(config, skip)`` without the ``DERIVED`` ids: the same settings give the
    same fingerprint, whatever their order or the fields that do not change results (``skip``)."""
    settings = {k: v for k, v in flat(config, skip).items() if not _derived(k)}
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``field (old -> new)`` for each setting of two ``flat`` configs that differs."""
    return [f"{k} ({old.get(k, 'not set')!r} -> {new.get(k, 'not set')!r})"
            for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def refusal(old: dict[str, Any] | None, new: dict[str, Any], skip: Iterable[str] = (),
            stamped: str | None = None) -> list[str]:
    """What keeps a folder from taking work made with settings ``new`` ([] if nothing): ``old`` is the
    config kept in it (None: none), ``stamped`` the fingerprint its work carries (records' stamps; None:
    the config's own). Each differing setting is named; a bare ``fingerprint (a -> b)`` when the folder's
    config does not tell which."""
    skip = set(skip)
    fp = fingerprint(new, skip)
    if old is not None and stamped in (None, old.get("fingerprint")):
        old_flat, new_flat = flat(old, skip), flat(new, skip)
        if old.get("fingerprint") == fp:      # the same settings: only what the code made of them may differ
            return changes({k: v for k, v in old_flat.items() if _derived(k)},
                           {k: v for k, v in new_flat.items() if _derived(k)})
        return changes(old_flat, new_flat) or [f"fingerprint ({old.get('fingerprint')!r} -> {fp!r})"]
    return [] if stamped in (None, fp) else [f"fingerprint ({stamped!r} -> {fp!r})"]


def refuse(folder: Path | str, holds: str, changed: list[str], force: str | None = None) -> None:
    """The refusal to resume: a UserError when ``changed`` (from ``refusal``) names a setting. ``holds``:
    what the folder holds (records, labels, a training run); ``force``: the flag that sets it aside."""
    if changed:
        raise UserError(f"{folder} holds {holds} made with other settings: they differ in {', '.join(changed)}; "
                        "resume with the same settings, use another --out"
                        + (f", or {force} to set them aside" if force else ""))


def check(folder: Path | str, holds: str, old: dict[str, Any] | None, new: dict[str, Any],
          skip: Iterable[str] = (), stamped: str | None = None, force: str | None = None) -> str:
    """Refuse to resume a folder whose kept config ``old`` (or whose work's fingerprint ``stamped``)
    differs from ``new`` (the fields in ``skip``, which only pace the work or choose its share, may
    change); return ``new``'s fingerprint, to keep beside the settings."""
    skip = set(skip)
    refuse(folder, holds, refusal(old, new, skip, stamped), force)
    return fingerprint(new, skip)
