"""VLLMBackend without vLLM: its pure parts, and its calls against a stand-in engine that answers in
vLLM's output shapes from the transformers model (so slot and choice readouts can be checked against
TransformersBackend on the same tokens)."""
from __future__ import annotations

import math
import sys
from types import SimpleNamespace

import pytest
import torch

from pra.backends import load_policy
from pra.backends.base import BackendNotInstalled, MissingLogprobs, SamplingParams, pick_logprobs, renormalise
from pra.backends.vllm_backend import VLLMBackend, completions, first_top_logprobs, sampling_kwargs
from pra.types import Message, Question

SCRIPTED = "Step 2: the heart.\nStep 3: done"


class TorchEngine:
    """Stands in for ``vllm.LLM``: 1-token requests with ``logprobs`` are answered from the transformers
    model's next-token distribution (top-k), longer ones with ``SCRIPTED``."""

    def __init__(self, hf):
        self.hf, self.calls = hf, []

    def get_tokenizer(self):
        return self.hf.tokenizer

    @torch.inference_mode()
    def generate(self, prompts, sampling_params, use_tqdm=True, lora_request=None):
        many = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        self.calls.append((prompts, many))
        outs = []
        for p, sp in zip(prompts, many):
            ids = p["prompt_token_ids"]
            if getattr(sp, "logprobs", None):
                lp = self.hf.model(torch.tensor([ids])).logits[0, -1].float().log_softmax(-1)
                vals, idx = lp.topk(min(sp.logprobs, lp.numel()))
                top = {int(i): SimpleNamespace(logprob=float(v)) for v, i in zip(vals, idx)}
                seqs = [SimpleNamespace(text="", token_ids=[int(idx[0])], finish_reason="length", logprobs=[top])]
            else:
                seqs = [SimpleNamespace(text=SCRIPTED, token_ids=[1] * 9, finish_reason="length", logprobs=None)
                        for _ in range(sp.n)]
            outs.append(SimpleNamespace(prompt_token_ids=ids, num_cached_tokens=0, outputs=seqs))
        return outs


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """On busy shared cores a second torch thread, spinning at barriers, makes passes ~20x slower."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def question():
    return Question("q1", "Which organ pumps blood?", {"A": "liver", "B": "heart", "C": "lung", "D": "skin"},
                    "B", "test")


def bind(hf, top_logprobs=20) -> VLLMBackend:
    b = VLLMBackend.__new__(VLLMBackend)
    b._bind("smollm2-stand-in", TorchEngine(hf), SimpleNamespace, top_logprobs=top_logprobs)
    return b


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
    assert first_top_logprobs(out) == {11: -0.1, 12: -2.5}


def test_a_letter_missing_from_the_top_k_is_refused_not_ranked_last():
    assert pick_logprobs({"A": -0.5, "B": -3.0}, ["B", "A"]) == [-3.0, -0.5]
    with pytest.raises(MissingLogprobs, match="lack 'C', 'D'"):   # C and D used to tie, and max() said C
        pick_logprobs({"A": -0.5, "B": -3.0}, ["C", "D"])
    lp = renormalise({"A": -1.0, "B": -3.0})
    assert math.isclose(math.exp(lp["A"]) + math.exp(lp["B"]), 1.0) and math.isclose(lp["A"] - lp["B"], 2.0)


def test_missing_vllm_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)     # makes ``import vllm`` fail as if not installed
    with pytest.raises(BackendNotInstalled, match=r"pip install 'pra\[gpu\]'"):
        load_policy("smollm2-135m-instruct", backend="vllm")


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown policy backend 'tgi'.*transformers, vllm, openai"):
        load_policy("smollm2-135m-instruct", backend="tgi")


def test_generate_copies_greedy_and_seeds_each_prompt(smollm2):
    b = bind(smollm2)
    prompt = b.render([Message("user", "Which organ pumps blood?")], "Step 1: think.\n")
    assert prompt == smollm2.render([Message("user", "Which organ pumps blood?")], "Step 1: think.\n")
    (greedy,) = b.generate([prompt], SamplingParams(n=3, stop=("\nStep",)))
    assert [c.text for c in greedy] == ["Step 2: the heart."] * 3
    assert b.llm.calls[-1][1][0].n == 1
    assert b.llm.calls[-1][0][0]["prompt_token_ids"] == smollm2.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    sampled = b.generate([prompt, prompt], SamplingParams(n=2, temperature=0.8, seed=5))
    assert [len(s) for s in sampled] == [2, 2]
    assert [sp.seed for sp in b.llm.calls[-1][1]] == [5, 6]     # 5 + running count: equal prompts differ


def test_choice_and_slot_logprobs_match_transformers(smollm2, question):
    b = bind(smollm2, top_logprobs=10 ** 6)     # the whole vocabulary: nothing falls back
    mcq = b.render([Message("user", "Which organ pumps blood? A) liver B) heart C) lung D) skin")], "The answer is (")
    (lp,), (ref,) = b.choice_logprobs([mcq], [question.letters]), smollm2.choice_logprobs([mcq], [question.letters])
    assert all(math.isclose(lp[k], ref[k], abs_tol=1e-3) for k in ref)
    head = "<|im_start|>user\nIs the last step right? Reply r,s.\n"      # short: CPU forward passes
    prompts = [(head, f"Step 1: {step}<|im_end|>\n<|im_start|>assistant\n") for step in ("2+2=4.", "2+2=5.")]
    for got, want in zip(b.slot_logprobs(prompts), smollm2.slot_logprobs(prompts)):
        for slot in ("slot1", "slot2"):
            assert all(math.isclose(getattr(got, slot)[d], getattr(want, slot)[d], abs_tol=1e-3) for d in "01")
    second = b.llm.calls[-1][0]        # slot 2 reads after the chosen digit and the separator
    comma = smollm2.tokenizer.encode(",", add_special_tokens=False)[0]
    assert all(p["prompt_token_ids"][-1] == comma for p in second)
