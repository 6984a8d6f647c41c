"""The report from hand-made run folders: every table and figure, the post-hoc aggregations, the |dm|
figures from a hand-made labelled file. No model is loaded."""
import json
from pathlib import Path

import pytest

from eval.analysis.report.build import ReportConfig, build_report
from eval.analysis.report.figures import pareto, samples_figure, tradeoff_figure, vote_curve
from eval.analysis.report.margins import by_difficulty, by_position, load_labels, margin_figures
from eval.analysis.report.posthoc import pick, posthoc_accuracy
from eval.analysis.report.runs import RunError, load_run, load_runs
from eval.analysis.report.tables import against_baselines, agent_by_search, backbone_swap, methods_by_benchmark, reward_level
from search.aggregation import aggregate_rewards


def make_run(root: Path, name: str, method: str, correct: list[bool], benchmark: str = "bench",
             policy: str = "p", ids: list[str] | None = None, extra: list[dict] | None = None, **config) -> Path:
    run = root / name
    run.mkdir(parents=True)
    cfg = {"benchmark": benchmark, "method": method, "policy": policy, "samples": 4,
           "search": {"beam_width": 2, "branching": 2}, "reward_agent": "smollm2-135m-instruct",
           "search_controller": "always", **config}
    (run / "config.json").write_text(json.dumps(cfg))
    ids = ids or [f"q{i}" for i in range(len(correct))]
    rows = [{"id": i, "gold": "A", "prediction": "A" if c else "B", "correct": c, "forced": False,
             "tokens": 10, "seconds": 1.0, "stats": {"searches": 2 if method == "pra" else 0},
             **((extra or [{}] * len(ids))[n])} for n, (i, c) in enumerate(zip(ids, correct))]
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_posthoc_aggregations_on_hand_made_rewards():
    r = [0.9, 0.2, 0.6]
    assert aggregate_rewards(r, "last") == 0.6 and aggregate_rewards(r, "min") == 0.2
    assert aggregate_rewards(r, "max") == 0.9 and aggregate_rewards(r, "mean") == pytest.approx(17 / 30)
    with pytest.raises(ValueError, match="without step rewards"):
        aggregate_rewards([], "min")
    samples = [{"answer": "A", "rewards": [0.9, 0.1], "outcome": 0.2},
               {"answer": "B", "rewards": [0.5, 0.5], "outcome": 0.9},
               {"answer": "B", "rewards": [0.3, 0.4], "outcome": 0.1}]
    assert pick(samples, "last") == "B" and pick(samples, "min") == "B" and pick(samples, "max") == "A"
    assert pick(samples, "outcome") == "B" and pick(samples, "vote") == "B"
    tie = [{"answer": "C", "rewards": [0.5]}, {"answer": "D", "rewards": [0.5]}]
    assert pick(tie, "mean") == "C"                       # ties: the earliest sample
    records = [{"id": "1", "gold": "A", "samples": samples}, {"id": "2", "gold": "B", "samples": samples}]
    assert posthoc_accuracy(records, "max") == pytest.approx((0.5, 0.5 ** 1.5, 2))
    with pytest.raises(ValueError, match="'3' lacks"):
        posthoc_accuracy(records + [{"id": "3", "gold": "A", "samples": [{"answer": "A", "rewards": []}]}], "min")


def test_table1_methods_by_benchmark(tmp_path):
    make_run(tmp_path, "cot-a", "cot", [True, False], benchmark="a")
    make_run(tmp_path, "cot-a-small", "cot", [True], benchmark="a")
    make_run(tmp_path, "sc-b", "sc", [True, True, False, False], benchmark="b")
    runs, _ = load_runs([tmp_path])
    text = methods_by_benchmark(runs).render()
    assert "| policy | method | a | b |" in text
    assert "| p | cot | 0.500 ± 0.354 (n=2) | — |" in text
    assert "| p | sc (k=4) | — | 0.500 ± 0.250 (n=4) |" in text
    assert "cot-a-small` (n=1)" in text                   # the smaller run for the same cell is named


def test_runs_that_rank_traces_differently_are_told_apart(tmp_path):
    """A PRA run ranked by the mean step reward is its own row, and never stands for the paper's sum,
    whichever order the folders come in (it did: 'always-mean/' sorts before 'always/')."""
    mean = make_run(tmp_path, "pra-always-mean", "pra", [False, False], reward_agent="runs/agent",
                    search={"beam_width": 2, "branching": 2, "reward_aggregation": "mean"})
    paper = make_run(tmp_path, "pra-always", "pra", [True, True], reward_agent="runs/agent")
    runs = [load_run(mean), load_run(paper)]
    text = methods_by_benchmark(runs).render()
    assert "| p | pra (trained runs/agent, B=2 b=2, search always) | 1.000 ± 0.000 (n=2) |" in text
    assert "| p | pra (trained runs/agent, B=2 b=2, search always, ranked by mean reward) | 0.000 ± 0.000 (n=2) |" in text
    assert "1.000 ± 0.000 (n=2) (runs/agent, always)" in agent_by_search(runs).render()


def test_runs_that_retrieve_from_another_corpus_are_told_apart(tmp_path):
    """A run retrieving from a corpus other than the default is its own row, and never stands for the
    default setting in Tables 2 and 3 or Figure 2, whichever order the folders come in (it did, under
    the same label as the medcorp-mini run: 'always-medcorp/' was listed before 'always/')."""
    other = make_run(tmp_path, "pra-always-medcorp", "pra", [False, False], reward_agent="runs/agent",
                     corpus="medcorp")
    usual = make_run(tmp_path, "pra-always", "pra", [True, True], reward_agent="runs/agent",
                     corpus="medcorp-mini")
    rag = make_run(tmp_path, "rag-medcorp", "rag", [True, False], corpus="medcorp")
    never = make_run(tmp_path, "pra-never-medcorp", "pra", [True, True], reward_agent="runs/agent",
                     corpus="medcorp", search_controller="never")
    runs = [load_run(other), load_run(usual), load_run(rag), load_run(never)]
    text = methods_by_benchmark(runs).render()
    assert "| p | pra (trained runs/agent, B=2 b=2, search always) | 1.000 ± 0.000 (n=2) |" in text
    assert "| p | pra (trained runs/agent, B=2 b=2, search always, corpus medcorp) | 0.000 ± 0.000 (n=2) |" in text
    assert "| p | rag (corpus medcorp) |" in text
    assert "| p | pra (trained runs/agent, B=2 b=2, search never) |" in text    # never retrieves: no corpus
    assert "1.000 ± 0.000 (n=2) [pra (trained runs/agent, B=2 b=2, search always)]" in backbone_swap(runs).render()
    assert "1.000 ± 0.000 (n=2) (runs/agent, always)" in agent_by_search(runs).render()


def test_table2_paired_deltas_and_missing_runs(tmp_path):
    make_run(tmp_path, "cot", "cot", [True, False, False])
    make_run(tmp_path, "pra", "pra", [True, True, False])
    make_run(tmp_path, "cot2", "cot", [False], policy="q")
    runs, _ = load_runs([tmp_path])
    text = backbone_swap(runs).render()
    assert "+0.333 [+0.000, +1.000] p=1 (n=3)" in text    # differences 0, 1, 0: bootstrap CI, McNemar
    assert "sc for p on bench: `pra eval --benchmark bench --policy p --method sc" in text
    assert "pra for q on bench" in text


def test_table1b_every_method_paired_against_cot_and_sc(tmp_path):
    ids = ["q0@r0", "q0@r1", "q1@r0", "q1@r1"]
    make_run(tmp_path, "cot", "cot", [True, False, False, False], ids=ids, permute="cyclic")
    make_run(tmp_path, "sc", "sc", [True, True, False, False], ids=ids, permute="cyclic")
    make_run(tmp_path, "direct-permavg", "direct", [False, True, True, True], ids=ids, permute="cyclic",
             search={"readout": "permavg"})
    make_run(tmp_path, "direct-argmax", "direct", [False] * 4, ids=ids, permute="cyclic")
    make_run(tmp_path, "pra", "pra", [True, True], ids=["q0@r1", "q1@r0"], permute="balanced")
    runs, _ = load_runs([tmp_path])
    text = against_baselines(runs).render()
    # readouts are told apart; each row pairs with CoT and SC on the records both have
    assert "| bench | p | direct (permavg) | cyclic | 0.750 ± 0.177 (n=4) | +0.500 [+0.000, +1.000]" in text
    assert "| bench | p | direct (argmax) | cyclic |" in text
    assert "| bench | p | cot | cyclic | 0.250 ± 0.177 (n=4) | — | -0.250" in text
    assert "(n=2) | +0.500" in text                       # the balanced PRA run pairs on its 2 records
    make_run(tmp_path / "other", "rag", "rag", [True], policy="q")
    runs, _ = load_runs([tmp_path / "other"])
    assert "cot or sc for q on bench: `pra eval --benchmark bench --policy q --method cot --permute cyclic" \
        in against_baselines(runs).render()


def test_table3_trained_by_search(tmp_path):
    make_run(tmp_path, "u-always", "pra", [True, False])
    make_run(tmp_path, "u-never", "pra", [False, False], search_controller="never")
    make_run(tmp_path, "t-th", "pra", [True, True], reward_agent="runs/agent-cpu/final", search_controller="threshold:0.5")
    runs, _ = load_runs([tmp_path])
    assert [r.trained for r in sorted(runs, key=lambda r: r.path)] == [True, False, False]
    text = agent_by_search(runs).render()
    assert "| bench | p | 1.000 ± 0.000 (n=2) (runs/agent-cpu/final, threshold:0.5) | — | 0.500 ± 0.354 (n=2) " \
           "(smollm2-135m-instruct, always) | 0.000 ± 0.000 (n=2) (smollm2-135m-instruct, never) |" in text
    assert "trained agent, search never, p on bench" in text
    assert agent_by_search([]).missing


def test_table4_posthoc_rows_and_what_is_missing(tmp_path):
    samples = [{"samples": [{"answer": "B", "rewards": [0.9], "outcome": 0.9},
                            {"answer": "A", "rewards": [0.1], "outcome": 0.1},
                            {"answer": "A", "rewards": [0.2], "outcome": 0.2}]}] * 2
    make_run(tmp_path, "sc", "sc", [True, True], extra=samples)
    make_run(tmp_path, "pra", "pra", [True, False])
    runs, _ = load_runs([tmp_path])
    text = reward_level(runs).render()
    assert "| bench | p | majority vote (no reward) | 1.000 ± 0.000 (n=2) |" in text
    assert "| bench | p | post hoc: process, max | 0.000 ± 0.000 (n=2) |" in text
    assert "| bench | p | post hoc: outcome | 0.000 ± 0.000 (n=2) |" in text
    assert "online pra" in text and "Missing" not in text
    bare, _ = load_runs([tmp_path / "pra"])
    assert "no run keeps every sampled trace" in reward_level(bare).render()


def test_figure2_vote_curve_over_saved_samples(tmp_path):
    extra = [{"answers": ["B", "A", "A", "B"]}, {"answers": ["A", "B", "B", "C"]}]
    make_run(tmp_path, "sc", "sc", [False, False], extra=extra)
    make_run(tmp_path, "pra", "pra", [True, False])
    runs, _ = load_runs([tmp_path])
    sc = next(r for r in runs if r.method == "sc")
    curve = vote_curve(sc)
    # k=1: B, A -> 1/2; k=2: tie B/A -> B (earliest), A -> 1/2; k=3: A, B -> 1/2; k=4: tie -> B, B -> 0
    assert [p.acc for p in curve] == [0.5, 0.5, 0.5, 0.0]
    make_run(tmp_path, "pra-never", "pra", [True, True], search_controller="never")
    runs, _ = load_runs([tmp_path])
    sec = samples_figure(runs, tmp_path)
    assert (tmp_path / "fig2-bench-p.png").stat().st_size > 1000
    assert "| bench | p | pra (untrained smollm2-135m-instruct, B=2 b=2, search always) | 4 |" in sec.render()
    assert "search never" not in sec.render()          # the figure compares always-search PRA with SC
    make_run(tmp_path, "sc-short", "sc", [True], extra=[{"answers": ["A"]}])
    short = load_run(tmp_path / "sc-short")
    with pytest.raises(ValueError, match="all 4 sampled answers"):
        vote_curve(short)


def test_figure3_pareto_over_theta(tmp_path):
    assert pareto([(1.0, 0.5), (2.0, 0.4), (3.0, 0.7), (0.0, 0.5)]) == [3, 2]
    for name, theta, correct, searches in (("t3", 0.3, [True, True], 4), ("t7", 0.7, [True, False], 1),
                                           ("t9", 0.9, [False, False], 2)):
        make_run(tmp_path, name, "pra", correct, search_controller=f"threshold:{theta}",
                 extra=[{"stats": {"searches": searches}}] * 2)
    make_run(tmp_path, "never", "pra", [False, True], search_controller="never", extra=[{"stats": {}}] * 2)
    runs, _ = load_runs([tmp_path])
    text = tradeoff_figure(runs, tmp_path).render()
    assert "| bench | p | smollm2-135m-instruct | default | threshold:0.3 | 4.00 | 1.000 ± 0.000 (n=2) | yes |" in text
    # never searching matches θ = 0.7's accuracy at no searches: the frontier runs over every point
    assert "| threshold:0.7 | 1.00 | 0.500 ± 0.354 (n=2) |  |" in text
    assert "| threshold:0.9 | 2.00 | 0.000 ± 0.000 (n=2) |  |" in text
    assert "| never | 0.00 | 0.500 ± 0.354 (n=2) | yes |" in text and "Missing" not in text
    assert (tmp_path / "fig3-bench-p-smollm2-135m-instruct.png").exists()
    # a run that ranks traces otherwise is its own figure, not a point on this curve
    make_run(tmp_path, "mean", "pra", [True, True], search={"reward_aggregation": "mean"}, extra=[{"stats": {}}] * 2)
    runs, _ = load_runs([tmp_path])
    text = tradeoff_figure(runs, tmp_path).render()
    assert "| bench | p | smollm2-135m-instruct | ranked by mean reward | always | 0.00 | 1.000 ± 0.000 (n=2) | yes |" in text
    assert (tmp_path / "fig3-bench-p-smollm2-135m-instruct-ranked-by-mean-reward.png").exists()


def write_labels(folder: Path) -> Path:
    """Two questions: q1 (easy, trace answered A = gold) with 2 steps, q2 (hard, answered B) with 4."""
    folder.mkdir()
    rows = [("q1", 1, 0.4, ["A", "A", "A"]), ("q1", 2, -0.2, ["A", "A", "B"]),
            ("q2", 1, 1.0, ["B", "B", "B"]), ("q2", 2, 0.5, ["B", "C", "B"]),
            ("q2", 3, -0.1, ["B", "B", "B"]), ("q2", 4, 0.3, ["B", "B", "B"])]
    (folder / "labels.jsonl").write_text("".join(json.dumps(
        {"question_id": q, "trace": 0, "step_index": i, "gold": "A", "dm": dm, "rollout_answers": ra}) + "\n"
        for q, i, dm, ra in rows))
    (folder / "traces.jsonl").write_text(json.dumps({"id": "q1", "traces": [{"answer": "A"}]}) + "\n"
                                         + json.dumps({"id": "q2", "traces": [{"answer": "B"}]}) + "\n")
    return folder


def test_figures4_5_margin_shift_by_position_and_difficulty(tmp_path):
    steps, answers = load_labels(write_labels(tmp_path / "labels"))
    pos = by_position(steps, answers)
    assert [b.correct for b in pos] == [(), (0.4,), (), (0.2,)]          # q1: steps at 1/2 and 2/2
    assert [b.incorrect for b in pos] == [(1.0,), (0.5,), (0.1,), (0.3,)]
    diff = by_difficulty(steps, answers)
    assert [(b.name, b.correct, b.incorrect) for b in diff] == [
        ("easy", (0.4, 0.2), ()), ("medium", (), ()), ("hard", (), (1.0, 0.5, 0.1, 0.3))]
    fig4, fig5 = margin_figures(tmp_path / "labels", tmp_path)
    assert (tmp_path / "fig4-position.png").exists() and (tmp_path / "fig5-difficulty.png").exists()
    assert "| 0.25–0.50 | 0.400 ± 0.000 (n=1) | 0.500 ± 0.000 (n=1) |" in fig4.render()
    assert "| easy | 0.300 ± 0.100 (n=2) | — |" in fig5.render()
    assert all("--labels" in s.render() for s in margin_figures(None, tmp_path))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "labels.jsonl").write_text(json.dumps({"question_id": "q", "trace": 0}) + "\n")
    (tmp_path / "bad" / "traces.jsonl").write_text("")
    with pytest.raises(ValueError, match="labels.jsonl: record 1: field 'step_index' missing"):
        load_labels(tmp_path / "bad")


def test_bad_run_folders_name_file_and_field(tmp_path):
    run = make_run(tmp_path, "r", "cot", [True])
    (run / "config.json").write_text(json.dumps({"method": "cot", "policy": "p"}))
    with pytest.raises(RunError, match=r"r/config.json: field 'benchmark' missing"):
        load_run(run)
    with pytest.raises(RunError, match="no such run folder"):
        load_runs([tmp_path / "nope"])


def test_report_end_to_end_with_first_n(tmp_path):
    from pra.benchmarks import load_eval_benchmark

    ids = [q.id for q in load_eval_benchmark("medqa", limit=4).questions]
    runs = tmp_path / "runs"
    make_run(runs, "cot", "cot", [True, False, True, True], benchmark="medqa", ids=ids)
    make_run(runs, "empty", "cot", [], benchmark="medqa", policy="other")
    out = tmp_path / "report"
    from pra.cli import main
    main(["report", str(runs), "--out", str(out), "--first", "2", "--labels", str(write_labels(tmp_path / "lab"))])
    text = (out / "report.md").read_text()
    for title in ("Table 1", "Table 2", "Table 3", "Table 4", "Figure 2", "Figure 3", "Figure 4", "Figure 5"):
        assert f"## {title}" in text
    assert "| p | cot | 0.500 ± 0.354 (n=2) |" in text                  # first 2 questions only
    assert "empty`: no records among the first 2, left out" in text
    assert "no pra runs" in text


def quality_line(i: int, composite: float, coherence: float, run: str = "runs/a", method: str = "cot") -> dict:
    criteria = {"coherence": coherence, "evidence": 0.5, "hallucination": 0.1, "completeness": 0.5,
                "traceability": 0.5, "answer": float(i % 2)}
    return {"id": f"q{i}", "run": run, "method": method, "policy": "p", "judge": "j", "composite": composite,
            "criteria": criteria, "marginal": [composite]}


def test_quality_section_means_and_standard_errors(tmp_path):
    from eval.analysis.report.quality import quality_section

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("".join(json.dumps(quality_line(i, c, h)) + "\n" for i, (c, h) in enumerate([(0.2, 0.3), (0.6, 0.5)])))
    b.write_text(json.dumps(quality_line(0, 0.9, 0.9, run="runs/b", method="pra (trained x)")) + "\n")
    text = quality_section([a, b]).render()
    # run a: composite 0.2, 0.6 -> 0.400 ± 0.200; coherence 0.3, 0.5 -> 0.400 ± 0.100; answer 0, 1 -> 0.500 ± 0.500
    assert ("| `runs/a` | p | cot | j | 2 | 0.400 ± 0.200 | 0.400 ± 0.100 | 0.500 ± 0.000 | 0.100 ± 0.000 "
            "| 0.500 ± 0.000 | 0.500 ± 0.000 | 0.500 ± 0.500 |") in text
    assert "| `runs/b` | p | pra (trained x) | j | 1 | 0.900 ± 0.000 |" in text and "Missing" not in text
    assert "pra runs quality" in quality_section([]).render()
    bad = tmp_path / "bad.jsonl"
    line = quality_line(0, 0.5, 0.5)
    del line["criteria"]["traceability"]
    bad.write_text(json.dumps(line) + "\n")
    with pytest.raises(ValueError, match="bad.jsonl: record 1: field 'criteria' lacks 'traceability'"):
        quality_section([bad])


def injection_result(path: Path) -> Path:
    modes = {m: {"share": 0.5, "n": 4, "skipped": 0} for m in ("swap", "drop", "flip_number", "wrong_fact",
                                                                 "wrong_first", "wrong_last", "shuffle")}
    modes["flip_number"] = {"share": None, "n": 0, "skipped": 4}
    modes["wrong_last"] = {"share": 1.0, "n": 4, "skipped": 0}
    path.write_text(json.dumps({"reward_agent": "pra-smollm2-cpu", "run": "runs/x", "seed": 0, "traces": 4,
                                "modes": modes, "all": {"share": 16 / 28, "n": 28}}))
    return path


def test_injection_section_per_mode(tmp_path):
    from eval.analysis.report.quality import injection_section

    trained = injection_result(tmp_path / "inj.json")
    untrained = tmp_path / "inj2.json"
    result = json.loads(trained.read_text())
    result["reward_agent"], result["modes"]["swap"] = "smollm2-135m-instruct", {"share": 0.25, "n": 4}
    untrained.write_text(json.dumps(result))
    text = injection_section([trained, untrained]).render()
    assert "`pra-smollm2-cpu` on 4 correct traces of `runs/x`" in text
    assert "| swap | 0.500 ± 0.250 (n 4) | 0.250 ± 0.217 (n 4) |" in text
    assert "| wrong_last | 1.000 ± 0.000 (n 4) | 1.000 ± 0.000 (n 4) |" in text
    assert "| flip_number | — | — |" in text and "| **all** | 0.571 ± 0.094 (n 28) |" in text
    assert "pra runs inject" in injection_section([]).render()
    (tmp_path / "bad.json").write_text(json.dumps({"reward_agent": "a", "run": "r", "traces": 1, "modes": {}}))
    with pytest.raises(ValueError, match="bad.json: field 'all' missing"):
        injection_section([tmp_path / "bad.json"])


def test_report_cli_with_quality_and_injection(tmp_path):
    from pra.cli import main

    make_run(tmp_path / "runs", "cot", "cot", [True, False])
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps(quality_line(0, 0.7, 0.6)) + "\n")
    main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "report"), "--quality", str(q),
          "--injection", str(injection_result(tmp_path / "inj.json"))])
    text = (tmp_path / "report" / "report.md").read_text()
    assert "## Trajectory quality per method (MedTraj)" in text and "| `runs/a` | p | cot | j | 1 | 0.700 ± 0.000 |" in text
    assert "## Error-injection sensitivity of the reward agent" in text and "| wrong_last | 1.000 ± 0.000 (n 4) |" in text
