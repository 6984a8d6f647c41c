"""Training examples for the reward agent, built from ``labels.jsonl`` with the inference prompt.

Each example is the PRA prompt of ``pra.reward_agent`` (the very prompt the engine scores) and two
targets: the reward digit (slot 1) and the search digit (slot 2). Which prompts a labelled step gives
follows what the engine reads at inference:

- ``always`` (the paper's main setting): the engine searches for every candidate and reads the agent
  once, with documents. Each step gives that prompt, search target fixed to 1. The same agent is also
  read without documents whenever another controller runs it (never-search, a threshold on slot 2,
  the θ sweep), so by default each step also gives its prompt without documents, search target 1
  (``without_docs=False`` leaves them out: half the prompts, and the shorter half).
- ``margin`` (selective search): the engine first reads the agent without documents (slot 2 decides
  whether to search), then, if it searched, again with them. Every step gives a prompt without
  documents (target: reward, search label); a search-labelled step also gives one with documents.
  The search label thresholds the judge's or the gold-probability teacher's margin shift
  (``margin_teacher``).

Earlier steps appear in the prompt without rewards. At inference the rewards there would be the
agent's own readouts, which training cannot show: the teacher's targets (what was shown before) are a
number the agent never sees at inference, and since the labels of consecutive steps of a trace agree
often, they teach it to copy the previous reward, which at inference feeds its own errors back. The
readouts of an untrained or half-trained agent would differ from the trained agent's as well. An
earlier readout adds nothing the agent cannot read from the steps themselves except that step's
documents, so the prompt leaves them out on both sides (``pra.reward_agent``: agents trained so
record it; older ones are still read with their own prompt).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pra.records import read_records
from pra.reward_agent import ScoreRequest, render_prompt
from pra.types import Question
from training.label import with_search_labels
from pra.errors import UserError

REWARD_LABELS = {"judge": "judge_label", "rollout": "rollout_label", "soft": "soft_label",
                 "goldprob": "goldprob_label", "goldprob_soft": "goldprob_soft",
                 "evidence": "evidence_label"}      # training.evidence_check: the planted-signal set
SEARCH_LABELS = ("always", "margin")
EARLIER_REWARDS = False     # the prompt variant of the agents trained here (module docstring)


@dataclass(frozen=True)
class Example:
    id: str               # step id, with "+docs" when documents are in the prompt
    question_id: str
    trace: str            # "question_id/tN"
    step_index: int       # 1-based position in the trace
    request: ScoreRequest
    reward: float         # target p("1") at slot 1: 0 or 1, or a soft label
    search: int           # target digit at slot 2
    own_evidence: bool = False   # a passage in the prompt is the question's own source (its explanation)


def is_own_source(doc_id: str, question_id: str) -> bool:
    """Whether a passage was cut from the training row of ``question_id`` (ids ``source:row#chunk``,
    e.g. ``medmcqa:<id>#0``): medcorp and medcorp-mini hold the MedMCQA training explanations, so
    retrieval for a training question can return the text that states its answer."""
    return doc_id.split("#")[0].split(":", 1)[-1] == question_id


def margin_teacher(reward_label: str, records: list[dict]) -> str:
    """Whose margin shift ``margin`` search labels threshold: the reward label's teacher where it
    has one (judge, goldprob), else the judge's where the labels hold it, else goldprob's."""
    if reward_label.startswith("goldprob"):
        return "goldprob"
    return "judge" if reward_label == "judge" or any(r.get("dm") is not None for r in records) else "goldprob"


# A labelled step's fields and what each must hold (``label_row_problem``).
LABEL_FIELDS = {"id": str, "question_id": str, "question": str, "options": dict, "gold": str, "steps": list,
                "step": str, "step_index": int, "docs": list}


def label_row_problem(r: dict[str, Any]) -> str | None:
    """What is wrong with a labels.jsonl record (a field missing or of the wrong type), or None."""
    for name, kind in LABEL_FIELDS.items():
        if name not in r:
            return f"field {name!r} missing"
        if not isinstance(r[name], kind) or (kind is int and isinstance(r[name], bool)):
            return f"field {name!r} must be {kind.__name__}, got {r[name]!r:.40}"
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in r["options"].items()) or r["gold"] not in r["options"]:
        return f"field 'options' must map letters to texts and hold the gold letter {r['gold']!r}"
    if not all(isinstance(s, str) for s in r["steps"]):
        return "field 'steps' must be a list of texts"
    if not all(isinstance(d, (list, tuple)) and len(d) == 2 and all(isinstance(x, str) for x in d) for d in r["docs"]):
        return "field 'docs' must be a list of [title, text] pairs"
    if "trace" not in r:
        return "field 'trace' missing"
    for key in (*REWARD_LABELS.values(), "dm"):
        value = r.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)):
            return f"field {key!r} must be a finite number, got {value!r:.40}"
    return None


def load_examples(path: str | Path, reward_label: str = "judge", search_label: str = "always",
                  without_docs: bool = True) -> list[Example]:
    """The examples of a labels file (module docstring); ``without_docs`` only matters for ``always``."""
    if reward_label not in REWARD_LABELS or search_label not in SEARCH_LABELS:
        raise UserError(f"reward_label: one of {', '.join(REWARD_LABELS)}; search_label: one of "
                         f"{', '.join(SEARCH_LABELS)} (got {reward_label!r}, {search_label!r})")
    records = list(read_records(path))
    if not records:
        raise UserError(f"{path}: no labelled steps")
    for n, r in enumerate(records, 1):
        if why := label_row_problem(r):
            raise UserError(f"{path}: record {n} (id {str(r.get('id'))[:60]!r}): {why}")
    teacher = margin_teacher(reward_label, records)
    records = with_search_labels(records, teacher)
    key = REWARD_LABELS[reward_label]
    missing = [r["id"] for r in records if r.get(key) is None or
               (search_label == "margin" and r.get("search_label") is None)]
    if missing:
        needs = f"the {teacher}'s margin shift" if search_label == "margin" else f"{key!r}"
        raise UserError(f"{path}: {len(missing)} step(s) lack {needs} (e.g. {missing[0]}); "
                         f"label them with that teacher or pick another label setting")
    examples = []
    for r in records:
        q = Question(r["question_id"], r["question"], r["options"], r["gold"], "train")
        trace = f"{r['question_id']}/t{r['trace']}"
        no_rewards = (None,) * len(r["steps"])
        if search_label == "always":
            search, variants = 1, ([False] if without_docs else []) + [True]
        else:
            search = r["search_label"]
            variants = [False] + ([True] if search else [])
        for with_docs in variants:
            docs = tuple((t, x) for t, x in r["docs"]) if with_docs else ()
            own = with_docs and any(is_own_source(d, r["question_id"]) for d in r.get("doc_ids", ()))
            examples.append(Example(r["id"] + ("+docs" if with_docs else ""), r["question_id"], trace, r["step_index"],
                                    ScoreRequest(q, tuple(r["steps"]), no_rewards, r["step"], docs),
                                    float(r[key]), search, own))
    return examples


def split_by_question(examples: list[Example], val_fraction: float, seed: int) -> tuple[list[Example], list[Example]]:
    """(train, validation), no question on both sides: its steps share a question and a trace."""
    ids = sorted({e.question_id for e in examples})
    random.Random(seed).shuffle(ids)
    val = set(ids[:round(len(ids) * val_fraction)])
    return [e for e in examples if e.question_id not in val], [e for e in examples if e.question_id in val]


def encode(backend, example: Example, max_doc_chars: int) -> list[int]:
    """Token ids of the prompt, tokenized as ``slot_logprobs`` does (prefix, then suffix), followed by
    the target reward digit and ``,``: the logits at the last prompt token and at ``,`` are the two
    slots. The digits come from ``backend.token_ids``, the ids the readouts use."""
    tok = backend.tokenizer
    prefix, suffix = render_prompt(backend, example.request, max_doc_chars, EARLIER_REWARDS)
    ids = tok(prefix, add_special_tokens=not backend.has_chat_template)["input_ids"] + \
        tok(suffix, add_special_tokens=False)["input_ids"]
    zero, one, comma = backend.token_ids(["0", "1", ","])
    return ids + [one if example.reward >= 0.5 else zero, comma]
