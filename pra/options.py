"""Config fields that describe themselves, TRL-style: ``option(default, help=..., choices=..., group=...)``
is a dataclass ``field`` whose metadata carries its help text, its allowed values and its group, and
``add_flags`` turns a dataclass's fields into argparse flags from that metadata, so that the command
line's help cannot drift from the config it fills."""
from __future__ import annotations

import argparse
from dataclasses import MISSING, field, fields
from typing import Any, Callable, Iterable


def option(default: Any = MISSING, *, help: str, group: str | None = None, choices: Any = None,
           flag: str | None = None, type: Callable | None = None, metavar: str | None = None,
           default_factory: Any = MISSING, show_default: Any = MISSING, **more: Any):
    """A dataclass field with its command-line description. ``choices``: the allowed values (or a
    function returning them, read when the parser is built, so that a table filled elsewhere is read
    at run time); ``flag``: the flag's name when it is not ``--field-name`` ("" for a field with no flag);
    ``show_default``: what the help prints as the default, when not the default itself."""
    meta = {"help": help, "group": group, "choices": choices, "flag": flag, "type": type, "metavar": metavar,
            **({"show_default": show_default} if show_default is not MISSING else {}), **more}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


def choices_of(meta: dict) -> tuple | None:
    choices = meta.get("choices")
    return tuple(choices()) if callable(choices) else (tuple(choices) if choices is not None else None)


def flag_name(f) -> str | None:
    """The flag that sets field ``f`` ('--beam-width'); None for a field without one."""
    if "help" not in f.metadata:
        return None
    name = f.metadata.get("flag")
    if name == "":
        return None
    return name or "--" + f.name.replace("_", "-")


def _default(f) -> Any:
    if "show_default" in f.metadata:
        return f.metadata["show_default"]
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def help_text(f) -> str:
    """The field's help with its default (and its choices when argparse does not enforce them)."""
    meta = f.metadata
    text = meta["help"]
    default = _default(f)
    if not (default is None or default is False or default == {} or default == []) and "default" not in text:
        text += f" (default: {default})"
    return text.replace("%", "%%")


def _base_type(annotation: Any) -> str:
    """'int' for int, 'int | None' or "int"; the annotation's text otherwise."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    return text.replace(" | None", "").replace("None | ", "").strip()


def add_flags(groups: dict[str, argparse._ArgumentGroup] | argparse.ArgumentParser, cls: type,
              skip: Iterable[str] = (), taken: Iterable[str] = ()) -> list[str]:
    """Add a flag for every field of ``cls`` that has help metadata, into ``groups[field's group]`` (or
    the parser); flags in ``taken`` (already defined by hand) and fields in ``skip`` are left out. Every
    flag's argparse default is None (store_true: None), so that a value not given leaves the recipe's
    or the dataclass's. Returns the names of the fields added."""
    skip, taken, added = set(skip), set(taken), []
    for f in fields(cls):
        name = flag_name(f)
        if name is None or f.name in skip or name in taken:
            continue
        meta = f.metadata
        target = groups.get(meta.get("group"), groups.get(None)) if isinstance(groups, dict) else groups
        kwargs: dict[str, Any] = {"dest": f.name, "help": help_text(f), "default": None}
        kind = _base_type(f.type)
        if kind == "bool" and not meta.get("action"):
            kwargs["action"] = "store_true"
        else:
            if meta.get("action"):
                kwargs["action"] = meta["action"]
            if meta.get("type"):
                kwargs["type"] = meta["type"]
            elif kind in ("int", "float"):
                kwargs["type"] = {"int": int, "float": float}[kind]
            if (choices := choices_of(meta)) is not None and not meta.get("type"):
                kwargs["choices"] = choices
            if meta.get("metavar"):
                kwargs["metavar"] = meta["metavar"]
        target.add_argument(name, **kwargs)
        added.append(f.name)
    return added


def flags_for(cls: type, values: dict[str, Any], base: Any) -> list[str]:
    """The flags that turn config ``base`` (a ``cls``) into ``values``: each field with a flag whose value
    differs, as its command line would give it ('--val-fraction 0.2', '--full', '--lora-targets a,b')."""
    out: list[str] = []
    for f in fields(cls):
        name = flag_name(f)
        if name is None or f.name not in values or values[f.name] == getattr(base, f.name):
            continue
        value = values[f.name]
        if _base_type(f.type) == "bool":
            action = f.metadata.get("action")
            if action is argparse.BooleanOptionalAction:     # --name / --no-name
                if value is not None:
                    out.append(name if value else "--no-" + name[2:])
            elif value is not (action == "store_false"):     # the flag sets True (store_true) or False (store_false)
                out.append(name)
            continue
        out += [name, ",".join(map(str, value)) if isinstance(value, list) else str(value)]
    return out
