"""The reward agents that ship in pra/agents: they resolve by name, the default loads, and each scores
steps the way its training taught it, where the untrained backbone does not. Every check is recomputed
from the model (none reads a committed metrics.json), on inputs where a trivial rule gives the wrong
order: the longer step is the worse one (a length rule fails), orders are strict (a constant readout
fails), and both options are named in the documents (a substring rule fails)."""
import json

from eval.run import EvalConfig
from pra.models import AGENTS_DIR, DEFAULT_REWARD_AGENT, resolve_reward_agent
from pra.reward_agent import RewardAgent, ScoreRequest, load_reward_agent
from pra.benchmarks import load_eval_benchmark

REASONING = "The question asks which structure is involved; recall its anatomy."
NONSENSE = "Option A is the answer because the sky is blue."
BARE_ANSWER = "The answer is (B)."
# Each longer than SHORT_REASONING: a reward that grows with length ranks them first.
SHORT_REASONING = "Recall the anatomy involved."
LONG_NONSENSE = "Option A is the answer because the sky is blue, the grass is green, and the weather today is pleasant and mild."
LONG_BARE_ANSWER = "Having considered everything carefully and at length, the final answer is (B)."


def requests(n: int = 3) -> list[ScoreRequest]:
    return [ScoreRequest(q, (), (), step) for q in load_eval_benchmark("medmcqa-eval", limit=n).questions
            for step in (REASONING, NONSENSE, BARE_ANSWER)]


def test_the_default_reward_agent_is_the_shipped_adapter_its_card_names():
    assert EvalConfig().reward_agent == DEFAULT_REWARD_AGENT
    base, adapter = resolve_reward_agent(DEFAULT_REWARD_AGENT)
    assert base == "smollm2-135m-instruct" and adapter == str(AGENTS_DIR / DEFAULT_REWARD_AGENT)
    for card in AGENTS_DIR.glob("*/README.md"):
        assert ("(the default)" in card.read_text()) == (card.parent.name == DEFAULT_REWARD_AGENT), card


def test_the_default_agent_rates_and_asks_by_the_step_where_its_backbone_does_not(smollm2):
    """Gold-probability labels: a reasoning step earns more reward than nonsense and more wish to search
    than a bare answer (documents cannot move an answer already given); the backbone rates all alike."""
    tuned = load_reward_agent(DEFAULT_REWARD_AGENT).score(requests())
    base = RewardAgent(smollm2).score(requests())
    for reasoning, nonsense, bare in zip(tuned[0::3], tuned[1::3], tuned[2::3]):
        assert reasoning.reward > nonsense.reward + 0.03 and reasoning.reward > bare.reward + 0.03
        assert reasoning.action > bare.action + 0.2
    assert not any(reasoning.reward > nonsense.reward + 0.03 for reasoning, nonsense in zip(base[0::3], base[1::3]))


def test_the_default_agents_order_is_not_the_length_of_the_step():
    """The default agent's reward does grow with a step's length (nonsense made longer gains about 0.08),
    so a short reasoning step against longer nonsense and a longer bare answer is where a length rule
    gives the wrong order; the agent's is the right one (margins measured: 0.024-0.072 and 0.084-0.10
    in reward, 0.28-0.44 in the wish to search)."""
    questions = load_eval_benchmark("medmcqa-eval", limit=3).questions
    steps = (SHORT_REASONING, LONG_NONSENSE, LONG_BARE_ANSWER)
    assert len(SHORT_REASONING) < min(len(LONG_NONSENSE), len(LONG_BARE_ANSWER))
    tuned = load_reward_agent(DEFAULT_REWARD_AGENT).score([ScoreRequest(q, (), (), s) for q in questions for s in steps])
    for short, nonsense, bare in zip(tuned[0::3], tuned[1::3], tuned[2::3]):
        assert short.reward > nonsense.reward + 0.01 and short.reward > bare.reward + 0.05
        assert short.action > bare.action + 0.2


def test_the_always_search_agent_learned_to_ask_for_evidence(smollm2):
    """pra-smollm2-cpu, trained with always-search labels: its action readout sits high (>= 0.999) where
    the backbone's is low. A constant readout of 1 would do the same, and that is all always-search
    labels teach (its search accuracy 1.0 is against an all-ones label); what a constant would not do
    is the rest: the adapter reads the step, its reward moving with it (0.18-0.24 measured)."""
    tuned = load_reward_agent("pra-smollm2-cpu").score(requests())
    base = RewardAgent(smollm2).score(requests())
    assert all(0.0 < r.reward < 1.0 for r in tuned)
    assert all(t.action > 0.99 for t in tuned) and all(b.action < 0.5 for b in base)
    for i in range(0, len(tuned), 3):
        rewards = [r.reward for r in tuned[i:i + 3]]
        assert max(rewards) - min(rewards) > 0.01


def test_the_evidence_agent_matches_option_texts_and_does_not_read_the_evidence(smollm2, tmp_path):
    """pra-smollm2-evidence (training.evidence_check, recipe cpu-evidence). On 12 of the questions its
    training held out, with the question's own explanation among the documents, it rewards the step
    naming the gold option above the one naming a wrong option, where its backbone does not; without the
    documents the two steps look alike to it. But on that set the rule "is the step's option in the
    documents?" does the same (gold first in 12 of 12). On the contrast set (both options named in the
    documents as often, the wrong one refuted; questions it never trained on), where that rule ties
    every pair, the agent's margins shrink to noise and put the gold step first in about half the
    questions (6 of 12 measured): it learned string matching, not reading. This pins the README's
    claim; an agent that reads would fail the last two lines, and the claim would change with it."""
    from dataclasses import replace

    from training.dataset import load_examples, split_by_question
    from training.evidence_check import build, build_contrast, rule_scores, trained_questions

    def held_out(records, name, fraction):
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        return split_by_question(load_examples(path, "evidence", "always", without_docs=False), fraction, seed=0)[1][:24]

    first = held_out(build(1000, seed=0), "labels.jsonl", 0.2)         # the recipe's label set and validation split
    contrast = held_out(build_contrast(300, seed=0, exclude=trained_questions()), "contrast.jsonl", 1 / 3)
    for steps in (first, contrast):
        assert [e.reward for e in steps] == [1.0, 0.0] * 12
    with_docs = [e.request for e in first]
    without = [replace(r, docs=()) for r in with_docs]
    tuned, base = load_reward_agent("pra-smollm2-evidence"), RewardAgent(smollm2)
    margins = lambda agent, reqs: [g.reward - w.reward for g, w in zip(*[iter(agent.score(reqs))] * 2)]
    read, unread, backbone = margins(tuned, with_docs), margins(tuned, without), margins(base, with_docs)
    substring = lambda steps: [g - w for g, w in zip(*[iter(rule_scores(steps)["substring"])] * 2)]
    assert sum(m > 0 for m in read) >= 11 and sum(m > 0 for m in backbone) <= 9
    assert sum(abs(m) for m in unread) < 0.5 * sum(abs(m) for m in read)
    assert substring(first) == [1.0] * 12 and substring(contrast) == [0.0] * 12     # the rule: solved, then tied
    checked = margins(tuned, [e.request for e in contrast])
    assert sum(m > 0 for m in checked) <= 9
    assert sum(abs(m) for m in checked) < 0.25 * sum(abs(m) for m in read)


def qwen_readouts(agent_name: str, base_name: str) -> tuple[list, list]:
    """A shipped Qwen agent's readouts of ``requests()`` and its untrained backbone's (float32), one
    model in memory at a time."""
    from pra import models
    from pra.backends.transformers_backend import TransformersBackend
    from tests.conftest import require

    if not models.prepared(models.EMBEDDED[base_name]):
        require("qwen", f"{base_name} is not prepared: pra models --prepare {base_name}")
    agent = load_reward_agent(agent_name)
    assert agent.backend.name == base_name
    tuned = agent.score(requests())
    del agent
    return tuned, RewardAgent(TransformersBackend(base_name, dtype="float32")).score(requests())


def test_the_qwen_agent_rates_reasoning_above_nonsense_where_its_backbone_does_not():
    """`pra-qwen05-goldprob` (LoRA on the Qwen 0.5B, goldprob labels): on each question a reasoning step
    earns more reward than nonsense and a bare answer (margins measured 0.056-0.099) where the untrained
    backbone ranks nonsense first on every one; and it learned to search (p(search) 0.55-0.66 against the
    backbone's 0.13-0.28): its held-out search accuracy is always-search's, docs/training.md."""
    tuned, base = qwen_readouts("pra-qwen05-goldprob", "qwen2.5-coder-0.5b-instruct")
    for reasoning, nonsense, bare in zip(tuned[0::3], tuned[1::3], tuned[2::3]):
        assert reasoning.reward > nonsense.reward + 0.03 and reasoning.reward > bare.reward + 0.03
    assert not any(reasoning.reward > nonsense.reward + 0.03 for reasoning, nonsense in zip(base[0::3], base[1::3]))
    assert all(t.action > b.action + 0.2 for t, b in zip(tuned, base))


def test_the_qwen15_agent_ranks_a_bare_answer_below_reasoning_where_its_backbone_ranks_it_first():
    """`pra-qwen15-goldprob` (LoRA on the Qwen 1.5B, the same labels): what it learned over its backbone
    is the labels' answering rule and to search. On each question it rates a reasoning step above a bare
    answer (margins measured 0.019-0.041) where the untrained 1.5B rates the bare answer first (by
    0.10-0.16), and its p(search) is 0.65-0.73 against the backbone's 0.15-0.23. Nonsense it ranks only
    just below reasoning (0.014-0.024), where the backbone already ranks it last (docs/training.md)."""
    tuned, base = qwen_readouts("pra-qwen15-goldprob", "qwen2.5-coder-1.5b-instruct")
    for reasoning, nonsense, bare in zip(tuned[0::3], tuned[1::3], tuned[2::3]):
        assert reasoning.reward > bare.reward + 0.01 and reasoning.reward > nonsense.reward
    assert all(bare.reward > reasoning.reward + 0.05 for reasoning, bare in zip(base[0::3], base[2::3]))
    assert all(t.action > b.action + 0.3 for t, b in zip(tuned, base))


def test_the_qwen05_1k_agent_asks_to_search_by_the_step_where_its_backbone_asks_the_other_way():
    """`pra-qwen05-goldprob-1k` (the 0.5B on all 1,000 labelled questions, a quarter epoch): its reward is at
    chance on held-out steps, what it learned is when to search. It wants documents for a reasoning step
    (p(search) measured 0.41-0.54) and not once an answer is given (0.09-0.13: documents cannot move it),
    where the untrained backbone asks more for the bare answer (0.24-0.28) than for reasoning (0.13-0.18)."""
    tuned, base = qwen_readouts("pra-qwen05-goldprob-1k", "qwen2.5-coder-0.5b-instruct")
    assert all(reasoning.action > bare.action + 0.2 for reasoning, bare in zip(tuned[0::3], tuned[2::3]))
    assert all(bare.action > reasoning.action + 0.03 for reasoning, bare in zip(base[0::3], base[2::3]))
