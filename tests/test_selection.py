"""``pra runs selection``: the agent's order over the answers in its search trees, against chance and
against choices that ignore it (a vote, a random candidate), on hand-made trees and a committed run."""
import json
from pathlib import Path

import pytest

from eval.analysis.selection import main, selection, step_wins, vote_share
from pra.errors import UserError

QWEN_PRA = Path(__file__).parent.parent / "eval" / "results" / "qwen" / "q05" / "medmcqa" / "pra-untrained15-always"


def node(depth, score, answer=None):
    return {"parent": None, "depth": depth, "step": {"text": "..."}, "score": score, "answer": answer, "kept": False}


def record(id, gold, tree, correct):
    return {"id": id, "gold": gold, "prediction": gold if correct else "Z", "correct": correct, "tree": tree}


@pytest.mark.parametrize("tree, expected", [
    ([node(1, 0.9, "A"), node(1, 0.2, "B"), node(1, 0.1, "C")], (2.0, 2)),       # gold on top: both pairs won
    ([node(1, 0.1, "A"), node(1, 0.2, "B"), node(1, 0.9, "C")], (0.0, 2)),       # gold at the bottom
    ([node(1, 0.5, "A"), node(1, 0.5, "B")], (0.5, 1)),                          # a tie counts half
    ([node(1, 0.9, "A"), node(2, 0.1, "B"), node(1, 0.3)], (0.0, 0)),            # another step, an open step: no pair
])
def test_a_gold_answer_is_compared_only_with_other_answers_of_its_own_step(tree, expected):
    assert step_wins(record("q", "A", tree, True)) == expected


def test_a_vote_splits_its_ties():
    assert vote_share(["A", "A", "B"], "A") == 1.0
    assert vote_share(["A", "B"], "A") == 0.5
    assert vote_share(["B", "C", "C"], "A") == 0.0 and vote_share([], "A") == 0.0


def test_selection_on_hand_made_trees(tmp_path):
    """Two questions (one asked under two rotations) where the agent ranks gold first, one where it is
    last, and one forced with no answer in its tree, which only the run's accuracy counts."""
    records = [
        record("q1@r0", "A", [node(1, 0.9, "A"), node(1, 0.1, "B"), node(1, 0.2, "B")], True),
        record("q1@r1", "B", [node(1, 0.8, "B"), node(1, 0.3, "C")], True),
        record("q2", "C", [node(1, 0.1, "C"), node(1, 0.7, "D"), node(2, 0.6, "C")], False),
        record("q3", "A", [node(1, 0.4), node(2, 0.5)], True),
    ]
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    s = selection(tmp_path)
    assert (s.n, s.accuracy, s.answered) == (4, 0.75, 3)
    assert s.pick == pytest.approx(2 / 3) and s.vote == pytest.approx((0.0 + 0.5 + 1.0) / 3)   # B, a B-C tie, C
    assert s.uniform == pytest.approx((1 / 3 + 1 / 2 + 2 / 3) / 3) and s.gold_proposed == 1.0
    assert s.pick_minus_vote[0] == pytest.approx(2 / 3 - 1 / 2)
    assert s.auroc == pytest.approx((2 + 1 + 0) / (2 + 1 + 1)) and s.auroc_questions == 2


def test_a_run_without_trees_or_without_answers_is_refused_by_name(tmp_path):
    (tmp_path / "records.jsonl").write_text(json.dumps({"id": "q", "gold": "A", "correct": True}) + "\n")
    with pytest.raises(UserError, match="keep no search tree"):
        selection(tmp_path)
    (tmp_path / "records.jsonl").write_text(json.dumps(record("q", "A", [node(1, 0.3)], False)) + "\n")
    with pytest.raises(UserError, match="no candidate in its trees wrote an answer"):
        selection(tmp_path)
    bad = record("q", "A", [node(1, 0.3, "A"), {"depth": 1, "score": "high", "answer": "B"}], True)
    (tmp_path / "records.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(UserError, match=r"record 1 \(id 'q'\) has a tree node without an integer depth"):
        selection(tmp_path)
    (tmp_path / "records.jsonl").write_text(json.dumps({"id": "q", "tree": []}) + "\n")
    with pytest.raises(UserError, match="record 1 .* has no gold, correct"):
        selection(tmp_path)


def test_on_the_committed_qwen_pra_run_the_agent_ranks_answers_at_chance(capsys):
    """The untrained 1.5B agent steering the 0.5B on medmcqa-eval's seeded 200 (README: what steers):
    its scores do not rank the gold answer above the others of the same step."""
    s = selection(QWEN_PRA)
    assert (s.n, s.answered, round(s.accuracy, 3), round(s.vote, 3)) == (200, 197, 0.34, 0.285)
    assert round(s.auroc, 3) == 0.501 and s.auroc_ci[0] < 0.5 < s.auroc_ci[1] and s.auroc_questions == 118
    main([str(QWEN_PRA)])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("| run | n | accuracy |") and f"| {QWEN_PRA} | 200 | 0.340 | 197 |" in lines[2]
    assert lines[-1] == "1 run(s): the agent's scores rank a gold answer above another answer of the same step " \
                        "with a CI above chance in 0"
