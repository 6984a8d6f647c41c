"""The reward agents that ship in pra/agents: they resolve by name, the default loads, and each scores
steps the way its training taught it, where the untrained backbone does not."""
import json

from eval.run import EvalConfig
from pra.models import AGENTS_DIR, DEFAULT_REWARD_AGENT, resolve_reward_agent
from pra.reward_agent import RewardAgent, ScoreRequest, load_reward_agent
from pra.benchmarks import load_eval_benchmark

REASONING = "The question asks which structure is involved; recall its anatomy."
NONSENSE = "Option A is the answer because the sky is blue."
BARE_ANSWER = "The answer is (B)."


def requests(n: int = 3) -> list[ScoreRequest]:
    return [ScoreRequest(q, (), (), step) for q in load_eval_benchmark("medmcqa-eval", limit=n).questions
            for step in (REASONING, NONSENSE, BARE_ANSWER)]


def test_the_default_reward_agent_is_the_shipped_adapter_its_card_names():
    assert EvalConfig().reward_agent == DEFAULT_REWARD_AGENT
    base, adapter = resolve_reward_agent(DEFAULT_REWARD_AGENT)
    assert base == "smollm2-135m-instruct" and adapter == str(AGENTS_DIR / DEFAULT_REWARD_AGENT)
    for card in AGENTS_DIR.glob("*/README.md"):
        assert ("(the default)" in card.read_text()) == (card.parent.name == DEFAULT_REWARD_AGENT), card
    card = (AGENTS_DIR / DEFAULT_REWARD_AGENT / "README.md").read_text()
    metrics = json.loads((AGENTS_DIR / DEFAULT_REWARD_AGENT / "metrics.json").read_text())
    assert f"{metrics['final']['reward_auroc']:.3f}" in card
    assert metrics["reward_auroc"] > metrics["untrained_reward_auroc"] and metrics["reward_auroc_gain_ci"][0] > 0


def test_the_default_agent_rates_and_asks_by_the_step_where_its_backbone_does_not(smollm2):
    """Gold-probability labels: a reasoning step earns more reward than nonsense and more wish to search
    than a bare answer (documents cannot move an answer already given); the backbone rates all alike."""
    tuned = load_reward_agent(DEFAULT_REWARD_AGENT).score(requests())
    base = RewardAgent(smollm2).score(requests())
    for reasoning, nonsense, bare in zip(tuned[0::3], tuned[1::3], tuned[2::3]):
        assert reasoning.reward > nonsense.reward + 0.03 and reasoning.reward > bare.reward + 0.03
        assert reasoning.action > bare.action + 0.2
    assert not any(reasoning.reward > nonsense.reward + 0.03 for reasoning, nonsense in zip(base[0::3], base[1::3]))


def test_the_always_search_agent_learned_to_ask_for_evidence(smollm2):
    """pra-smollm2-cpu, trained with always-search labels: its action readout sits high where the
    backbone's is low."""
    tuned = load_reward_agent("pra-smollm2-cpu").score(requests(1)[:2])
    base = RewardAgent(smollm2).score(requests(1)[:2])
    assert all(0.0 < r.reward < 1.0 for r in tuned)
    assert all(t.action > 0.5 for t in tuned) and all(b.action < 0.5 for b in base)


def test_the_evidence_agent_checks_a_step_against_its_documents(smollm2, tmp_path):
    """pra-smollm2-evidence (training.evidence_check, recipe cpu-evidence), on 12 of the questions its
    training held out: with the question's own explanation among the documents it rewards the step that
    names the gold option above the one naming a wrong option, where its backbone does not; without the
    documents the two steps look alike to it."""
    from dataclasses import replace

    from training.dataset import load_examples, split_by_question
    from training.evidence_check import build

    labels = tmp_path / "labels.jsonl"           # the recipe's label set and validation split
    labels.write_text("".join(json.dumps(r) + "\n" for r in build(1000, seed=0)))
    held_out = split_by_question(load_examples(labels, "evidence", "always", without_docs=False), 0.2, seed=0)[1]
    with_docs = [e.request for e in held_out[:24]]
    assert [e.reward for e in held_out[:24]] == [1.0, 0.0] * 12
    without = [replace(r, docs=()) for r in with_docs]
    tuned, base = load_reward_agent("pra-smollm2-evidence"), RewardAgent(smollm2)
    margins = lambda agent, reqs: [g.reward - w.reward for g, w in zip(*[iter(agent.score(reqs))] * 2)]
    read, unread, backbone = margins(tuned, with_docs), margins(tuned, without), margins(base, with_docs)
    assert sum(m > 0 for m in read) >= 11 and sum(m > 0 for m in backbone) <= 9
    assert sum(abs(m) for m in unread) < 0.5 * sum(abs(m) for m in read)
