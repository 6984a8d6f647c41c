"""The step protocol's parser: split a trace into steps and read its answer."""
from __future__ import annotations

import re
from typing import Sequence

STEP_RE = re.compile(r"(?:^|\n)[ \t]*Step\s+\d+\s*:[ \t]*", re.IGNORECASE)
ANSWER_RE = re.compile(r"answer\s+is\s*:?\s*\(?\s*([A-Za-z])\s*\)", re.IGNORECASE)
LOOSE_ANSWER_RE = re.compile(r"(?i:answer)\s*(?:is)?\s*:?\s*\(?([A-Z])(?:\)|\.|,|\s|$)")


def split_steps(text: str) -> list[str]:
    """Split ``Step 1: ... Step 2: ...`` into step bodies; text before the first marker is a step too."""
    parts = [p.strip() for p in STEP_RE.split(text)]
    return [p for p in parts if p]


def extract_answer(text: str, letters: Sequence[str]) -> str | None:
    """The last ``the answer is (X)`` whose X is one of the question's letters; None if there is none.

    A bare ``answer is X`` / ``Answer: X`` is accepted too (small models drop the parentheses)."""
    valid = {l.upper() for l in letters}
    for pattern in (ANSWER_RE, LOOSE_ANSWER_RE):
        found = [m.group(1).upper() for m in pattern.finditer(text)]
        found = [f for f in found if f in valid]
        if found:
            return found[-1]
    return None
