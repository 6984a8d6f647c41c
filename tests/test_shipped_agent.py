"""The reward agent that ships in pra/agents: it resolves by name, is the default, loads and scores."""
import json

from eval.run import EvalConfig
from pra.models import AGENTS_DIR, resolve_reward_agent
from pra.reward_agent import RewardAgent, ScoreRequest, load_reward_agent
from pra.benchmarks import load_eval_benchmark

SHIPPED = EvalConfig().reward_agent


def test_the_default_reward_agent_is_the_shipped_adapter():
    base, adapter = resolve_reward_agent(SHIPPED)
    assert base == "smollm2-135m-instruct" and adapter == str(AGENTS_DIR / SHIPPED)
    card = (AGENTS_DIR / SHIPPED / "README.md").read_text()
    final = json.loads((AGENTS_DIR / SHIPPED / "metrics.json").read_text())["final"]
    assert f"{final['reward_auroc']:.3f}" in card


def test_shipped_agent_scores_and_learned_to_ask_for_evidence(smollm2):
    """Trained with always-search labels, its action readout must sit high where the backbone's is low."""
    q = load_eval_benchmark("medmcqa-eval", limit=1).questions[0]
    requests = [ScoreRequest(q, (), (), step) for step in
                ("The question asks which structure is involved; recall its anatomy.",
                 "Option A is the answer because the sky is blue.")]
    tuned = load_reward_agent(SHIPPED).score(requests)
    base = RewardAgent(smollm2).score(requests)
    assert all(0.0 < r.reward < 1.0 for r in tuned)
    assert all(t.action > 0.5 for t in tuned) and all(b.action < 0.5 for b in base)
