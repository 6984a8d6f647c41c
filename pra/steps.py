"""The step protocol's parser: where a step ends, split a trace into steps, read its answer and its content words."""
from __future__ import annotations

import re
from typing import Sequence

STEP_RE = re.compile(r"(?:^|\n)[ \t]*Step\s+\d+\s*:[ \t]*", re.IGNORECASE)
ANSWER_RE = re.compile(r"answer\s+is\s*:?\s*\(?\s*([A-Za-z])\s*\)", re.IGNORECASE)
LOOSE_ANSWER_RE = re.compile(r"(?i:answer)\s*(?:is)?\s*:?\s*\(?([A-Z])(?:\)|\.|,|\s|$)")

# A step ends where the next begins; base models also start a new question or re-list the options.
STEP_STOPS = ("\nStep ", "\nQuestion:", "\nAnswer:", "\nA. ", "\n\n\n")


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


STOPWORDS = frozenset("""a an the and or but if then else of to in on at by for with from as is are was were be
been being this that these those it its which who whom whose what when where why how not no so such than
too very can could may might must shall should will would do does did has have had there their they them
we our you your he she his her i me my step therefore thus hence answer option options correct""".split())


def content_words(text: str) -> str:
    """The step's words that carry content: letters/digits, not stopwords, longer than two characters."""
    return " ".join(w for w in re.findall(r"[A-Za-z0-9][A-Za-z0-9\-]*", text)
                    if len(w) > 2 and w.lower() not in STOPWORDS)
