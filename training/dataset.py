"""Training examples for the reward agent, built from ``labels.jsonl`` with the inference prompt.

Each example is the PRA prompt of ``pra.reward_agent`` (the very prompt the engine scores) and two
targets: the reward digit (slot 1) and the search digit (slot 2). Which prompts a labelled step gives
follows what the engine reads at inference:

- ``always`` (the paper's main setting): the engine searches for every candidate and reads the agent
  once, with documents. One example per step, documents in the prompt, search target fixed to 1.
- ``margin`` (selective search): the engine first reads the agent without documents (slot 2 decides
  whether to search), then, if it searched, again with them. Every step gives a prompt without
  documents (target: reward, search label); a search-labelled step also gives one with documents.

Earlier steps appear in the prompt with a reward, as at inference; here it is their own target.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from pra.records import read_records
from pra.reward_agent import ScoreRequest, render_prompt
from pra.types import Question
from training.label import with_search_labels
from pra.errors import UserError

REWARD_LABELS = {"judge": "judge_label", "rollout": "rollout_label", "soft": "soft_label"}
SEARCH_LABELS = ("always", "margin")


@dataclass(frozen=True)
class Example:
    id: str               # step id, with "+docs" when documents are in the prompt
    question_id: str
    request: ScoreRequest
    reward: float         # target p("1") at slot 1: 0 or 1, or a soft label
    search: int           # target digit at slot 2


def load_examples(path: str | Path, reward_label: str = "judge", search_label: str = "always") -> list[Example]:
    if reward_label not in REWARD_LABELS or search_label not in SEARCH_LABELS:
        raise UserError(f"reward_label: one of {', '.join(REWARD_LABELS)}; search_label: one of "
                         f"{', '.join(SEARCH_LABELS)} (got {reward_label!r}, {search_label!r})")
    records = with_search_labels(read_records(path))
    if not records:
        raise UserError(f"{path}: no labelled steps")
    key = REWARD_LABELS[reward_label]
    missing = [r["id"] for r in records if r.get(key) is None or
               (search_label == "margin" and r.get("search_label") is None)]
    if missing:
        needs = "the judge's margin shift" if search_label == "margin" else f"{key!r}"
        raise UserError(f"{path}: {len(missing)} step(s) lack {needs} (e.g. {missing[0]}); "
                         f"label them with that teacher or pick another label setting")
    target = {r["id"]: float(r[key]) for r in records}
    examples = []
    for r in records:
        q = Question(r["question_id"], r["question"], r["options"], r["gold"], "train")
        trace = f"{r['question_id']}/t{r['trace']}"
        earlier = tuple(target.get(f"{trace}/s{j}") for j in range(1, r["step_index"]))
        search = 1 if search_label == "always" else r["search_label"]
        variants = [True] if search_label == "always" else [False] + ([True] if search else [])
        for with_docs in variants:
            docs = tuple((t, x) for t, x in r["docs"]) if with_docs else ()
            examples.append(Example(r["id"] + ("+docs" if with_docs else ""), r["question_id"],
                                    ScoreRequest(q, tuple(r["steps"]), earlier, r["step"], docs),
                                    target[r["id"]], search))
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
    prefix, suffix = render_prompt(backend, example.request, max_doc_chars)
    ids = tok(prefix, add_special_tokens=not backend.has_chat_template)["input_ids"] + \
        tok(suffix, add_special_tokens=False)["input_ids"]
    zero, one, comma = backend.token_ids(["0", "1", ","])
    return ids + [one if example.reward >= 0.5 else zero, comma]
