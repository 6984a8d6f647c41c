"""YAML settings files (recipes, suites) read with errors that name the file, line and column."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from pra.errors import MissingFile, UserError


def read_yaml(path: Path) -> dict[str, Any]:
    """The mapping a YAML file holds ({} for an empty file); bad YAML is a UserError at ``file:line:column``."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: not a YAML file (byte {err.start} is not UTF-8)") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise UserError(f"{where}: not valid YAML ({getattr(err, 'problem', None) or err})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of settings (field: value), got {type(data).__name__}")
    return data


def recipe_blocks(path: Path) -> list[str]:
    """The commands a training recipe has a block for (``label:``, ``train:``), for listings and help."""
    text = "\n" + path.read_text()
    return [block for block in ("label", "train") if f"\n{block}:" in text]


# ---- the one check of a settings mapping against the config dataclass it fills ----------------------

def _describe(tp: Any) -> str:
    import types
    import typing

    if tp is type(None):
        return "null"
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if typing.get_origin(tp) is list:
        return f"a list of {_describe(args[0]) if args else 'values'}"
    if dataclasses.is_dataclass(tp):
        return "a mapping of fields"
    return {bool: "true or false", int: "an integer", float: "a number", str: "text",
            dict: "a mapping"}.get(tp, getattr(tp, "__name__", str(tp)))


def _fits(tp: Any, value: Any) -> bool:
    """Whether ``value`` (as YAML or JSON gives it) has type ``tp``; types it cannot judge are accepted."""
    import types
    import typing

    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return True
    if tp is type(None):
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(_fits(a, value) for a in args)
    if origin is list:
        return isinstance(value, list) and (not args or all(_fits(args[0], v) for v in value))
    if origin is dict or tp is dict:
        return isinstance(value, dict)
    if dataclasses.is_dataclass(tp):
        return isinstance(value, dict)
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)    # finite: the range checks
    if tp is str:
        return isinstance(value, str)
    return True


def type_problems(cls: type, data: dict[str, Any], where: str, prefix: str = "") -> list[str]:
    """One line per field of ``data`` whose value does not have the type its field in dataclass ``cls``
    declares (a nested dataclass field, such as ``search``, checked field by field); fields ``cls`` does
    not have are left to the caller's unknown-field check."""
    import typing

    try:
        hints = typing.get_type_hints(cls)
    except Exception:               # an annotation this module cannot resolve: nothing to check against
        return []
    problems = []
    for name, value in data.items():
        tp = hints.get(name)
        if tp is None:
            continue
        if dataclasses.is_dataclass(tp) and isinstance(value, dict):
            problems += type_problems(tp, value, where, f"{prefix}{name}.")
        elif not _fits(tp, value):
            problems.append(f"{where}: field {prefix}{name} must be {_describe(tp)}, got {value!r:.60}")
    return problems


def check_types(cls: type, data: dict[str, Any], where: str) -> None:
    """``type_problems`` as one UserError, a line per problem."""
    if problems := type_problems(cls, data, where):
        raise UserError("\n".join(problems))


def range_problems(values: dict[str, Any], ranges: tuple, flag=lambda field: "--" + field.replace("_", "-")) -> list[str]:
    """One line per value outside its range. ``ranges``: (field, low, high) with None for no bound, and
    an optional fourth item True when ``low`` itself is not allowed; every number must be finite."""
    import math

    problems = []
    for field, low, high, *strict in ranges:
        value = values.get(field)
        if value is None:
            continue
        above = bool(strict and strict[0])
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and \
            (low is None or (value > low if above else value >= low)) and (high is None or value <= high)
        if not ok:
            bound = ("above" if above else "at least") + f" {low}" if low is not None else ""
            bound = f"{bound} and at most {high}" if high is not None and bound else bound or f"at most {high}"
            finite = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            problems.append(f"{flag(field)} ({field}) must be {'' if finite else 'a finite number '}{bound}, got {value!r}")
    return problems


def shipped_names(folder: Path, block: str | None = None) -> list[str]:
    """The names of the YAML files shipped in ``folder`` (recipes, suites), sorted; with ``block``, only
    the training recipes that have that block (``recipe_blocks``)."""
    return sorted(p.stem for p in folder.glob("*.yaml") if block is None or block in recipe_blocks(p))


def yaml_file(name: str, folder: Path, kind: str) -> Path:
    """A YAML file by path, or the name of one shipped in ``folder`` (recipes, suites)."""
    for path in (Path(name), folder / f"{name}.yaml"):
        if path.is_file():
            return path
    known = ", ".join(shipped_names(folder))
    raise MissingFile(f"no {kind} file {name!r} and none of that name in {folder} (known: {known})")


def check_fields(cls: type, data: dict[str, Any], where: str, blocks: dict[str, type] | None = None) -> None:
    """Settings for dataclass ``cls`` checked, each problem a UserError naming ``where``: a field it does
    not have, a nested block (``blocks``: field name -> its dataclass, e.g. ``search``) that is not a
    mapping or has a field its dataclass does not have, and values of the wrong type (``check_types``)."""
    unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise UserError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    for block, block_cls in (blocks or {}).items():
        values = data.get(block) or {}
        if not isinstance(values, dict):
            raise UserError(f"{where}: `{block}` must be a mapping of {block} fields, got {values!r:.60}")
        unknown = set(values) - {f.name for f in dataclasses.fields(block_cls)}
        if unknown:
            raise UserError(f"{where}: unknown {block} field(s) {', '.join(sorted(unknown))}")
    check_types(cls, data, where)      # `shard: 1`, `policy: 5`, `seed: [1]`: one line each


def read_recipe(name: str, folder: Path, cls: type, section: str | None = None,
                blocks: dict[str, type] | None = None) -> dict[str, Any]:
    """The one recipe loader (``pra eval``, ``pra label``, ``pra train``): the fields that recipe
    ``name`` (a YAML file, or the name of one in ``folder``) sets for ``cls``, from the whole file or from
    its ``section:`` block ({} when it has none), checked by ``check_fields`` naming the file."""
    path = yaml_file(name, folder, "recipe")
    data = read_yaml(path)
    where = str(path)
    if section is not None:
        data, where = data.get(section) or {}, f"{path}: {section}"
        if not isinstance(data, dict):
            raise UserError(f"{path}: `{section}:` must be a mapping of fields, got {data!r:.60}")
    check_fields(cls, data, where, blocks)
    return data
