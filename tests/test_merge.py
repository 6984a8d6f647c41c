"""``pra merge``: shards of one split join into one run folder; overlaps, config mismatches and foreign
ids are refused, gaps reported."""
import json
from pathlib import Path

import pytest

from pra.benchmarks import load_eval_benchmark
from eval.merge import MergeError, merge_shards
from pra.selection import questions_asked

LIMIT = 6


def make_shard(root: Path, i: int, n: int = 2, keep=None, **config) -> Path:
    folder = root / f"shard{i}"
    folder.mkdir()
    cfg = {"benchmark": "medqa", "method": "cot", "policy": "p", "limit": LIMIT, "shard": f"{i}/{n}",
           "out": str(folder), "skip_bad": False, **config}
    (folder / "config.json").write_text(json.dumps(cfg))
    qs = load_eval_benchmark("medqa", limit=LIMIT, shard=(i, n)).questions
    qs = qs if keep is None else [q for k, q in enumerate(qs) if k in keep]
    (folder / "records.jsonl").write_text("".join(json.dumps(
        {"id": q.id, "gold": q.answer, "prediction": q.answer, "correct": k % 2 == 0, "forced": False,
         "tokens": 5, "seconds": 1.0, "stats": {}}) + "\n" for k, q in enumerate(qs)))
    return folder


def test_merge_joins_shards_in_benchmark_order(tmp_path):
    shards = [make_shard(tmp_path, 1), make_shard(tmp_path, 0)]
    merged = merge_shards(tmp_path / "out", shards)
    ids = [json.loads(line)["id"] for line in (tmp_path / "out" / "records.jsonl").read_text().splitlines()]
    assert ids == [q.id for q in load_eval_benchmark("medqa", limit=LIMIT).questions]
    assert merged.missing == [] and merged.records == LIMIT
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["shard"] is None and config["out"] == str(tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["n"] == LIMIT and summary["missing"] == 0 and summary["accuracy"] == pytest.approx(4 / 6)
    with pytest.raises(MergeError, match="exists; merge into a new folder"):
        merge_shards(tmp_path / "out", shards)


def test_merge_reports_gaps(tmp_path):
    shards = [make_shard(tmp_path, 0), make_shard(tmp_path, 1, keep={0})]     # shard 1 still running
    merged = merge_shards(tmp_path / "out", shards)
    expected_gaps = [q.id for q in load_eval_benchmark("medqa", limit=LIMIT, shard=(1, 2)).questions][1:]
    assert merged.missing == expected_gaps and merged.records == LIMIT - 2
    assert merged.summary["missing"] == 2


def test_merge_refuses_overlapping_shards_naming_both_files(tmp_path):
    a = make_shard(tmp_path, 0)
    b = make_shard(tmp_path, 1)
    dup = (a / "records.jsonl").read_text().splitlines()[0]
    with (b / "records.jsonl").open("a") as fh:
        fh.write(dup + "\n")
    with pytest.raises(MergeError, match=rf"in both {a}/records.jsonl and {b}/records.jsonl: shards overlap"):
        merge_shards(tmp_path / "out", [a, b])
    assert not (tmp_path / "out").exists()


def test_merge_refuses_disagreeing_configs_and_foreign_ids(tmp_path):
    a = make_shard(tmp_path, 0)
    b = make_shard(tmp_path, 1, policy="other")
    with pytest.raises(MergeError, match=r"shard1/config.json: field 'policy' is 'other', but .*shard0/config.json has 'p'"):
        merge_shards(tmp_path / "out", [a, b])
    with (a / "records.jsonl").open("a") as fh:
        fh.write(json.dumps({"id": "not-a-question", "correct": True}) + "\n")
    with pytest.raises(MergeError, match=r"shard0/records.jsonl: record 4: id 'not-a-question' is not among"):
        merge_shards(tmp_path / "out", [a])


def test_merge_cli(tmp_path, capsys):
    from pra.cli import main

    a, b = make_shard(tmp_path, 0, n=3), make_shard(tmp_path, 1, n=3)
    main(["merge", str(tmp_path / "out"), str(a), str(b)])
    out = capsys.readouterr().out
    assert "merged 4 records" in out and "gaps: 2 question(s) in no shard" in out


def test_merge_joins_shards_of_a_permuted_sampled_run(tmp_path):
    """Shards of `--sample 4 --permute cyclic`: records are (question, rotation); the merged run holds
    every rotation of the sample, in the order the whole run asks them, and says n of N."""
    questions = load_eval_benchmark("medqa").questions
    asked = lambda shard=None: questions_asked(questions, sample=4, seed=3, permute="cyclic", shard=shard)
    shards = []
    for i in range(2):
        folder = tmp_path / f"shard{i}"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(
            {"benchmark": "medqa", "method": "cot", "policy": "p", "limit": None, "sample": 4, "seed": 3,
             "permute": "cyclic", "shard": f"{i}/2", "out": str(folder), "skip_bad": False}))
        (folder / "records.jsonl").write_text("".join(json.dumps(
            {"id": q.id, "gold": q.answer, "prediction": q.answer, "correct": True, "forced": False,
             "tokens": 5, "seconds": 1.0, "stats": {}}) + "\n" for q in asked((i, 2))))
        shards.append(folder)
    merged = merge_shards(tmp_path / "out", shards)
    ids = [json.loads(line)["id"] for line in (tmp_path / "out" / "records.jsonl").read_text().splitlines()]
    assert ids == [q.id for q in asked()] and len(ids) == 4 * len(questions[0].options)
    assert merged.missing == [] and "@r1" in ids[1]
    assert merged.summary["of"] == len(questions) and merged.summary["permute"] == "cyclic"
    assert merged.summary["sample"] == 4
