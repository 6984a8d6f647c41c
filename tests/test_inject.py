"""Error injection changes exactly what each mode claims, repeats given its seed, and the sensitivity
metric counts the injected errors a scorer rates lower."""
import re

import pytest

from eval.inject import MODES, Injection, InjectionError, detected, inject, sensitivity

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
