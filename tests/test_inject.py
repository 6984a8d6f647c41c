"""Error injection changes exactly what each mode claims, repeats given its seed, and the sensitivity
metric counts the injected errors a scorer rates lower."""
import re

import pytest

from eval.analysis.inject import MODES, Injection, InjectionError, detected, inject, sensitivity

STEPS = ["The patient is 45 years old with a pH of 7.2.",
         "Metabolic acidosis with a high anion gap suggests ketoacidosis.",
         "Insulin deficiency explains it.",
         "Therefore, the answer is (A)."]
OPTIONS = {"A": "Insulin deficiency", "B": "Sepsis", "C": "Renal failure", "D": "Vomiting"}


def unchanged_outside(new, old, skip):
    return all(new[i] == old[i] for i in range(len(old)) if i not in skip)


def test_swap_exchanges_exactly_two_steps():
    inj = inject(STEPS, "swap", seed=1)
    i, j = inj.changed
    assert inj.steps[i] == STEPS[j] and inj.steps[j] == STEPS[i] and unchanged_outside(inj.steps, STEPS, {i, j})
    assert inj.reference == (i, j)


def test_drop_removes_the_longest_step_before_the_conclusion():
    inj = inject(STEPS, "drop")
    assert inj.steps == tuple(STEPS[:1] + STEPS[2:])          # step 1 is the longest non-final step
    assert inj.changed == (1,) and inj.reference == (2,)       # the step after the gap, vs itself before
    assert inj.steps[1] == STEPS[2]


def test_flip_number_changes_one_number_in_one_step():
    inj = inject(STEPS, "flip_number", seed=3)
    (i,) = inj.changed
    assert unchanged_outside(inj.steps, STEPS, {i}) and inj.steps[i] != STEPS[i]
    old, new = re.findall(r"\d+(?:\.\d+)?", STEPS[i]), re.findall(r"\d+(?:\.\d+)?", inj.steps[i])
    assert len(old) == len(new) and sum(a != b for a, b in zip(old, new)) == 1
    assert re.sub(r"\d+(?:\.\d+)?", "#", STEPS[i]) == re.sub(r"\d+(?:\.\d+)?", "#", inj.steps[i])
    with pytest.raises(InjectionError, match="needs a number"):
        inject(["no digits here", "none"], "flip_number")


def test_wrong_fact_swaps_an_option_text_for_another():
    inj = inject(STEPS, "wrong_fact", seed=0, options=OPTIONS)
    assert inj.changed == (2,) and unchanged_outside(inj.steps, STEPS, {2})
    assert "Insulin deficiency" not in inj.steps[2]
    assert any(inj.steps[2] == f"{v} explains it." for k, v in OPTIONS.items() if k != "A")
    with pytest.raises(InjectionError, match="states an option's text"):
        inject(["nothing relevant"], "wrong_fact", options=OPTIONS)


def test_wrong_leading_and_trailing_steps_argue_for_a_wrong_option():
    first = inject(STEPS, "wrong_first", seed=2, options=OPTIONS, gold="A")
    assert first.steps[1:] == tuple(STEPS) and first.changed == (0,) and first.reference == (0,)
    assert any(OPTIONS[k] in first.steps[0] for k in "BCD") and OPTIONS["A"] not in first.steps[0]
    last = inject(STEPS, "wrong_last", seed=2, options=OPTIONS, gold="A")
    assert last.steps[:-1] == tuple(STEPS) and last.changed == (4,) and last.reference == (3,)
    assert last.steps[-1] in {f"Therefore, the answer is ({k})." for k in "BCD"}
    with pytest.raises(InjectionError, match="gold letter"):
        inject(STEPS, "wrong_last", options=OPTIONS)


def test_shuffle_reports_every_moved_step():
    inj = inject(STEPS, "shuffle", seed=5)
    assert sorted(inj.steps) == sorted(STEPS) and inj.steps != tuple(STEPS)
    assert set(inj.changed) == {i for i in range(len(STEPS)) if inj.steps[i] != STEPS[i]}


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_repeats_given_its_seed(mode):
    a = inject(STEPS, mode, seed=7, options=OPTIONS, gold="A")
    assert a == inject(STEPS, mode, seed=7, options=OPTIONS, gold="A") and a.mode == mode
    assert a.steps != tuple(STEPS)


def test_unknown_mode_is_named():
    with pytest.raises(ValueError, match="unknown injection mode 'typo'"):
        inject(STEPS, "typo")


def test_sensitivity_counts_errors_rated_lower_with_a_fake_scorer():
    def scorer(prefix):
        """Rates a step 0.1 if it mentions sepsis or concludes a wrong letter, 0.9 otherwise."""
        step = prefix[-1]
        if "Sepsis" in step or "answer is (B)" in step or "answer is (C)" in step or "answer is (D)" in step:
            return 0.1
        return 0.9

    cases = [(STEPS, inject(STEPS, "wrong_last", seed=s, options=OPTIONS, gold="A")) for s in range(3)]
    cases += [(STEPS, inject(STEPS, "flip_number", seed=0))]                 # the scorer ignores numbers
    cases += [(STEPS, Injection("wrong_fact", (STEPS[0], STEPS[1], "Sepsis explains it.", STEPS[3]), (2,), (2,)))]
    result = sensitivity(cases, scorer)
    assert result == {"wrong_last": 1.0, "flip_number": 0.0, "wrong_fact": 1.0, "all": 0.8}
    assert detected(STEPS, cases[-1][1], scorer) and not detected(STEPS, cases[3][1], scorer)


class WrongAnswerAgent:
    """Rates a step 0.2 if it argues for a wrong option (the leading or trailing step injected), else
    0.8; keeps every request."""

    def __init__(self):
        self.requests = []

    def score(self, requests):
        from pra.reward_agent import Readout

        self.requests += requests
        wrong = lambda r: r.step.startswith("The key finding") or (
            "answer is (" in r.step and f"({r.question.answer})" not in r.step)
        return [Readout(0.2 if wrong(r) else 0.8, 0.0) for r in requests]


def saved_run(root):
    """medqa-0 (correct, 3 steps, a number, option A's text), medqa-1 (wrong), medqa-2 (correct, one step)."""
    from tests.test_report import make_run

    steps = [["A 22-year-old has joint pain and silvery plaques on extensor surfaces.",
              "Psoriatic arthritis fits these findings.", "Therefore, the answer is (A)."],
             ["Diastolic filling time falls.", "The answer is (B)."], ["The answer is (D)."]]
    return make_run(root, "run", "pra", [True, False, True], benchmark="medqa", ids=["medqa-0", "medqa-1", "medqa-2"],
                    extra=[{"steps": [{"text": t} for t in ts] + [{"text": ""}]} for ts in steps])


def test_injection_command_on_a_saved_run(tmp_path, monkeypatch):
    import json

    import pra.reward_agent
    from eval.analysis.inject import main, run_injection

    run = saved_run(tmp_path)
    agent = WrongAnswerAgent()
    result = run_injection(run, agent, seed=0)
    assert result["traces"] == 1                             # medqa-1 is wrong, medqa-2 has one step
    # The agent only sees wrong answers: wrong_first and wrong_last are caught, reordering is not.
    assert {m: (v["share"], v["n"]) for m, v in result["modes"].items()} == {
        "swap": (0.0, 1), "drop": (0.0, 1), "flip_number": (0.0, 1), "wrong_fact": (0.0, 1),
        "wrong_first": (1.0, 1), "wrong_last": (1.0, 1), "shuffle": (0.0, 1)}
    assert result["all"] == {"share": 2 / 7, "n": 7}
    # Steps are scored as in decoding: the earlier steps come with the rewards they got.
    given = {(r.steps, r.step): r.rewards for r in agent.requests}
    rated = lambda step: 0.2 if step.startswith("The key finding") else 0.8
    assert any(len(steps) == 2 for steps, _ in given)
    assert all(rewards == tuple(rated(s) for s in steps) for (steps, _), rewards in given.items())
    monkeypatch.setattr(pra.reward_agent, "load_reward_agent", lambda name: WrongAnswerAgent())
    main([str(run), "--reward-agent", "fake", "--out", str(tmp_path / "inj.json"), "--first", "1"])
    saved = json.loads((tmp_path / "inj.json").read_text())
    assert saved["reward_agent"] == "fake" and saved["modes"]["wrong_last"]["n"] == 1 and len(saved["cases"]) == 7


def test_injection_command_skips_modes_a_trace_cannot_take(tmp_path):
    from eval.analysis.inject import run_injection
    from tests.test_report import make_run

    run = make_run(tmp_path, "run", "cot", [True], benchmark="medqa", ids=["medqa-0"],
                   extra=[{"steps": [{"text": "Plaques suggest psoriasis."}, {"text": "The answer is (A)."}]}])
    result = run_injection(run, WrongAnswerAgent())
    assert result["modes"]["flip_number"] == {"share": None, "n": 0, "skipped": 1}      # no number to flip
    assert result["modes"]["wrong_fact"]["skipped"] == 1 and result["all"]["n"] == 5
    empty = make_run(tmp_path, "empty", "cot", [False], benchmark="medqa", ids=["medqa-0"],
                     extra=[{"steps": [{"text": "x"}, {"text": "y"}]}])
    with pytest.raises(ValueError, match="empty/records.jsonl: no correct trace with at least two steps"):
        run_injection(empty, WrongAnswerAgent())


def test_injection_reads_a_permuted_run_with_each_record_under_its_rotation(tmp_path):
    from eval.analysis.inject import run_injection
    from pra.benchmarks import load_eval_benchmark
    from pra.selection import rotate
    from tests.test_report import make_run

    q = rotate(next(q for q in load_eval_benchmark("medqa").questions if q.id == "medqa-0"), 1)
    steps = [{"text": "Plaques suggest psoriasis."}, {"text": f"The answer is ({q.answer})."}]
    run = make_run(tmp_path, "run", "cot", [True], benchmark="medqa", ids=["medqa-0@r1"], extra=[{"steps": steps}])
    agent = WrongAnswerAgent()
    result = run_injection(run, agent)
    assert result["traces"] == 1 and {c["id"] for c in result["cases"]} == {"medqa-0@r1"}
    assert agent.requests and all(r.question == q for r in agent.requests)     # asked as the run asked it
    assert result["modes"]["wrong_last"]["share"] == 1.0
