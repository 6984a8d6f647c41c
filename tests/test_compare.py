"""``pra compare`` and ``pra merge`` refuse runs of different benchmark content (the run config's
``benchmark_hash``, or for older folders the question ids their records hold); ``--allow-different``
goes ahead and names what differs. ``pra compare --seeds N`` says how far the CI bounds move between
bootstrap seeds, and the output states the number of resamples."""
import json
from pathlib import Path

import pytest

from eval.analysis.compare import compare_runs, markdown
from eval.merge import MergeError, merge_shards
from pra import cli
from pra.benchmarks import content_hash, load_eval_benchmark
from pra.errors import UserError
from tests.test_merge import make_shard


def run_folder(root: Path, name: str, ids, correct=lambda i: i % 2 == 0, **config) -> Path:
    folder = root / name
    folder.mkdir()
    if config:
        (folder / "config.json").write_text(json.dumps({"benchmark": "medqa", "method": "direct", **config}))
    (folder / "records.jsonl").write_text("".join(
        json.dumps({"id": i, "gold": "A", "prediction": "A", "correct": correct(k)}) + "\n" for k, i in enumerate(ids)))
    return folder


def test_runs_of_different_benchmark_content_are_refused_unless_allowed(tmp_path, capsys):
    ids = [f"medqa-{i}" for i in range(20)]
    a = run_folder(tmp_path, "a", ids, benchmark_hash="1111")
    b = run_folder(tmp_path, "b", ids, correct=lambda k: k % 3 == 0, benchmark_hash="2222")
    with pytest.raises(UserError, match=r"\(questions hash 1111\) and .*\(questions hash 2222\): different question sets"):
        compare_runs([a, b])
    with pytest.raises(SystemExit) as stop:
        cli.main(["compare", str(a), str(b)])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and "--allow-different" in err[0]
    cli.main(["compare", str(a), str(b), "--allow-different"])
    captured = capsys.readouterr()
    assert "warning: --allow-different:" in captured.err and "different question sets" in captured.err
    assert "| 20 (20) |" in captured.out
    same = run_folder(tmp_path, "c", ids, benchmark_hash="1111")
    assert compare_runs([a, same])[0].n == 20


def test_older_folders_without_a_hash_are_checked_on_their_question_ids(tmp_path):
    a = run_folder(tmp_path, "a", ["medqa-0", "medqa-1", "medqa-2"])
    b = run_folder(tmp_path, "b", ["medqa-0", "medqa-1@r1", "medqa-2@r3", "medqa-1", "medqa-2"])  # same questions
    assert compare_runs([a, b])[0].n == 3
    partial = run_folder(tmp_path, "partial", ["medqa-1"])                   # a run still going
    assert compare_runs([a, partial])[0].n == 1
    other = run_folder(tmp_path, "other", ["medqa-0", "medqa-1", "x-9"])
    with pytest.raises(UserError, match=r"hold different questions \(1 only in .*a: 'medqa-2'; 1 only in .*other: 'x-9'\)"):
        compare_runs([a, other])
    assert compare_runs([a, other], allow_different=True)[0].n == 2


def test_older_configs_naming_different_benchmarks_are_refused(tmp_path):
    """The issue's case: the shipped medqa against another file called medqa.jsonl, whose fallback ids
    (medqa-0, medqa-1) are the same; configs written before benchmark_hash still name the benchmark."""
    ids = ["medqa-0", "medqa-1"]
    shipped = run_folder(tmp_path, "shipped", ids, benchmark="medqa")
    (tmp_path / "medqa.jsonl").write_text("")
    lookalike = run_folder(tmp_path, "lookalike", ids, benchmark=str(tmp_path / "medqa.jsonl"))
    with pytest.raises(UserError, match=r"ran benchmark medqa and .* ran .*medqa.jsonl"):
        compare_runs([shipped, lookalike])
    from pra.benchmarks import BENCHMARKS
    same = run_folder(tmp_path, "by-path", ids, benchmark=str(BENCHMARKS["medqa"][1]))
    assert compare_runs([shipped, same])[0].n == 2


def test_a_record_without_correct_is_an_error_naming_the_run(tmp_path):
    a = run_folder(tmp_path, "a", ["q1", "q2"])
    b = tmp_path / "b"
    b.mkdir()
    (b / "records.jsonl").write_text('{"id": "q1", "correct": true}\n{"id": "q2"}\n')
    with pytest.raises(UserError, match=r"b: record 2 \(id 'q2'\) has no 'correct' field"):
        compare_runs([a, b])
    (b / "records.jsonl").write_text('{"id": "q1", "correct": true}\n{"id": "q2", "correct": "yes"}\n')
    with pytest.raises(UserError, match=r"has 'correct' 'yes' \(expected true or false\)"):
        compare_runs([a, b])


def test_seeds_report_how_stable_the_ci_bounds_are_and_the_resamples_are_stated(tmp_path, capsys):
    import random

    ids, draw = [f"q{i}" for i in range(997)], random.Random(1)
    right_a, right_b = [draw.random() < 0.5 for _ in ids], [draw.random() < 0.6 for _ in ids]
    a = run_folder(tmp_path, "a", ids, correct=right_a.__getitem__, benchmark_hash="h")
    b = run_folder(tmp_path, "b", ids, correct=right_b.__getitem__, benchmark_hash="h")
    (c,) = compare_runs([a, b], seeds=5)
    assert c.seeds == (0, 1, 2, 3, 4) and c.resamples == 10_000
    assert c.low_range[0] <= c.ci_low <= c.low_range[1] and c.high_range[0] <= c.ci_high <= c.high_range[1]
    assert c.low_range[0] < c.low_range[1]              # different seeds, different bounds
    cli.main(["compare", str(a), str(b), "--seeds", "5"])
    out = capsys.readouterr().out
    assert "10,000 resamples" in out and "over 5 bootstrap seeds (0..4): lower bound" in out
    assert "over 1 bootstrap" not in markdown(compare_runs([a, b]))
    with pytest.raises(UserError, match="--seeds must be at least 1"):
        compare_runs([a, b], seeds=0)


def test_merge_refuses_shards_of_other_benchmark_content_unless_allowed(tmp_path):
    right = content_hash(load_eval_benchmark("medqa").questions)
    shards = [make_shard(tmp_path, 0, benchmark_hash=right), make_shard(tmp_path, 1, benchmark_hash=right)]
    assert merge_shards(tmp_path / "ok", shards).records == 6
    assert json.loads((tmp_path / "ok" / "config.json").read_text())["benchmark_hash"] == right
    stale = tmp_path / "stale"
    stale.mkdir()
    shards = [make_shard(stale, 0, benchmark_hash="0" * 16), make_shard(stale, 1, benchmark_hash="0" * 16)]
    with pytest.raises(MergeError, match=r"medqa now holds other questions \(hash .*\) than when the shards ran "
                                         r"\(hash 0000000000000000\); use --allow-different"):
        merge_shards(tmp_path / "out", shards)
    warnings = []
    assert merge_shards(tmp_path / "out", shards, allow_different=True, warn=warnings.append).records == 6
    assert len(warnings) == 1 and "now holds other questions" in warnings[0]


def test_merge_takes_an_older_shard_without_a_hash_beside_a_newer_one(tmp_path):
    right = content_hash(load_eval_benchmark("medqa").questions)
    shards = [make_shard(tmp_path, 0), make_shard(tmp_path, 1, benchmark_hash=right)]
    assert merge_shards(tmp_path / "out", shards).records == 6


def test_pool_pairs_each_benchmark_apart_and_resamples_them_together(tmp_path):
    """--pool: A1 B1 A2 B2; equal ids in two benchmarks stay two questions, and the pooled difference is
    the record-weighted mean of the pairs' differences."""
    from eval.analysis.compare import pool_runs

    ids = [f"q{i}" for i in range(20)]
    a1 = run_folder(tmp_path, "a1", ids, correct=lambda k: k < 10, benchmark_hash="1")
    b1 = run_folder(tmp_path, "b1", ids, correct=lambda k: k < 14, benchmark_hash="1")      # +0.2
    a2 = run_folder(tmp_path, "a2", ids, correct=lambda k: k < 10, benchmark_hash="2")
    b2 = run_folder(tmp_path, "b2", ids, correct=lambda k: k < 10, benchmark_hash="2")      # +0.0
    pooled = pool_runs([a1, b1, a2, b2])
    assert (pooled.n, pooled.questions) == (40, 40)
    assert pooled.difference == pytest.approx(0.1) and (pooled.a_only, pooled.b_only) == (0, 4)
    with pytest.raises(UserError, match="pairs of runs"):
        pool_runs([a1, b1, a2])
    with pytest.raises(UserError, match="different question sets"):
        pool_runs([a1, b2, a2, b1])
