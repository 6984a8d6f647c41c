"""A planted-signal label set: can the training pipeline teach an agent to read evidence at all?
``python -m training.evidence_check --out runs/labels-evidence [--questions 1000]``, then
``pra train --recipe cpu-evidence``.

The teachers this machine can run give labels near noise (the README's label-quality table), so an
agent that learns little from them does not say whether ``pra train`` is broken or the signal is
missing. This set has a signal by construction. Each medmcqa-train question whose own explanation
(its passage in medcorp-mini) names the gold option's text within what the agent reads of it gives two
one-step traces: ``The correct choice is <gold text>.`` (label 1) and the same with a wrong option's
text that the explanation does not name (label 0). The prompt's documents are the explanation and an
unrelated explanation, in a seeded order. The label can be read from the prompt, by checking the step
against the evidence, and from nothing else: both traces show the same question, options and
documents. So on held-out questions an agent that learned should rank the gold step first with
documents (``with documents`` in ``metrics.json``'s subgroups) and be at chance without them
(``without documents``): the first says the pipeline learns what its prompt shows, the second that it
learned to read rather than to remember answers.
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from corpora.builders import load_corpus
from pra.benchmarks import load_benchmark
from pra.errors import UserError
from pra.types import Question

LABEL_KEY = "evidence_label"
EVIDENCE_CHECK = "evidence-check"      # label_config.json's purpose
STEP = "The correct choice is {}."


def _names(text: str, option: str) -> bool:
    return option.lower() in text.lower()


def check_records(question: Question, own: tuple[str, str, str], other: tuple[str, str, str],
                  rng: random.Random, max_doc_chars: int) -> list[dict[str, Any]]:
    """The two labelled steps of one question (``own``, ``other``: passage id, title, text), or none
    where, as far as the agent reads them, the explanation does not name the gold text, the other
    passage does, or they name every wrong one."""
    mine, theirs = own[2][:max_doc_chars], other[2][:max_doc_chars]
    gold = question.options[question.answer].strip()
    wrong = [t.strip() for k, t in sorted(question.options.items()) if k != question.answer
             and len(t.strip()) >= 3 and not _names(mine + "\n" + theirs, t.strip())
             and not _names(gold, t.strip()) and not _names(t, gold)]
    if len(gold) < 3 or not _names(mine, gold) or _names(theirs, gold) or not wrong:
        return []
    docs = [own, other] if rng.random() < 0.5 else [other, own]
    claims = [(gold, 1), (rng.choice(wrong), 0)]
    return [{"id": f"{question.id}/t{trace}/s1", "question_id": question.id, "trace": trace, "step_index": 1,
             "question": question.question, "options": question.options, "gold": question.answer,
             "steps": [], "step": STEP.format(text), "docs": [[title, body] for _, title, body in docs],
             "doc_ids": [pid for pid, _, _ in docs], LABEL_KEY: label}
            for trace, (text, label) in enumerate(claims)]


def build(questions: int, seed: int = 0, corpus: str = "medcorp-mini", max_doc_chars: int = 400) -> list[dict[str, Any]]:
    """Label records for the first ``questions`` usable medmcqa-train questions in a seeded order."""
    explanations = {p.id.split("#")[0].split(":", 1)[1]: (p.id, p.title, p.text)
                    for p in load_corpus(corpus).passages if p.source == "medmcqa" and p.id.endswith("#0")}
    if len(explanations) < 2:
        raise UserError(f"{corpus}: holds too few medmcqa-train explanations to check steps against")
    rng = random.Random(seed)
    pool = sorted(explanations)
    order = [q for q in load_benchmark("medmcqa-train").questions if q.id in explanations]
    rng.shuffle(order)
    records: list[dict[str, Any]] = []
    for q in order:
        if len(records) == 2 * questions:
            break
        other = q.id
        while other == q.id:
            other = rng.choice(pool)
        records += check_records(q, explanations[q.id], explanations[other], rng, max_doc_chars)
    if len(records) < 2 * questions:
        raise UserError(f"{corpus}: only {len(records) // 2} questions have an explanation naming the gold option "
                        f"(asked for {questions})")
    return records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="folder for labels.jsonl and label_config.json")
    ap.add_argument("--questions", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus", default="medcorp-mini")
    ap.add_argument("--max-doc-chars", dest="max_doc_chars", type=int, default=400,
                    help="what the agent reads of a passage (the recipe's max_doc_chars): the gold text must be in it")
    a = ap.parse_args()
    records = build(a.questions, a.seed, a.corpus, a.max_doc_chars)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    settings = {"purpose": EVIDENCE_CHECK, **{k: v for k, v in vars(a).items() if k != "out"}}
    (a.out / "label_config.json").write_text(json.dumps(settings, indent=2))
    stats = {"questions": len(records) // 2, "steps": len(records),
             "evidence_positive": sum(r[LABEL_KEY] for r in records) / len(records)}
    (a.out / "label_stats.json").write_text(json.dumps(stats, indent=2))
    print(f"{a.out / 'labels.jsonl'}: {len(records)} steps of {len(records) // 2} questions, half labelled 1")


if __name__ == "__main__":
    main()
