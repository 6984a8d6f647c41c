"""The step protocol's parser: where a step ends, split a trace into steps, read its answer and its content words."""
from __future__ import annotations

import re
from typing import Sequence

STEP_RE = re.compile(r"(?:^|\n)[ \t]*Step\s+\d+\s*:[ \t]*", re.IGNORECASE)
# "the answer is (X)" and what models write instead: "Answer: X", "the answer is option X", "The answer is
# X: ...", "The correct option is (X)", "the answer would be **X**". Case is ignored except for a bare letter,
# which must be a capital: "the answer is a patient ..." names no option.
ANSWER_RE = re.compile(
    r"(?i:\b(?:answer|option|choice)\s*(?:is|would\s+be|will\s+be|should\s+be|:)\s*:?\s*(?:(?:option|choice)\s+)?)"
    r"[*\"']*(?:\(\s*(?P<paren>[A-Za-z])\s*\)|(?P<bare>[A-Z])(?![A-Za-z0-9]))(?P<after>[ \t]+[a-z]+)?")
# After a bare "A" or "I" (English words too) a lowercase word is read as a sentence, unless it is one of
# these: "The answer is A because ..." names A, "The answer is A patient ..." names nothing.
CONNECTIVES = frozenset("because since as which and or is was for given due".split())

# A step ends where the next begins; base models also start a new question or re-list the options. Not at
# "\nAnswer:": that is where small models write their answer (``Answer: D``).
STEP_STOPS = ("\nStep ", "\nQuestion:", "\nA. ", "\n\n\n")


def split_steps(text: str) -> list[str]:
    """Split ``Step 1: ... Step 2: ...`` into step bodies; text before the first marker is a step too."""
    parts = [p.strip() for p in STEP_RE.split(text)]
    return [p for p in parts if p]


def extract_answer(text: str, letters: Sequence[str]) -> str | None:
    """The question's letter that the text's last answer statement names; None if there is none.

    The protocol's parenthesised ``the answer is (X)`` wins over bare forms (``Answer: X``), which small
    models write too; a letter that is not one of the question's is no answer."""
    valid = {l.upper() for l in letters}
    paren, bare = [], []
    for m in ANSWER_RE.finditer(text):
        if m["paren"]:
            paren.append(m["paren"].upper())
        elif not (m["bare"] in "AI" and m["after"] and m["after"].strip() not in CONNECTIVES):
            bare.append(m["bare"])
    for found in (paren, bare):
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
