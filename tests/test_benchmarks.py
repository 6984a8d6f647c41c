"""Benchmark loaders on the shipped files, plus sharding, the generic format and malformed rows."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pra.benchmarks import (BENCHMARKS, DATA, EVAL_BENCHMARKS, BenchmarkError, load_benchmark,
                             load_eval_benchmark, parse_shard)
from tests.conftest import SHARED_DATA

COUNTS = {"medqa": 100, "medmcqa-eval": 1183, "medmcqa-train": 3000, "mmlu-med": 1089, "pubmedqa": 500,
          "bioasq": 618}
SHARED_BIOASQ = SHARED_DATA / "benchmarks" / "bioasq"


def first_row_text(name: str) -> str:
    """The first question's text read straight from the file, independent of the loader."""
    path = BENCHMARKS[name][1]
    if name == "mmlu-med":
        with (path / "anatomy_test.csv").open(newline="", encoding="utf-8") as f:
            return next(csv.reader(f))[0]
    if name == "pubmedqa":
        return next(iter(json.loads(path.read_text()).values()))["QUESTION"]
    if name == "bioasq":
        return json.loads(path.read_text())["questions"][0]["body"]
    return json.loads(path.read_text(encoding="utf-8").splitlines()[0])["question"]


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_shipped_benchmarks(name):
    load = load_benchmark(name)
    assert (load.name, len(load.questions), load.skipped) == (name, COUNTS[name], 0)
    assert load.questions[0].question == first_row_text(name)
    assert len({q.id for q in load.questions}) == len(load.questions)
    for q in load.questions:
        assert q.source == name and q.answer in q.options and all(t.strip() for t in q.options.values())
        assert list(q.options) == list("ABCDEFGHIJ"[: len(q.options)])


def test_registry_specifics():
    assert set(BENCHMARKS) == EVAL_BENCHMARKS | {"medmcqa-train"}
    assert load_benchmark("mmlu-med").questions[0].id == "anatomy-0"
    pubmed = load_benchmark("pubmedqa").questions[0]
    assert pubmed.options == {"A": "yes", "B": "no", "C": "maybe"} and pubmed.id == "12377809"
    assert "CONTEXTS" not in pubmed.question and len(pubmed.question) < 300
    assert load_benchmark("bioasq").questions[0].options == {"A": "yes", "B": "no"}
    first = json.loads((DATA / "medmcqa_eval.jsonl").read_text().splitlines()[0])
    q = load_benchmark("medmcqa-eval").questions[0]
    assert q.id == first["id"] and q.answer == "ABCD"[first["cop"] - 1] and q.options["A"] == first["opa"]


def test_path_to_known_file_is_detected():
    load = load_benchmark(str(DATA / "medqa_us_4opt_sample.jsonl"))
    assert load.name == "medqa" and len(load.questions) == 100


def test_limit_then_shard_partitions_the_first_n():
    ids = [q.id for q in load_benchmark("medmcqa-eval", limit=100).questions]
    assert ids == [q.id for q in load_benchmark("medmcqa-eval").questions[:100]]
    for n in (1, 2, 3, 7):
        shards = [load_benchmark("medmcqa-eval", limit=100, shard=(i, n)).questions for i in range(n)]
        assert sorted(q.id for s in shards for q in s) == sorted(ids)
        assert [q.id for q in shards[0]] == ids[::n]
    assert parse_shard("1/4") == (1, 4)
    for bad in ("4/4", "1", "a/b", "-1/2", "1/0"):
        with pytest.raises(BenchmarkError, match="shard"):
            parse_shard(bad)


def write_jsonl(tmp_path: Path, rows: list, name: str = "bench.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_generic_jsonl_dict_and_list_options(tmp_path):
    path = write_jsonl(tmp_path, [
        {"id": "q1", "question": "Dict?", "options": {"A": "x", "B": "y", "C": "z"}, "answer": "C"},
        {"id": 7, "question": "List?", "options": ["yes", "no"], "answer": "A"},
        {"question": "No id?", "options": ["p", "q"], "answer": "B"},
    ])
    load = load_benchmark(str(path))
    assert load.name == "bench" and load.skipped == 0
    a, b, c = load.questions
    assert (a.id, a.options, a.answer, a.source) == ("q1", {"A": "x", "B": "y", "C": "z"}, "C", "bench")
    assert (b.id, b.options, b.answer) == ("7", {"A": "yes", "B": "no"}, "A")
    assert c.id == "bench-2"


GOOD = {"id": "ok", "question": "Q?", "options": ["a", "b"], "answer": "A"}


@pytest.mark.parametrize("bad_row, where", [
    ("{not json", r"bench\.jsonl:2: invalid JSON"),
    ({"id": "x", "options": ["a", "b"], "answer": "A"}, r"bench\.jsonl:2: field 'question' is missing"),
    ({"id": "x", "question": "Q?", "options": ["a", "b"], "answer": "E"},
     r"bench\.jsonl:2: field 'answer' must be one of A, B, got 'E'"),
    ({"id": "x", "question": "Q?", "options": {"A": "a", "C": "c"}, "answer": "A"}, r"bench\.jsonl:2: field 'options'"),
    ({"id": "x", "question": "Q?", "options": ["a", ""], "answer": "A"}, r"bench\.jsonl:2: field 'options\.B'"),
    (dict(GOOD), r"bench\.jsonl:2: field 'id' duplicate 'ok'"),
])
def test_malformed_generic_rows(tmp_path, bad_row, where):
    path = write_jsonl(tmp_path, [GOOD, bad_row, dict(GOOD, id="ok2")])
    with pytest.raises(BenchmarkError, match=where):
        load_benchmark(str(path))
    load = load_benchmark(str(path), skip_bad=True)
    assert [q.id for q in load.questions] == ["ok", "ok2"] and load.skipped == 1


def test_malformed_known_formats(tmp_path):
    rows = (DATA / "medmcqa_eval.jsonl").read_text().splitlines()[:20]
    bad = json.loads(rows[16])
    bad["cop"] = 7
    rows[16] = json.dumps(bad)
    path = write_jsonl(tmp_path, rows, "medmcqa_eval.jsonl")
    with pytest.raises(BenchmarkError, match=r"medmcqa_eval\.jsonl:17: field 'cop' must be 1-4, got 7"):
        load_benchmark(str(path))
    load = load_benchmark(str(path), skip_bad=True)
    assert (len(load.questions), load.skipped) == (19, 1)

    csv_path = tmp_path / "anatomy_test.csv"
    csv_path.write_text("Q1,a,b,c,d,A\nQ2,a,b,c,d,Z\nQ3,a,b,c\n")
    with pytest.raises(BenchmarkError, match=r"anatomy_test\.csv:row 2: field 'answer'"):
        load_benchmark(str(csv_path))
    load = load_benchmark(str(csv_path), skip_bad=True)
    assert [q.id for q in load.questions] == ["anatomy-0"] and load.skipped == 2

    pubmed = tmp_path / "pubmedqa.json"
    pubmed.write_text(json.dumps({"1": {"QUESTION": "Q?", "final_decision": "perhaps"}}))
    with pytest.raises(BenchmarkError, match=r"pubmedqa\.json:key 1: field 'final_decision'"):
        load_benchmark(str(pubmed))

    bioasq = tmp_path / "golden.json"
    bioasq.write_text(json.dumps({"questions": [
        {"id": "f", "body": "Which?", "type": "factoid", "exact_answer": [["x"]]},
        {"id": "y", "body": "Is it?", "type": "yesno", "exact_answer": "Yes"},
        {"id": "n", "body": "Is it not?", "type": "yesno"}]}))
    with pytest.raises(BenchmarkError, match=r"golden\.json:question 3: field 'exact_answer' is missing"):
        load_benchmark(str(bioasq))
    load = load_benchmark(str(bioasq), skip_bad=True)
    assert [(q.id, q.answer) for q in load.questions] == [("y", "A")] and load.skipped == 1


def test_unknown_and_missing():
    with pytest.raises(BenchmarkError, match="unknown benchmark 'medmcqa'.*medmcqa-eval.*bioasq"):
        load_benchmark("medmcqa")
    with pytest.raises(BenchmarkError, match="not found: /nonexistent/x.jsonl"):
        load_benchmark("/nonexistent/x.jsonl")


def test_eval_refuses_training_split(tmp_path):
    with pytest.raises(BenchmarkError, match="training"):
        load_eval_benchmark("medmcqa-train")
    with pytest.raises(BenchmarkError, match="training"):
        load_eval_benchmark(str(DATA / "medmcqa_train.jsonl"))
    copy = write_jsonl(tmp_path, (DATA / "medmcqa_train.jsonl").read_text().splitlines()[:5], "renamed.jsonl")
    with pytest.raises(BenchmarkError, match="training"):
        load_eval_benchmark(str(copy))
    assert len(load_eval_benchmark("medmcqa-eval", limit=10).questions) == 10


@pytest.mark.requires("shared-data", SHARED_BIOASQ.is_dir(), f"BioASQ originals not at {SHARED_BIOASQ} (set PRA_DATA)")
def test_bioasq_file_reproduces(tmp_path):
    out = tmp_path / "bioasq_yesno.json"
    subprocess.run([sys.executable, str(DATA / "make_bioasq_yesno.py"), str(SHARED_BIOASQ), str(out)],
                   check=True, capture_output=True)
    assert out.read_bytes() == (DATA / "bioasq_yesno.json").read_bytes()
