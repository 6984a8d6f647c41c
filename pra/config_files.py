"""YAML settings files (recipes, suites) read with errors that name the file, line and column."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from pra.errors import UserError


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
