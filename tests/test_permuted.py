"""Option-permuted evaluation: seeded samples, rotations, answer readouts, per-question sampling seeds."""
import json
import math
import os
from collections import Counter

import pytest

from eval.analysis.compare import compare_records, mcnemar_exact
from eval.letters import clustered_stderr, constant_text_stats, describe, letter_stats, longest_option_stats
from eval.run import EvalConfig
from pra.benchmarks import load_eval_benchmark
from pra.cli import main
from pra.prompts import policy_messages
from pra.readouts import best_letter, read_letters
from pra.selection import asking_order, permuted, questions_asked, rotate, sample_questions, split_id
from pra.types import Question
from search.engine import Engine, SearchConfig, Trace
from tests.fakes import ScriptedPolicy

Q = Question("q1", "Which vitamin prevents scurvy?", {"A": "A", "B": "B12", "C": "C", "D": "D"}, "C", "t")


def medmcqa():
    return load_eval_benchmark("medmcqa-eval").questions


def test_a_sample_depends_on_seed_and_ids_only():
    qs = medmcqa()
    a = sample_questions(qs, 200, seed=0)
    assert len(a) == 200 and len({q.id for q in a}) == 200
    assert [q.id for q in sample_questions(list(reversed(qs)), 200, 0)] == [q.id for q in reversed(a)]
    assert {q.id for q in sample_questions(qs, 200, 1)} != {q.id for q in a}
    gold = Counter(q.answer for q in a)           # a random sample, not the A-heavy first 200
    assert max(gold.values()) < 0.4 * 200


def test_rotation_moves_options_and_gold_and_ids_round_trip():
    r1 = rotate(Q, 1)
    assert r1.options == {"A": "B12", "B": "C", "C": "D", "D": "A"} and r1.answer == "B"
    assert r1.options[r1.answer] == Q.options[Q.answer] and split_id(r1.id) == ("q1", 1)
    assert rotate(Q, 0) is Q and split_id("q1") == ("q1", 0)
    assert rotate(rotate(Q, 1), 3).options == Q.options


def test_cyclic_asks_every_rotation_and_balanced_makes_gold_letters_uniform():
    qs = sample_questions(medmcqa(), 200, seed=0)
    cyclic = permuted(qs, "cyclic", 0)
    assert len(cyclic) == 4 * 200 and Counter(q.answer for q in cyclic) == Counter("ABCD" * 200)
    balanced = permuted(qs, "balanced", 0)
    assert Counter(q.answer for q in balanced) == Counter("ABCD" * 50)
    assert all(b.options[b.answer] == q.options[q.answer] for b, q in zip(balanced, qs))
    assert [q.id for q in permuted(qs, "balanced", 0)] == [q.id for q in balanced]


def test_a_run_asks_in_a_seeded_order_so_an_interrupted_run_holds_a_random_part():
    """PubMedQA's test file lists its "yes" questions first: in file order the first 46 of a 100-question
    sample are all "yes", so a run stopped there would hold only those."""
    asked = questions_asked(load_eval_benchmark("pubmedqa").questions, sample=100, seed=0, permute="cyclic")
    text = lambda q: q.options[q.answer]
    assert {text(q) for q in asked[:90]} == {"yes"}
    order = asking_order(asked, seed=0)
    assert sorted(q.id for q in order) == sorted(q.id for q in asked)
    assert Counter(text(q) for q in order[:90])["yes"] < 75
    assert all(split_id(a.id)[0] == split_id(b.id)[0] for a, b in zip(order[::3], order[1::3]))
    assert [q.id for q in asking_order(list(reversed(asked)), 0)] == [q.id for q in order]
    assert [q.id for q in asking_order(asked, 1)] != [q.id for q in order]


class LetterLover(ScriptedPolicy):
    """Likes letter A by ``bias`` nats and the option text "C" by ``skill`` nats."""

    def __init__(self, bias=3.0, skill=1.0):
        super().__init__(script=lambda *a: "")
        self.bias, self.skill, self.asked = bias, skill, []

    def choice_logprobs(self, prompts, choices):
        self.asked += prompts
        out = []
        for p, cs in zip(prompts, choices):
            scores = {c: self.bias * (c == "A") + self.skill * (f"\n{c}. C\n" in p + "\n") for c in cs}
            z = math.log(sum(math.exp(v) for v in scores.values()))
            out.append({c: v - z for c, v in scores.items()})
        return out


def test_readouts_undo_a_letter_preference():
    policy = LetterLover()
    prompt = lambda q: policy.render(policy_messages(q, False, direct=True))
    (plain,) = read_letters(policy, [(Q, prompt)], "argmax")
    assert best_letter(plain) == "A"                       # the bias wins over the knowledge
    (avg,) = read_letters(policy, [(Q, prompt)], "permavg")
    assert best_letter(avg) == "C" and math.isclose(sum(math.exp(v) for v in avg.values()), 1.0)
    (cal,) = read_letters(policy, [(Q, prompt)], "calibrate")
    assert best_letter(cal) == "C"
    assert sum("N/A" in p for p in policy.asked) == 1 and sum("[MASK]" in p for p in policy.asked) == 1


@pytest.mark.slow
def test_one_question_gets_the_same_samples_alone_and_in_a_batch(smollm2):
    """Sampled steps are seeded by (seed, question, rotation, step, beam member), not by the batch."""
    qs = sample_questions(medmcqa(), 3, seed=0)
    cfg = SearchConfig(beam_width=2, branching=1, max_steps=2, step_tokens=12, temperature=0.9, seed=7,
                       aggregate="vote")

    def samples(questions, max_active):
        done = Engine(smollm2, cfg).run([Trace(q) for q in questions], max_active=max_active)
        return {t.question.id: [c.texts for c in t.beam] for t in done}

    alone = samples([qs[1]], 1)[qs[1].id]
    batched = samples(qs, 3)
    assert batched[qs[1].id] == alone
    assert batched[qs[0].id] != batched[qs[1].id]
    assert samples([rotate(qs[1], 1)], 1)[rotate(qs[1], 1).id] != alone     # a rotation is its own question


def test_exact_mcnemar_on_known_counts():
    assert mcnemar_exact(0, 5) == pytest.approx(2 / 32)
    assert mcnemar_exact(3, 3) == 1.0 and mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(1, 9) == pytest.approx(2 * 11 / 1024)


def rec(qid, correct, gold="A", prediction="A"):
    return {"id": qid, "correct": correct, "gold": gold, "prediction": prediction}


def test_compare_pairs_records_by_question_and_rotation():
    ids = [f"q{i}{'' if r == 0 else f'@r{r}'}" for i in range(30) for r in range(4)]
    a = [rec(i, False) for i in ids]
    b = [rec(i, n % 3 == 0) for n, i in enumerate(ids)] + [rec("only-in-b", True)]
    c = compare_records(a, b)
    assert (c.n, c.questions, c.a_only, c.b_only) == (120, 30, 0, 40)
    assert c.difference == pytest.approx(40 / 120) and c.ci_low <= c.difference <= c.ci_high
    assert c.significant and c.mcnemar_p < 1e-6
    same = compare_records(a, a)
    assert (same.difference, same.ci_low, same.ci_high, same.mcnemar_p) == (0.0, 0.0, 0.0, 1.0)
    assert not same.significant


def test_letter_stats_show_what_a_constant_answer_gets():
    records = [rec("q1", True, "A", "A"), rec("q1@r1", False, "D", "A"), rec("q2", True, "B", "B"),
               rec("q2@r1", True, "A", "A")]
    s = letter_stats(records)
    assert s["gold_letters"] == {"A": 2, "B": 1, "D": 1} and s["predicted_letters"] == {"A": 3, "B": 1}
    assert (s["constant_letter"], s["constant_letter_accuracy"]) == ("A", 0.5)
    assert s["questions"] == 2 and s["circular_accuracy"] == 0.5
    assert "circular_accuracy" not in letter_stats(records[::2])


def test_a_run_without_limit_or_sample_asks_the_whole_benchmark():
    assert EvalConfig().limit is None
    qs = medmcqa()
    assert len(questions_asked(qs)) == len(qs)
    for permute in ("cyclic", "balanced"):
        whole = questions_asked(qs, sample=10, seed=3, permute=permute)
        shards = [questions_asked(qs, sample=10, seed=3, shard=(i, 3), permute=permute) for i in range(3)]
        assert sorted(q.id for s in shards for q in s) == sorted(q.id for q in whole)


@pytest.mark.slow
def test_permuted_direct_runs_and_compare_as_a_user_runs_them(tmp_path, capsys):
    os.environ["HF_HUB_OFFLINE"] = "1"
    common = ["eval", "--benchmark", "medmcqa-eval", "--method", "direct", "--permute", "cyclic",
              "--sample", "3", "--seed", "0"]
    main([*common, "--out", str(tmp_path / "argmax")])
    main([*common, "--readout", "calibrate", "--out", str(tmp_path / "calibrate")])
    printed = capsys.readouterr().out
    assert "12 records: 3 of 1183 questions (sample 3, seed 0), options cyclic" in printed
    assert "gold letters: A 3 B 3 C 3 D 3" in printed and "strict circular accuracy" in printed
    summary = json.loads((tmp_path / "calibrate" / "summary.json").read_text())
    assert summary["n"] == 12 and summary["questions"] == 3 and summary["constant_letter_accuracy"] == 0.25
    assert "always the longest option scores" in printed and 0 <= summary["longest_option_accuracy"] <= 1
    main(["compare", str(tmp_path / "argmax"), str(tmp_path / "calibrate")])
    table = capsys.readouterr().out
    assert "| 12 (3) |" in table and "McNemar" in table


def test_a_summary_names_the_best_constant_answer_text_where_options_are_shared():
    """Under cyclic rotations "always B" scores 1/3 on PubMedQA, "always yes" its share of gold answers."""
    qs = questions_asked(load_eval_benchmark("pubmedqa").questions, sample=100, seed=0, permute="cyclic")
    records = [{"id": q.id, "gold": q.answer, "prediction": "B", "correct": q.answer == "B"} for q in qs]
    assert letter_stats(records)["constant_letter_accuracy"] == pytest.approx(1 / 3)
    stats = constant_text_stats(records, qs)
    assert stats["constant_text"] == "yes" and stats["constant_text_accuracy"] == pytest.approx(177 / 300)
    assert "'yes' scores 0.590" in describe({"n": 300, "questions": 100, "of": 500, "gold_letters": {},
                                             "predicted_letters": {}, "constant_letter": "A",
                                             "constant_letter_accuracy": 1 / 3, **stats})
    assert constant_text_stats(records, questions_asked(medmcqa(), sample=20, seed=0)) == {}


def test_a_summary_names_the_longest_option_rule_where_options_differ():
    """Rotations move the longest option's letter with the gold one, so the rule keeps its score; on the
    seeded medmcqa-eval 200 that is 250 of 800 records, above chance. Shared options get no such rule."""
    q = Question("q1", "text", {"A": "short", "B": "the longest option", "C": "mid size", "D": "x"}, "B", "t")
    other = Question("q2", "text", {"A": "a much longer wrong one", "B": "b", "C": "c", "D": "d"}, "C", "t")
    both = [rotate(q, r) for r in range(4)] + [other]
    records = [{"id": x.id, "gold": x.answer, "prediction": "A", "correct": False} for x in both]
    assert longest_option_stats(records, both) == {"longest_option_accuracy": 4 / 5}
    qs = questions_asked(medmcqa(), sample=200, seed=0, permute="cyclic")
    records = [{"id": x.id, "gold": x.answer, "prediction": "A", "correct": x.answer == "A"} for x in qs]
    stats = longest_option_stats(records, qs)
    assert stats["longest_option_accuracy"] == pytest.approx(250 / 800)
    assert "longest option scores 0.312" in describe({"n": 800, "questions": 200, "of": 1183, "gold_letters": {},
                                                     "predicted_letters": {}, "constant_letter": "A",
                                                     "constant_letter_accuracy": 0.25, **stats})
    pubmed = questions_asked(load_eval_benchmark("pubmedqa").questions, sample=10, seed=0, permute="cyclic")
    assert longest_option_stats([{"id": x.id} for x in pubmed], pubmed) == {}


def test_the_standard_error_counts_a_questions_rotations_once():
    single = [rec(f"q{i}", i % 2 == 0) for i in range(10)]
    assert clustered_stderr(single) == pytest.approx(math.sqrt(0.5 * 0.5 / 10))
    rotated = [rec(f"q{i}{'' if r == 0 else f'@r{r}'}", i % 2 == 0) for i in range(10) for r in range(4)]
    assert clustered_stderr(rotated) == pytest.approx(math.sqrt(0.5 * 0.5 / 10))   # 40 records, 10 questions


def test_by_record_id_finds_each_record_under_its_rotation():
    from pra.selection import by_record_id, rotate

    q = Question("q1", "text", {"A": "a", "B": "b", "C": "c", "D": "d"}, "B", "t")
    index = by_record_id([q])
    assert index["q1"] == q and index["q1@r1"] == rotate(q, 1) and len(index) == 4
    assert index["q1@r1"].options["A"] == "b" and index["q1@r1"].answer == "A"


def test_compare_pairs_two_agents_error_injection_results(tmp_path, capsys):
    cases = lambda hits: {"cases": [{"id": i, "mode": m, "detected": h} for (i, m), h in
                                    zip([("q1@r1", "swap"), ("q1@r1", "drop"), ("q1@r2", "swap"), ("q2", "swap")], hits)]}
    a, b, bad = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "bad.json"
    a.write_text(json.dumps(cases([False, False, True, False])))
    b.write_text(json.dumps(cases([True, True, True, False])))
    bad.write_text(json.dumps({"cases": [{"id": "q1"}]}))
    main(["compare", str(a), str(b)])
    row = next(line for line in capsys.readouterr().out.splitlines() if str(b) in line)
    assert "| 4 (2) | 0.250 | 0.750 | +0.500" in row and "| 0 / 2 |" in row     # two questions, four cases
    with pytest.raises(SystemExit):
        main(["compare", str(a), str(bad)])
    assert "bad.json: not an error-injection result" in capsys.readouterr().err
