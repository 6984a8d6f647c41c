"""The reward agent's prompt, readouts and controllers; readouts checked on the embedded SmolLM2."""
import math

import pytest
import torch

from pra.backends.base import SlotLogprobs
from pra.reward_agent import RewardAgent, ScoreRequest, prompt_parts, render_prompt, two_way
from search.controllers import Always, Never, Sample, Threshold, make_controller
from tests.test_engine import q

REQS = [
    ScoreRequest(q(0), ("Scurvy impairs collagen.",), (0.8,), "Vitamin C is needed.", ()),
    ScoreRequest(q(0), ("Scurvy impairs collagen.",), (0.8,), "Iron is the cause, so the answer is (A).", ()),
    ScoreRequest(q(1), (), (), "The facial nerve exits there.", (("Facial nerve", "It leaves the skull."),)),
]


def test_two_way_is_the_softmax_over_two_logits():
    assert two_way({"0": 0.0, "1": 0.0}) == 0.5
    assert abs(two_way({"0": -1.0, "1": 2.0}) - math.exp(2) / (math.exp(2) + math.exp(-1))) < 1e-12


def test_prompt_shares_the_beam_head_and_shows_documents_only_after_a_search():
    h0, t0 = prompt_parts(REQS[0])
    h1, t1 = prompt_parts(REQS[1])
    assert h0 == h1 and t0 != t1                       # candidates of one beam share the head
    assert "Step 1: Scurvy impairs collagen. (reward 0.80)" in h0 and "Documents" not in t0
    h2, t2 = prompt_parts(REQS[2])
    assert t2.startswith("Documents:\n[1] (Facial nerve) It leaves the skull.") and "(none)" in h2
    assert h0.endswith("\n") and not t0[0].isspace()


def test_controllers():
    assert Always().decide([None, None]) == [True, True]
    assert Never().decide([0.9]) == [False]
    assert Threshold(0.5).decide([0.49, 0.5, 0.9]) == [False, True, True]
    draws = [Sample(seed=3).decide([0.5] * 20) for _ in range(2)]
    assert draws[0] == draws[1] and 0 < sum(draws[0]) < 20
    assert isinstance(make_controller("threshold:0.3"), Threshold) and make_controller("threshold:0.3").theta == 0.3
    with pytest.raises(ValueError, match="unknown search controller"):
        make_controller("sometimes")


def test_multi_token_digits_fail_clearly(smollm2):
    with pytest.raises(ValueError, match="not a single token"):
        smollm2.token_ids(["10"])


def test_readouts_equal_a_hand_computed_softmax(smollm2):
    agent = RewardAgent(smollm2)
    readouts = agent.score(REQS)
    tok, model = smollm2.tokenizer, smollm2.model
    zero, one, comma = smollm2.token_ids(["0", "1", ","])
    for req, r in zip(REQS, readouts):
        prefix, suffix = render_prompt(smollm2, req)
        ids = tok(prefix, add_special_tokens=False)["input_ids"] + tok(suffix, add_special_tokens=False)["input_ids"]
        assert ids == tok(prefix + suffix, add_special_tokens=False)["input_ids"]   # the cut splits no token
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1]
            reward = torch.softmax(logits[[zero, one]], -1)[1].item()
            first = one if logits[one] > logits[zero] else zero
            logits2 = model(torch.tensor([ids + [first, comma]])).logits[0, -1]
            action = torch.softmax(logits2[[zero, one]], -1)[1].item()
        assert abs(r.reward - reward) < 1e-4 and abs(r.action - action) < 1e-4


def test_prefix_reuse_equals_naive_scoring(smollm2):
    agent = RewardAgent(smollm2)
    shared = agent.score(REQS)
    smollm2.share_prefix = False
    try:
        naive = agent.score(REQS)
    finally:
        smollm2.share_prefix = True
    for a, b in zip(shared, naive):
        assert abs(a.reward - b.reward) < 1e-4 and abs(a.action - b.action) < 1e-4


def test_identical_candidates_are_scored_once():
    from tests.fakes import ScriptedPolicy

    class Counting(ScriptedPolicy):
        def slot_logprobs(self, prompts, digits=("0", "1"), sep=","):
            self.scored = prompts
            return [SlotLogprobs({"0": 0.0, "1": float(i)}, {"0": 0.0, "1": 0.0}) for i, _ in enumerate(prompts)]

    backend = Counting(lambda *a: "")
    readouts = RewardAgent(backend).score([REQS[0], REQS[1], REQS[0]])
    assert len(backend.scored) == 2 and readouts[0] == readouts[2] != readouts[1]
