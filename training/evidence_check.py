"""A planted-signal label set: can the training pipeline teach an agent to read evidence at all?
``pra agent evidence-check --out runs/labels-evidence [--questions 1000]``, then
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

That set is solved by string matching: only the gold option's text is in the documents, so the rule
"is the step's option in the documents?" scores AUROC 1.0 on it. ``--contrast`` builds the set that
rule cannot solve (``build_contrast``): both options' texts are in the documents, as often each, and
the documents support the gold one and refute the wrong one, in copies (the question's own
explanation, which names the gold option, beside a note refuting the wrong one as many times) and in
paraphrase (one sentence naming both: "not X but Y", a negation, a contradicting claim, in either
order). ``rule_baselines`` gives the AUROC of three rules on the same steps: substring (is the option
in the documents), BM25 (the option's text against each document, best document) and length (of the
step); an agent's claim to read evidence holds only where it beats all three with its interval.
``--baselines`` writes them for a label set's held-out steps.
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any, Callable

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


def _pairs(questions: int, seed: int, corpus: str, exclude: frozenset[str],
           make: Callable[..., list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Records from ``make(question, its explanation, another question's, rng, pairs so far)`` (two per
    usable question, [] for an unusable one) over medmcqa-train questions that have an explanation in
    ``corpus`` and are not in ``exclude``, in a seeded order, until ``questions`` are usable."""
    explanations = {p.id.split("#")[0].split(":", 1)[1]: (p.id, p.title, p.text)
                    for p in load_corpus(corpus).passages if p.source == "medmcqa" and p.id.endswith("#0")}
    if len(explanations) < 2:
        raise UserError(f"{corpus}: holds too few medmcqa-train explanations to check steps against")
    rng = random.Random(seed)
    pool = sorted(explanations)
    order = [q for q in load_benchmark("medmcqa-train").questions if q.id in explanations and q.id not in exclude]
    rng.shuffle(order)
    records: list[dict[str, Any]] = []
    for q in order:
        if len(records) == 2 * questions:
            break
        other = q.id
        while other == q.id:
            other = rng.choice(pool)
        records += make(q, explanations[q.id], explanations[other], rng, len(records) // 2)
    return records


def build(questions: int, seed: int = 0, corpus: str = "medcorp-mini", max_doc_chars: int = 400) -> list[dict[str, Any]]:
    """Label records for the first ``questions`` usable medmcqa-train questions in a seeded order."""
    records = _pairs(questions, seed, corpus, frozenset(),
                     lambda q, own, other, rng, _: check_records(q, own, other, rng, max_doc_chars))
    if len(records) < 2 * questions:
        raise UserError(f"{corpus}: only {len(records) // 2} questions have an explanation naming the gold option "
                        f"(asked for {questions})")
    return records


# The contrast set's evidence. A note refuting the wrong option (one sentence per time the explanation
# names the gold one), and one-sentence paraphrases naming both, the wrong one first or second.
REFUTE = ("{w} is not the answer to this question.", "It is not {w}.", "{w} is wrong here.",
          "One should not pick {w}.", "{w} does not fit this case.")
PARAPHRASE = ("The answer is not {w} but {g}.", "Not {w}: the answer is {g}.", "{g} is correct here, and {w} is not.",
              "{w} is incorrect; {g} is right.", "It is {g}, not {w}.",
              "Although {w} is often given, the correct one is {g}.", "The right one is {g}; {w} is wrong.",
              "{w} is a tempting choice, but {g} is the right one.")
FORMS = ("copy", "paraphrase")


def count_named(text: str, option: str) -> int:
    return text.lower().count(option.lower())


def contrast_records(question: Question, own: tuple[str, str, str], other: tuple[str, str, str],
                     rng: random.Random, max_doc_chars: int, form: str) -> list[dict[str, Any]]:
    """The two labelled steps of one question in the contrast set (module docstring), or none where
    the gold option's text is too short, the other passage names an option, no wrong option is
    distinct from the gold one, or (``copy``) the explanation, as far as the agent reads it, does not
    name the gold text, names a wrong one, or names the gold one more than ``len(REFUTE)`` times."""
    mine, theirs = own[2][:max_doc_chars], other[2][:max_doc_chars]
    gold = question.options[question.answer].strip()
    wrong = [t.strip() for k, t in sorted(question.options.items()) if k != question.answer
             and len(t.strip()) >= 3 and not _names(theirs, t.strip()) and not _names(gold, t.strip())
             and not _names(t, gold) and not (form == "copy" and _names(mine, t.strip()))]
    if len(gold) < 3 or _names(theirs, gold) or not wrong:
        return []
    w = rng.choice(wrong)
    if form == "copy":
        times = count_named(mine, gold)
        if not 1 <= times <= len(REFUTE):
            return []
        note = " ".join(t.format(w=w) for t in rng.sample(REFUTE, times))
        docs = [own, (f"note:{question.id}", "Note", note), other]
    else:
        statement = rng.choice(PARAPHRASE).format(w=w, g=gold)
        docs = [(f"statement:{question.id}", "Statement", statement), other]
    rng.shuffle(docs)
    return [{"id": f"{question.id}/t{trace}/s1", "question_id": question.id, "trace": trace, "step_index": 1,
             "question": question.question, "options": question.options, "gold": question.answer,
             "steps": [], "step": STEP.format(text), "docs": [[title, body] for _, title, body in docs],
             "doc_ids": [pid for pid, _, _ in docs], "form": form, LABEL_KEY: label}
            for trace, (text, label) in enumerate([(gold, 1), (w, 0)])]


def build_contrast(questions: int, seed: int = 0, corpus: str = "medcorp-mini", max_doc_chars: int = 400,
                   exclude: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """The contrast set for ``questions`` medmcqa-train questions not in ``exclude`` (e.g. the questions
    an agent trained on), in a seeded order; the forms alternate, so half are copies, half paraphrases."""
    records = _pairs(questions, seed, corpus, exclude, lambda q, own, other, rng, n: contrast_records(
        q, own, other, rng, max_doc_chars, FORMS[n % 2]))
    if len(records) < 2 * questions:
        raise UserError(f"{corpus}: only {len(records) // 2} questions fit the contrast set (asked for {questions})")
    return records


def trained_questions(labels_questions: int = 1000, seed: int = 0, val_fraction: float = 0.2,
                      max_doc_chars: int = 400) -> frozenset[str]:
    """The questions ``pra-smollm2-evidence`` trained on: the training side of the cpu-evidence recipe's
    split of ``build(1000, seed=0)``."""
    ids = sorted({r["question_id"] for r in build(labels_questions, seed, max_doc_chars=max_doc_chars)})
    random.Random(seed).shuffle(ids)                 # as training.dataset.split_by_question draws them
    return frozenset(ids[round(len(ids) * val_fraction):])


def option_text(step: str) -> str:
    return step.removeprefix(STEP.split("{}")[0]).removesuffix(STEP.split("{}")[1])


def _tokens(text: str) -> list[str]:
    import re
    return re.findall(r"[a-z0-9]+", text.lower())


def bm25_scores(queries: list[str], prompts_docs: list[list[str]], k1: float = 1.5, b: float = 0.75) -> list[float]:
    """Okapi BM25 of each query against each of its prompt's documents (best document), with the
    document frequencies of all the prompts' distinct documents."""
    import math
    from collections import Counter

    corpus = {d: Counter(_tokens(d)) for docs in prompts_docs for d in docs}
    n = len(corpus)
    avg = sum(sum(c.values()) for c in corpus.values()) / max(n, 1)
    df = Counter(t for c in corpus.values() for t in c)
    idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def score(query: str, doc: str) -> float:
        tf, length = corpus[doc], sum(corpus[doc].values())
        return sum(idf.get(t, 0.0) * tf[t] * (k1 + 1) / (tf[t] + k1 * (1 - b + b * length / avg))
                   for t in set(_tokens(query)) if t in tf)

    return [max((score(q, d) for d in docs), default=0.0) for q, docs in zip(queries, prompts_docs)]


def rule_scores(examples: list, max_doc_chars: int = 400) -> dict[str, list[float]]:
    """Each rule's score of each example (training.dataset.Example) from what the agent reads: the
    step and the first ``max_doc_chars`` of each document."""
    options = [option_text(e.request.step) for e in examples]
    docs = [[text[:max_doc_chars] for _, text in e.request.docs] for e in examples]
    return {"substring": [float(any(_names(d, o) for d in ds)) for o, ds in zip(options, docs)],
            "bm25": bm25_scores(options, docs),
            "length": [float(len(e.request.step)) for e in examples]}


def oriented(scores: list[float], labels: list[int]) -> list[float]:
    """A rule's scores turned to the direction in which they rank the labels better (a rule below chance
    read the other way round is above it); chosen on the same steps, which favours the rule."""
    from training.bootstrap import _auroc
    import numpy as np

    auroc = _auroc(np.array(labels), np.array(scores))
    return [-x for x in scores] if auroc is not None and auroc < 0.5 else list(scores)


def rule_baselines(examples: list, max_doc_chars: int = 400, seed: int = 0) -> dict[str, Any]:
    """AUROC of each rule (``rule_scores``) against the label, with its question-bootstrap interval, as
    scored and read in its better direction (``oriented``: ``best_direction_auroc``)."""
    import numpy as np

    from training.bootstrap import BOOTSTRAP_RESAMPLES, _auroc, question_bootstrap

    y = np.array([int(e.reward >= 0.5) for e in examples])
    out: dict[str, Any] = {"examples": len(examples), "questions": len({e.question_id for e in examples}),
                           "resamples": BOOTSTRAP_RESAMPLES}
    for name, scores in rule_scores(examples, max_doc_chars).items():
        p = np.array(scores)
        auroc = _auroc(y, p)
        out[name] = {"reward_auroc": auroc,
                     "reward_auroc_ci": question_bootstrap(examples, lambda i: _auroc(y[i], p[i]), seed=seed),
                     "best_direction_auroc": None if auroc is None else max(auroc, 1 - auroc)}
    return out


def held_out(labels: Path, val_fraction: float, seed: int) -> list:
    """The labels' held-out steps, read with their documents, as ``pra train`` splits them."""
    from training.dataset import load_examples, split_by_question

    return split_by_question(load_examples(labels, "evidence", "always", without_docs=False), val_fraction, seed)[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="folder for labels.jsonl and label_config.json "
                    "(with --baselines: the folder whose labels.jsonl to read, and where baselines.json goes)")
    ap.add_argument("--questions", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus", default="medcorp-mini")
    ap.add_argument("--max-doc-chars", dest="max_doc_chars", type=int, default=400,
                    help="what the agent reads of a passage (the recipe's max_doc_chars): the gold text must be in it")
    ap.add_argument("--contrast", action="store_true",
                    help="the set string matching cannot solve: both options in the documents, one refuted")
    ap.add_argument("--exclude-trained", dest="exclude_trained", action="store_true",
                    help="leave out the questions pra-smollm2-evidence trained on (cpu-evidence's training split)")
    ap.add_argument("--baselines", action="store_true",
                    help="write baselines.json: the substring, BM25 and length rules' AUROC on the held-out steps")
    ap.add_argument("--val-fraction", dest="val_fraction", type=float, default=0.2, help="with --baselines")
    a = ap.parse_args()
    if a.baselines:
        steps = held_out(a.out / "labels.jsonl", a.val_fraction, a.seed)
        result = {"labels": str(a.out / "labels.jsonl"), "val_fraction": a.val_fraction, "seed": a.seed,
                  **rule_baselines(steps, a.max_doc_chars)}
        (a.out / "baselines.json").write_text(json.dumps(result, indent=2))
        print(json.dumps(result, indent=2))
        return
    exclude = trained_questions(max_doc_chars=a.max_doc_chars) if a.exclude_trained else frozenset()
    if a.contrast:
        records = build_contrast(a.questions, a.seed, a.corpus, a.max_doc_chars, exclude)
    else:
        records = [r for r in build(a.questions + len(exclude), a.seed, a.corpus, a.max_doc_chars)
                   if r["question_id"] not in exclude][:2 * a.questions]
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    settings = {"purpose": EVIDENCE_CHECK, **{k: v for k, v in vars(a).items() if k not in ("out", "baselines")}}
    (a.out / "label_config.json").write_text(json.dumps(settings, indent=2))
    stats = {"questions": len(records) // 2, "steps": len(records),
             "evidence_positive": sum(r[LABEL_KEY] for r in records) / len(records)}
    (a.out / "label_stats.json").write_text(json.dumps(stats, indent=2))
    print(f"{a.out / 'labels.jsonl'}: {len(records)} steps of {len(records) // 2} questions, half labelled 1")


if __name__ == "__main__":
    main()
