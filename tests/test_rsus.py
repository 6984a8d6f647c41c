"""The RSUS controller: its three signals on known inputs, then wired into PRA beam search on SmolLM2."""
import json
import math

import pytest

from eval.run import EvalConfig, run_eval
from pra.reward_agent import RewardAgent
from search.controllers import make_controller
from search.engine import SearchConfig
from search.rsus import RSUS, disagreement, expected_confidence, normalised_entropy
from tests.test_pra_embedded import bm25  # noqa: F401  (fixture)


def test_expected_confidence_reads_the_digit_distribution():
    assert expected_confidence({"9": 0.0, "0": -50.0}) == pytest.approx(1.0)
    assert expected_confidence({str(d): 0.0 for d in range(10)}) == pytest.approx(0.5)
    assert expected_confidence({"3": math.log(0.5), "6": math.log(0.5)}) == pytest.approx(0.5)


def test_entropy_is_one_for_flat_scores_and_zero_for_one_clear_hit():
    assert normalised_entropy([2.0, 2.0, 2.0]) == pytest.approx(1.0)
    assert normalised_entropy([5.0, 0.0, 0.0]) == 0.0
    assert normalised_entropy([]) == 1.0                     # nothing found: the corpus cannot settle it
    assert 0.0 < normalised_entropy([9.0, 1.0]) < normalised_entropy([5.0, 4.0]) < 1.0


def test_disagreement_of_continuations():
    same = ["Vitamin C deficiency causes scurvy."] * 3
    assert disagreement(same) == 0.0
    assert disagreement(["Vitamin C deficiency causes scurvy.", "Iron deficiency causes anemia.",
                         "Insulin lowers glucose."]) > 0.8


def test_spec_needs_policy_and_bm25_and_parses_threshold(smollm2, bm25):
    with pytest.raises(ValueError, match="BM25"):
        make_controller("rsus", policy=smollm2)
    assert make_controller("rsus:0.3", policy=smollm2, bm25=bm25).config.threshold == 0.3
    with pytest.raises(ValueError, match="number"):
        make_controller("rsus:high", policy=smollm2, bm25=bm25)


def test_rsus_decides_searches_inside_pra_beam_search(smollm2, bm25, tmp_path):
    """Threshold 0 searches for every readable candidate, 1 for none: the score sits strictly between."""
    searched = []
    for theta in (0.0, 1.0):
        cfg = EvalConfig(method="pra", limit=1, out=str(tmp_path / str(theta)), search_controller=f"rsus:{theta}",
                         search=SearchConfig(beam_width=1, branching=2, max_steps=1, step_tokens=12, temperature=0.7))
        controller = make_controller(cfg.search_controller, policy=smollm2, bm25=bm25)
        assert isinstance(controller, RSUS)
        run_eval(cfg, policy=smollm2, reward_agent=RewardAgent(smollm2), retriever=bm25, controller=controller)
        (record,) = [json.loads(line) for line in open(tmp_path / str(theta) / "records.jsonl")]
        searched.append(record["stats"].get("searches", 0))
    assert searched[0] >= 1 and searched[1] == 0
