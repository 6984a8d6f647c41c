"""A question whose prompt cannot fit the policy's context is recorded as skipped with the reason (and
counted wrong) before anything runs, instead of hanging the run."""
import json

from eval.run import EvalConfig, run_eval
from pra.records import read_records


def test_overlong_question_is_skipped_with_its_reason(smollm2, tmp_path):
    bench = tmp_path / "long.jsonl"
    rows = [{"id": "long", "question": "What is this? " + "word " * 20000, "options": ["a", "b"], "answer": "A"},
            {"id": "short", "question": "Which vitamin prevents scurvy?", "options": ["C", "K"], "answer": "A"}]
    bench.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = run_eval(EvalConfig(benchmark=str(bench), method="direct", limit=None, out=str(tmp_path / "run")),
                       policy=smollm2)
    records = {r["id"]: r for r in read_records(tmp_path / "run" / "records.jsonl")}
    assert records["long"]["correct"] is False and records["long"]["prediction"] is None
    assert "over the 8192-token context of smollm2-135m-instruct" in records["long"]["skipped"]
    assert "skipped" not in records["short"] and records["short"]["prediction"] in ("A", "B")
    assert summary["n"] == 2 and summary["skipped_too_long"] == 1
