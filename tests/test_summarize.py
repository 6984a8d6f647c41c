import json

from eval.summarize import markdown, run_row


def test_first_n_keeps_the_benchmarks_first_questions(tmp_path):
    from pra.benchmarks import load_eval_benchmark

    qs = load_eval_benchmark("medqa", limit=3).questions
    (tmp_path / "config.json").write_text(json.dumps({"benchmark": "medqa", "method": "sc", "samples": 4,
                                                      "policy": "p"}))
    rows = [{"id": q.id, "gold": q.answer, "prediction": q.answer if i != 1 else None, "correct": i != 1, "forced": i == 2, "tokens": 10 * i, "seconds": 1.0,
             "stats": {"searches": i}} for i, q in enumerate(reversed(qs))]     # written out of order
    (tmp_path / "records.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    full, first2 = run_row(tmp_path), run_row(tmp_path, first=2)
    assert full["n"] == 3 and abs(full["accuracy"] - 2 / 3) < 1e-9
    assert first2["n"] == 2 and first2["accuracy"] == 0.5       # qs[0] (correct) and qs[1] (wrong)
    table = markdown([first2])
    assert "| p | sc (k=4) | 2 | 0.500 ± 0.354 | 1 |" in table


def test_first_n_keeps_every_rotation_of_the_first_questions(tmp_path):
    """A cyclic run's records are ``ID@rR``: --first N keeps all rotations of the first N questions."""
    from pra.benchmarks import load_eval_benchmark
    from pra.selection import questions_asked

    qs = load_eval_benchmark("medqa", limit=3).questions
    asked = questions_asked(qs, permute="cyclic")
    (tmp_path / "config.json").write_text(json.dumps({"benchmark": "medqa", "method": "cot", "policy": "p"}))
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(
        {"id": q.id, "gold": q.answer, "prediction": q.answer, "correct": True, "forced": False, "tokens": 1,
         "seconds": 1.0, "stats": {}}) + "\n" for q in asked))
    assert run_row(tmp_path, first=2)["n"] == 2 * len(qs[0].options)
