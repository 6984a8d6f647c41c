"""The planted-signal label set (training.evidence_check): the label is readable from the documents
and from nothing else in the prompt."""
import json
import subprocess
import sys

import pytest

from pra.errors import UserError
from training.dataset import load_examples, split_by_question
from training.evidence_check import (LABEL_KEY, PARAPHRASE, bm25_scores, build, build_contrast, count_named,
                                     rule_baselines)

MAX_DOC_CHARS = 400


@pytest.fixture(scope="module")
def records():
    return build(30, seed=0, max_doc_chars=MAX_DOC_CHARS)


def named_option(record):
    return record["step"].removeprefix("The correct choice is ").removesuffix(".")


def test_two_claims_per_question_one_gold_with_the_same_prompt(records):
    assert len(records) == 60 and sum(r[LABEL_KEY] for r in records) == 30
    by_question = {}
    for r in records:
        by_question.setdefault(r["question_id"], []).append(r)
    assert len(by_question) == 30
    for gold, wrong in by_question.values():
        assert (gold[LABEL_KEY], wrong[LABEL_KEY]) == (1, 0)
        for key in ("question", "options", "gold", "docs", "doc_ids", "steps"):
            assert gold[key] == wrong[key]
        assert named_option(gold) == gold["options"][gold["gold"]]
        assert named_option(wrong) in wrong["options"].values() and named_option(wrong) != named_option(gold)


def test_only_the_questions_own_explanation_names_the_gold_option(records):
    for r in records:
        own = [i for i, d in enumerate(r["doc_ids"]) if d == f"medmcqa:{r['question_id']}#0"]
        assert len(own) == 1 and len(r["docs"]) == 2
        visible = [text[:MAX_DOC_CHARS].lower() for _, text in r["docs"]]
        named = named_option(r).lower()
        if r[LABEL_KEY]:
            assert named in visible[own[0]] and named not in visible[1 - own[0]]
        else:
            assert not any(named in v for v in visible)
    assert {r["doc_ids"].index(f"medmcqa:{r['question_id']}#0") for r in records} == {0, 1}   # order varies


def test_seeded_and_trainable(records, tmp_path):
    assert build(30, seed=0, max_doc_chars=MAX_DOC_CHARS) == records
    assert [r["question_id"] for r in build(30, seed=1)] != [r["question_id"] for r in records]
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    examples = load_examples(path, "evidence", "always")
    assert len(examples) == 120 and {e.reward for e in examples} == {0.0, 1.0}
    assert sum(bool(e.request.docs) for e in examples) == 60 and all(e.search == 1 for e in examples)
    assert all(e.own_evidence for e in examples if e.request.docs)
    train, val = split_by_question(examples, 0.25, seed=0)
    assert len(val) == 4 * 8 and not {e.question_id for e in train} & {e.question_id for e in val}


def test_asking_for_more_than_the_corpus_holds_is_a_clear_error():
    with pytest.raises(UserError, match="only .* questions have an explanation naming the gold option"):
        build(5000)


def test_command_writes_the_labels_and_their_settings(tmp_path):
    subprocess.run([sys.executable, "-m", "training.evidence_check", "--out", str(tmp_path), "--questions", "5"],
                   check=True, capture_output=True)
    lines = (tmp_path / "labels.jsonl").read_text().splitlines()
    assert len(lines) == 10 and json.loads(lines[0])[LABEL_KEY] == 1
    settings = json.loads((tmp_path / "label_config.json").read_text())
    assert settings["purpose"] == "evidence-check" and settings["questions"] == 5
    stats = json.loads((tmp_path / "label_stats.json").read_text())
    assert stats == {"questions": 5, "steps": 10, "evidence_positive": 0.5}


# The contrast set: string matching cannot solve it.

@pytest.fixture(scope="module")
def contrast():
    return build_contrast(40, seed=0, max_doc_chars=MAX_DOC_CHARS)


def test_contrast_set_names_both_options_as_often_and_refutes_the_wrong_one(contrast):
    assert len(contrast) == 80 and sum(r[LABEL_KEY] for r in contrast) == 40
    assert {r["form"] for r in contrast[0::2]} == {"copy", "paraphrase"}
    for gold, wrong in zip(contrast[0::2], contrast[1::2]):
        assert (gold[LABEL_KEY], wrong[LABEL_KEY]) == (1, 0) and gold["docs"] == wrong["docs"]
        visible = " ".join(text[:MAX_DOC_CHARS] for _, text in gold["docs"])
        g, w = named_option(gold), named_option(wrong)
        assert count_named(visible, g) == count_named(visible, w) >= 1          # as often each
        if gold["form"] == "copy":
            assert f"medmcqa:{gold['question_id']}#0" in gold["doc_ids"]
            (note,) = [text for title, text in gold["docs"] if title == "Note"]
            assert g.lower() not in note.lower() and w in note
        else:
            (statement,) = [text for title, text in gold["docs"] if title == "Statement"]
            assert statement in {t.format(g=g, w=w) for t in PARAPHRASE}


def test_contrast_set_is_seeded_and_leaves_out_what_is_excluded(contrast):
    assert build_contrast(40, seed=0, max_doc_chars=MAX_DOC_CHARS) == contrast
    some = frozenset(r["question_id"] for r in contrast[:20])
    assert not some & {r["question_id"] for r in build_contrast(40, seed=0, exclude=some)}


def test_the_rules_that_solve_the_first_set_are_at_chance_on_the_contrast_set(records, contrast, tmp_path):
    def steps(rs, name):
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in rs))
        return load_examples(path, "evidence", "always", without_docs=False)

    first = rule_baselines(steps(records, "first.jsonl"))
    assert first["substring"]["reward_auroc"] == 1.0 and first["bm25"]["reward_auroc"] > 0.7
    second = rule_baselines(steps(contrast, "contrast.jsonl"))
    assert second["substring"]["reward_auroc"] == 0.5 and second["resamples"] == 1000
    for rule in ("substring", "bm25", "length"):
        low, high = second[rule]["reward_auroc_ci"]
        assert low <= second[rule]["reward_auroc"] <= high


def test_bm25_prefers_the_document_that_repeats_the_query():
    assert bm25_scores(["vitamin c", "vitamin c"], [["vitamin c and vitamin c", "iron"], ["iron", "zinc"]])[1] == 0.0
    first, second = bm25_scores(["scurvy", "scurvy"], [["scurvy scurvy lack", "zinc"], ["scurvy lack of it", "zinc"]])
    assert first > second > 0
