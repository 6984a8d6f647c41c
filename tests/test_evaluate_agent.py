"""Held-out metrics of a reward agent (training.evaluate_agent): the keys of metrics.json, intervals that
resample questions, the prompt an agent folder records, and an older agent read with its own earlier
readouts. The end-to-end test runs a tiny random Llama (SmolLM2's tokenizer) with a random LoRA adapter."""
import json
import shutil
from dataclasses import replace

import numpy as np
import pytest

from pra.errors import UserError
from pra.models import AGENTS_DIR
from pra.reward_agent import PROMPT_RECORD, Readout, ScoreRequest, load_reward_agent, render_prompt, shows_earlier_rewards
from pra.types import Question
from tests.fakes import tiny_llama_folder, tiny_lora_folder
from tests.test_training import write_labels
from training.dataset import Example, load_examples
from training.evaluate_agent import (READOUTS, agent_readouts, evaluate_agent, excludes_chance, held_out_summary,
                                     question_bootstrap, search_baselines, step_metrics, versus_agent,
                                     versus_rules)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(a random 2-layer Llama folder, a random non-zero LoRA adapter on it), as ``pra train`` would
    leave an agent before prompt records existed (no ``prompt.json``)."""
    root = tmp_path_factory.mktemp("tiny")
    tiny_lora_folder(root / "agent", tiny_llama_folder(root / "base", layers=2, max_position_embeddings=2048))
    return root


def example(qid: str, step_index: int, reward: float, docs: bool = False, step: str | None = None,
            own: bool = False) -> Example:
    q = Question(qid, "Which vitamin prevents scurvy?", {"A": "A", "B": "C"}, "B", "train")
    request = ScoreRequest(q, tuple(f"step {j}" for j in range(1, step_index)), (None,) * (step_index - 1),
                           step or f"step {step_index}", (("t", "x"),) if docs else ())
    return Example(f"{qid}/t0/s{step_index}" + ("+docs" if docs else ""), qid, f"{qid}/t0", step_index, request,
                   reward, 1, own)


def test_intervals_resample_questions_not_steps():
    # 4 questions, each a positive and a negative step repeated 5 times (40 steps): the copies add no
    # information, so the interval must be that of 4 questions, far wider than that of the same 40
    # steps as 40 questions (what a bootstrap over steps would give either way).
    from sklearn.metrics import roc_auc_score

    pairs = [(0.9, 0.2), (0.4, 0.6), (0.7, 0.3), (0.5, 0.45)]          # (positive's, negative's readout)
    y = np.array([1, 0] * 20)
    p = np.array([v for _ in range(5) for pair in pairs for v in pair])
    qids = [f"q{k}" for _ in range(5) for k in range(4) for _ in range(2)]
    clustered = [example(qid, 1, float(label)) for qid, label in zip(qids, y)]
    flat = [example(f"s{i}", 1, float(label)) for i, label in enumerate(y)]
    auroc = lambda i: roc_auc_score(y[i], p[i]) if 0 < y[i].sum() < len(i) else None
    narrow, wide = question_bootstrap(flat, auroc), question_bootstrap(clustered, auroc)
    assert narrow[0] <= roc_auc_score(y, p) <= narrow[1] and wide[0] <= roc_auc_score(y, p) <= wide[1]
    assert wide[1] - wide[0] > 2 * (narrow[1] - narrow[0])
    assert question_bootstrap(clustered, lambda i: None) is None          # undefined on every resample
    one_question = [example("q0", 1, float(label)) for label in y]
    assert question_bootstrap(one_question, auroc) is None                # no spread to resample from


def test_step_metrics_and_the_paired_gain():
    examples = [example(f"q{i}", s, float((i + s) % 2)) for i in range(8) for s in (1, 2)]
    good = [Readout(0.2 + 0.6 * e.reward, 0.9 if i % 2 else 0.1) for i, e in enumerate(examples)]
    flat = [Readout(0.5, 0.7) for _ in examples]
    trained, untrained = step_metrics(examples, good), step_metrics(examples, flat)
    assert trained["reward_auroc"] == 1.0 and untrained["reward_auroc"] == 0.5
    assert trained["action_std"] == pytest.approx(0.4) and untrained["action_std"] == 0.0
    assert trained["search_accuracy"] == 0.5 and untrained["search_accuracy"] == 1.0
    assert trained["reward_auroc_ci"] == [1.0, 1.0] and len(trained[READOUTS]) == 16
    summary = held_out_summary(examples, untrained, trained)
    assert summary["reward_auroc_gain"] == 0.5 and summary["reward_auroc_gain_ci"] == [0.5, 0.5]
    assert summary["untrained_reward_auroc"] == 0.5 and summary["action_std"] == trained["action_std"]
    assert held_out_summary([], {"examples": 0}, {"examples": 0})["reward_auroc"] is None
    # next to their baselines: the AUROC's interval against chance, the search accuracy against a constant
    assert trained["reward_auroc_excludes_chance"] is True and untrained["reward_auroc_excludes_chance"] is False
    assert summary["reward_auroc_excludes_chance"] is True
    assert summary["search_positive_share"] == summary["always_search_accuracy"] == 1.0     # every label here is 1
    assert untrained["search_accuracy"] == untrained["always_search_accuracy"]             # the flat 0.7 readout


def test_search_accuracy_is_also_read_where_a_threshold_controller_decides():
    # Per question: a step the teacher says to search for (label 1, also shown with its documents: that
    # prompt's label is 1 by construction) and one not to (label 0). A readout that only notices the
    # documents matches always-searching where it decides; one that tells the steps apart beats it there.
    examples = [e for i in range(10) for e in (example(f"q{i}", 1, 1.0), example(f"q{i}", 1, 1.0, docs=True),
                                                replace(example(f"q{i}", 2, 0.0), search=0))]
    sees_docs = step_metrics(examples, [Readout(0.5, 0.9 if e.request.docs else 0.1) for e in examples])
    decides = step_metrics(examples, [Readout(0.5, 0.9 if e.search else 0.1) for e in examples])
    assert sees_docs["prompts_without_docs"] == decides["prompts_without_docs"] == 20
    assert sees_docs["always_search_accuracy_without_docs"] == 0.5 and sees_docs["always_search_accuracy"] == pytest.approx(2 / 3)
    assert sees_docs["search_accuracy_without_docs"] == 0.5 and sees_docs["search_minus_always_without_docs_ci"] == [0.0, 0.0]
    assert decides["search_accuracy_without_docs"] == 1.0 and decides["search_minus_always_without_docs_ci"] == [0.5, 0.5]
    assert decides["action_median_without_docs"] == pytest.approx(0.5)
    summary = held_out_summary(examples, sees_docs, decides)
    assert summary["search_accuracy_without_docs"] == 1.0 and summary["untrained_search_accuracy_without_docs"] == 0.5
    only_docs = step_metrics(examples[1:2], [Readout(0.5, 0.9)])
    assert only_docs["prompts_without_docs"] == 0 and only_docs["search_accuracy_without_docs"] is None


def test_the_answering_step_rule_stands_next_to_the_agent():
    # Per question a positive and a negative reasoning step and a wrong answer (a negative): ranking
    # answering steps last scores 0.75 without reading anything. An agent that learned only that gains
    # nothing over the rule; one that also tells the reasoning steps apart gains +0.25 on every resample.
    examples = [e for i in range(10) for e in (example(f"q{i}", 1, 1.0), example(f"q{i}", 2, 0.0),
                                                example(f"q{i}", 3, 0.0, step="So the answer is (A)."))]
    answering = lambda e: e.request.step.startswith("So")
    untrained = step_metrics(examples, [Readout(0.5, 0.5) for _ in examples])
    rule_only = held_out_summary(examples, untrained, step_metrics(
        examples, [Readout(0.2 if answering(e) else 0.6, 0.5) for e in examples]))
    assert rule_only["answer_rule_reward_auroc"] == 0.75 and rule_only["reward_auroc"] == 0.75
    assert rule_only["reward_auroc_minus_answer_rule"] == 0.0
    reader = held_out_summary(examples, untrained, step_metrics(
        examples, [Readout(0.1 + 0.8 * e.reward, 0.5) for e in examples]))
    assert reader["reward_auroc_minus_answer_rule"] == 0.25
    assert reader["reward_auroc_minus_answer_rule_ci"] == [0.25, 0.25]
    assert reader["answer_rule_reward_auroc_ci"] == [0.75, 0.75]


def test_search_baselines_and_chance():
    examples = [example(f"q{i}", 1, 1.0) for i in range(4)]
    examples[0] = replace(examples[0], search=0)
    assert search_baselines(examples) == {"search_positive_share": 0.75, "always_search_accuracy": 0.75,
                                          "constant_search_accuracy": 0.75}
    assert search_baselines([])["constant_search_accuracy"] is None
    assert excludes_chance([0.472, 0.591]) is False and excludes_chance([0.51, 0.6]) is True
    assert excludes_chance([0.3, 0.45]) is True and excludes_chance(None) is None


def test_versus_rules_credits_an_agent_only_where_it_beats_every_rule():
    # Both options named once in the documents, the gold one longer in half the questions: the substring
    # rule is a constant, the length rule at chance. An agent that reads the statement beats both; an
    # agent that rewards length does not.
    examples = []
    for i in range(40):
        q = Question(f"q{i}", "Which vitamin prevents scurvy?", {"A": "Vitamin C", "B": "Vitamin B12"}, "A", "train")
        gold, wrong = ("Vitamin C", "Vitamin B12") if i % 2 else ("Vitamin B12", "Vitamin C")
        docs = ((f"t{i}", f"It is not {wrong} but {gold}."),)
        for label, text in ((1.0, gold), (0.0, wrong)):
            request = ScoreRequest(q, (), (), f"The correct choice is {text}.", docs)
            examples.append(Example(f"q{i}/{label}", f"q{i}", f"q{i}/t{int(label)}", 1, request, label, 1, False))
    reader = versus_rules(examples, [e.reward * 0.8 + 0.1 for e in examples])
    assert reader["substring"]["reward_auroc"] == 0.5 and reader["length"]["reward_auroc"] == 0.5
    assert reader["agent"]["reward_auroc"] == 1.0 and reader["beats_all_rules"] is True
    assert reader["length"]["agent_minus_rule"] == 0.5 and reader["resamples"] == 1000
    by_length = versus_rules(examples, [len(e.request.step) for e in examples])
    assert by_length["beats_all_rules"] is False and by_length["length"]["agent_minus_rule"] == 0.0


def test_subgroups_separate_prompts_whose_evidence_states_the_answer():
    # The agent ranks perfectly where its documents hold the question's own explanation, and inversely
    # elsewhere: overall it looks like chance, the subgroups say where it learned.
    examples, readouts = [], []
    for i in range(12):
        own = i % 2 == 0
        for s, reward in ((1, 1.0), (2, 0.0)):
            step = "So the answer is (B)." if s == 2 else f"step {s}"
            examples.append(example(f"q{i}", s, reward, docs=True, step=step, own=own))
            readouts.append(Readout(reward if own else 1 - reward, 0.5))
    untrained = step_metrics(examples, [Readout(0.5, 0.5) for _ in examples])
    summary = held_out_summary(examples, untrained, step_metrics(examples, readouts))
    assert summary["reward_auroc"] == 0.5
    own = summary["subgroups"]["own_evidence"]
    assert own["examples"] == 12 and own["reward_auroc"] == 1.0 and own["reward_auroc_gain"] == 0.5
    assert own["reward_auroc_gain_ci"] == [0.5, 0.5]
    assert summary["subgroups"]["with_docs"]["examples"] == 24 and "without_docs" not in summary["subgroups"]
    # every answering step is a negative here: its AUROC is undefined, not a number
    assert summary["subgroups"]["answering"]["reward_auroc"] is None
    assert summary["subgroups"]["open"]["positive_share"] == 1.0


def test_own_evidence_is_a_passage_of_the_questions_own_row(tmp_path):
    rows = [{"id": f"q{k}/t0/s1", "question_id": f"q{k}", "trace": 0, "step_index": 1, "question": "Q?",
             "options": {"A": "a", "B": "b"}, "gold": "A", "steps": [], "step": "s", "docs": [["t", "x"]],
             "doc_ids": [doc], "judge_label": 1}
            for k, doc in enumerate(["medmcqa:q0#2", "medmcqa:q10#0"])]
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    own = {e.id: e.own_evidence for e in load_examples(path, "judge", "always")}
    assert own == {"q0/t0/s1": False, "q0/t0/s1+docs": True, "q1/t0/s1": False, "q1/t0/s1+docs": False}


class RecordingAgent:
    """Reward = 0.1 x the step's position; remembers the earlier rewards each prompt showed."""

    def __init__(self, earlier_rewards: bool):
        self.earlier_rewards, self.shown = earlier_rewards, {}

    def score(self, requests):
        out = []
        for r in requests:
            position = len(r.steps) + 1
            self.shown[(r.question.id, position, bool(r.docs))] = r.rewards
            out.append(Readout(0.1 * position + (0.05 if r.docs else 0.0), 0.5))
        return out


def test_an_agent_that_shows_earlier_rewards_sees_its_own_readouts():
    examples = [example("q0", 3, 1.0), example("q0", 1, 1.0), example("q0", 2, 0.0), example("q0", 2, 0.0, docs=True),
                example("q0", 1, 1.0, docs=True)]
    old = RecordingAgent(earlier_rewards=True)
    readouts = agent_readouts(old, examples)
    assert [r.reward for r in readouts] == pytest.approx([0.3, 0.1, 0.2, 0.25, 0.15])    # in the examples' order
    assert old.shown[("q0", 2, False)] == pytest.approx((0.1,))            # step 1 read without documents
    assert old.shown[("q0", 2, True)] == pytest.approx((0.15,))            # step 1 read with them
    assert old.shown[("q0", 3, False)] == pytest.approx((0.1, 0.2))
    new = RecordingAgent(earlier_rewards=False)
    agent_readouts(new, examples)
    assert new.shown[("q0", 3, False)] == (None, None)


def test_prompt_records_of_agent_folders(tmp_path):
    assert shows_earlier_rewards(None) and shows_earlier_rewards(str(tmp_path))        # no record: older prompt
    (tmp_path / PROMPT_RECORD).write_text('{"earlier_rewards": false}')
    assert shows_earlier_rewards(str(tmp_path)) is False
    (tmp_path / PROMPT_RECORD).write_text('{"earlier_rewards": "no"}')
    with pytest.raises(UserError, match=f"{tmp_path / PROMPT_RECORD}"):
        shows_earlier_rewards(str(tmp_path))


def test_the_shipped_agent_folder_is_still_read_with_its_older_prompt(tmp_path):
    """pra-smollm2-cpu predates prompt records: it is read with earlier rewards shown, as it was trained."""
    old = tmp_path / "old-agent"
    shutil.copytree(AGENTS_DIR / "pra-smollm2-cpu", old)
    assert not (old / PROMPT_RECORD).exists()
    agent = load_reward_agent(str(old))
    assert agent.earlier_rewards is True
    q = Question("q", "Which vitamin prevents scurvy?", {"A": "A", "B": "C"}, "B", "train")
    prefix, _ = render_prompt(agent.backend, ScoreRequest(q, ("Scurvy impairs collagen.",), (0.8,), "Vitamin C."),
                              agent.max_doc_chars, agent.earlier_rewards)
    assert "Step 1: Scurvy impairs collagen. (reward 0.80)" in prefix


def test_the_command_writes_its_metrics_file_beside_a_recipe(tiny, tmp_path):
    """`--out` names the metrics file; the recipe's own `out` (its run folder) must not swallow it."""
    from pra import cli

    labels = write_labels(tmp_path / "labels.jsonl")
    out = tmp_path / "held-out.json"
    cli.main(["agent", "evaluate", str(tiny / "agent"), "--recipe", "cpu", "--labels", str(labels),
              "--reward-label", "judge", "--search-label", "always", "--val-fraction", "1.0", "--out", str(out),
              "--versus", str(tiny / "agent")])
    written = json.loads(out.read_text())
    assert written["examples"] == 16 and written["labels"] == str(labels)
    versus = written["versus"]            # the agent against itself: the same readouts, no difference
    assert versus["agent"] == str(tiny / "agent") and versus["versus_reward_auroc"] == written["reward_auroc"]
    assert versus["reward_auroc_minus_versus"] == 0.0 and versus["reward_auroc_minus_versus_ci"] == [0.0, 0.0]


def test_versus_pairs_two_agents_on_the_same_steps(tiny):
    """The second agent's AUROC is its own readouts' (here the backbone's), the difference is taken on
    the same steps, and every subgroup carries the same keys."""
    examples = [example(f"q{i}", s, float((i + s) % 2), docs=bool(s % 2)) for i in range(6) for s in (1, 2)]
    agent = load_reward_agent(str(tiny / "agent"))
    ours = [r.reward for r in agent_readouts(agent, examples)]
    out = versus_agent(examples, ours, load_reward_agent(str(tiny / "base")), "base")
    from sklearn.metrics import roc_auc_score

    assert out["reward_auroc"] == pytest.approx(roc_auc_score([int(e.reward >= 0.5) for e in examples], ours))
    assert out["reward_auroc_minus_versus"] == pytest.approx(out["reward_auroc"] - out["versus_reward_auroc"])
    lo, hi = out["reward_auroc_minus_versus_ci"]
    assert lo <= hi and out["examples"] == 12 and 0.0 <= out["versus_search_accuracy"] <= 1.0
    assert set(out["subgroups"]) == {"with_docs", "without_docs", "open"}
    assert out["subgroups"]["with_docs"]["examples"] == 6


def test_evaluate_agent_writes_the_held_out_keys(tiny, tmp_path):
    labels = write_labels(tmp_path / "labels.jsonl")
    metrics = evaluate_agent(str(tiny / "agent"), str(labels), "judge", "always", val_fraction=1.0, seed=0)
    for key in ("reward_auroc", "reward_pr_auc", "untrained_reward_auroc", "action_std", "search_accuracy"):
        assert isinstance(metrics[key], float)
    for key in ("reward_auroc_ci", "untrained_reward_auroc_ci", "reward_auroc_gain_ci"):
        assert len(metrics[key]) == 2 and metrics[key][0] <= metrics[key][1]
    assert metrics["examples"] == 16 and metrics["questions"] == 4       # always-search: 8 steps, with and without documents
    assert metrics["earlier_rewards_shown"] is True                      # no prompt record: the older prompt
    assert 0.0 <= metrics["search_accuracy"] <= 1.0 and metrics["action_std"] >= 0.0
    assert metrics["final"]["action_mean"] != metrics["initial"]["action_mean"]     # the adapter is applied
    assert READOUTS not in metrics["final"]
    json.dumps(metrics)
    (tiny / "agent" / PROMPT_RECORD).write_text('{"earlier_rewards": false}')
    newer = evaluate_agent(str(tiny / "agent"), str(labels), "judge", "always", val_fraction=1.0, seed=0)
    (tiny / "agent" / PROMPT_RECORD).unlink()
    assert newer["earlier_rewards_shown"] is False
    # steps 1 see no earlier rewards either way; the step-2 prompts differ, and so may their readouts
    assert newer["initial"]["examples"] == 16
    with pytest.raises(UserError, match="backbone"):
        evaluate_agent(str(tiny / "base"), str(labels), "judge", "always", val_fraction=1.0, seed=0)
