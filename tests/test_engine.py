import pytest

from pra.types import Question
from search.aggregation import aggregate_rewards
from search.engine import Engine, SearchConfig, Trace
from pra.reward_agent import Readout
from search.controllers import Threshold
from tests.fakes import FixedRetriever, ScriptedPolicy, TableRewardAgent


def q(i: int) -> Question:
    return Question(f"q{i}", f"question {i}", {"A": "a", "B": "b", "C": "c", "D": "d"}, "B", "t")


def test_cot_answers_and_early_traces_leave_the_queue():
    # question 0 answers at step 1, question 1 at step 3
    policy = ScriptedPolicy(lambda qt, step, i: "the answer is (B)" if (qt == "question 0" or step == 3)
                            else f"thinking {step}")
    done = list(Engine(policy, SearchConfig(max_steps=4)).run([Trace(q(0)), Trace(q(1))]))
    assert [t.question.id for t in done] == ["q0", "q1"]
    assert [len(c) for c in policy.calls] == [2, 1, 1]       # q0 left after the first call
    assert done[1].prediction == "B" and not done[1].forced
    assert [s.text for s in done[1].best.steps] == ["thinking 1", "thinking 2", "the answer is (B)"]


def test_step_limit_forces_an_answer_from_the_logits():
    policy = ScriptedPolicy(lambda qt, step, i: f"still thinking {step}", force="C")
    (t,) = Engine(policy, SearchConfig(max_steps=2)).run([Trace(q(0))])
    assert t.prediction == "C" and t.forced and len(t.best.steps) == 2


def test_empty_step_ends_the_trace_unanswered():
    policy = ScriptedPolicy(lambda qt, step, i: "" if step == 2 else "a fact", force="D")
    (t,) = Engine(policy, SearchConfig(max_steps=5)).run([Trace(q(0))])
    assert t.depth == 2 and t.forced and t.prediction == "D"


def test_self_consistency_votes_over_k_samples():
    answers = "ABB"
    policy = ScriptedPolicy(lambda qt, step, i: f"the answer is ({answers[i]})")
    (t,) = Engine(policy, SearchConfig(beam_width=3, aggregate="vote")).run([Trace(q(0))])
    assert [c.answer for c in t.beam] == ["A", "B", "B"] and t.prediction == "B"


def test_queue_holds_at_most_max_active_traces():
    policy = ScriptedPolicy(lambda qt, step, i: "the answer is (A)" if step == 2 else "x")
    done = list(Engine(policy, SearchConfig()).run([Trace(q(i)) for i in range(5)], max_active=2))
    assert sorted(t.question.id for t in done) == [f"q{i}" for i in range(5)]
    assert max(len(c) for c in policy.calls) == 2


def test_pruning_keeps_exactly_the_top_b_by_cumulative_reward():
    # root proposes B*b = 4 candidates; rewards decide which 2 survive; then each survivor branches twice
    policy = ScriptedPolicy(lambda qt, step, i: f"s{step}-{i}" if step == 1 else f"the answer is ({'ABCD'[i]})")
    agent = TableRewardAgent({"s1-0": 0.1, "s1-1": 0.9, "s1-2": 0.5, "s1-3": 0.7,
                              "the answer is (A)": 0.2, "the answer is (B)": 0.6})
    (t,) = Engine(policy, SearchConfig(beam_width=2, branching=2), reward_agent=agent).run([Trace(q(0))])
    first = [r.step for r in agent.requests[0]]
    assert first == ["s1-0", "s1-1", "s1-2", "s1-3"]
    # children: s1-1 -> 0.9+0.2, 0.9+0.6; s1-3 -> 0.7+0.2, 0.7+0.6: the top two end in (B)
    assert [c.steps[0].text for c in t.beam] == ["s1-1", "s1-3"]
    assert [round(c.score, 6) for c in t.beam] == [1.5, 1.3]
    assert t.prediction == "B"
    # the second step was expanded only from the two survivors (s1-1 and s1-3), b=2 each
    assert len(policy.calls[1]) == 2 and all("s1-1" in p or "s1-3" in p for p in policy.calls[1])


def test_a_searched_step_keeps_the_action_that_decided_and_the_reward_read_with_documents():
    class DocsAwareAgent:
        """Asks for search without documents; with them, a different reward and no wish to search."""
        def score(self, requests):
            return [Readout(0.8, 0.1) if r.docs else Readout(0.3, 0.9) for r in requests]

    policy = ScriptedPolicy(lambda qt, step, i: "the answer is (B)")
    engine = Engine(policy, SearchConfig(beam_width=1, branching=1), reward_agent=DocsAwareAgent(),
                    retriever=FixedRetriever(), controller=Threshold(0.5))
    (t,) = engine.run([Trace(q(0))])
    (step,) = t.best.steps
    assert step.searched and step.doc_ids == ["doc1"] and t.stats["searches"] == 1
    assert step.action == 0.9 and step.reward == 0.8


def test_reward_aggregations_on_exact_values():
    r = [0.6, 0.7]
    assert [aggregate_rewards(r, how) for how in ("sum", "mean", "last", "min", "prod")] == \
        pytest.approx([1.3, 0.65, 0.7, 0.6, 0.42])
    with pytest.raises(ValueError, match="unknown reward aggregation 'median'"):
        aggregate_rewards(r, "median")
    with pytest.raises(ValueError, match="search.reward_aggregation: unknown 'avg'"):
        SearchConfig(reward_aggregation="avg")


@pytest.mark.parametrize("how, beam", [
    ("sum", [("B", 1.3), ("C", 0.7)]),      # the longer traces outrank the finished (A)
    ("mean", [("B", 0.65), ("A", 0.55)]),
    ("last", [("B", 0.7), ("A", 0.55)]),
    ("min", [("B", 0.6), ("A", 0.55)]),
    ("prod", [("A", 0.55), ("B", 0.42)]),   # only prod lets the one-step answer win
])
def test_reward_aggregation_prunes_the_beam_and_picks_the_answer(how, beam):
    # step 1 (B x b = 4): (A) answers at once; s1-1 survives with it; step 2: s1-1 -> (B) or (C)
    first = ["the answer is (A)", "s1-1", "s1-2", "s1-3"]
    policy = ScriptedPolicy(lambda qt, step, i: first[i] if step == 1 else f"the answer is ({'BC'[i]})")
    agent = TableRewardAgent({"the answer is (A)": 0.55, "s1-1": 0.6, "s1-2": 0.4, "s1-3": 0.3,
                              "the answer is (B)": 0.7, "the answer is (C)": 0.1})
    cfg = SearchConfig(beam_width=2, branching=2, max_steps=2, reward_aggregation=how)
    (t,) = Engine(policy, cfg, reward_agent=agent).run([Trace(q(0))])
    assert [(c.answer, round(c.score, 6)) for c in t.beam] == beam
    assert t.prediction == beam[0][0]


def test_reward_aggregation_is_a_recipe_field_and_a_flag():
    from eval.run import eval_config
    from pra.cli import _eval_config, build_parser

    assert eval_config({"recipe": "pra-cpu"}).search.reward_aggregation == "sum"
    args = build_parser().parse_args(["eval", "--recipe", "pra-cpu", "--reward-aggregation", "min"])
    assert _eval_config(args).search.reward_aggregation == "min"
    with pytest.raises(ValueError, match="reward_aggregation"):
        eval_config({"recipe": "pra-cpu", "search": {"reward_aggregation": "avg"}})
