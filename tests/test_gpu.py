"""The CUDA paths, on tiny random models (SmolLM2's tokenizer, ``tests.fakes.tiny_llama``): model loading
picks the GPU and bfloat16, the transformers backend generates and reads letters and ``r,s`` slots there
as float32 on the CPU does, PRA beam search runs end to end through ``pra eval``'s run function, ``pra
train`` takes optimizer steps in bfloat16 and writes its agent, the dense encoder embeds, and PULSE reads
hidden states.

Without a CUDA device every test skips (``PRA_REQUIRE=cuda`` turns that into a failure, for a run on a
GPU machine; ``PRA_TOKENIZER_DIR`` points at the tokenizer's files where the embedded SmolLM2 is not installed).
``PRA_GPU_TEST_DEVICE=cpu`` runs the same checks with the device ``cpu``, to check the tests themselves on
a machine without a GPU. References are always float32 on the CPU. Tolerances: float32 against float32
differs only in summation order (1e-4); bfloat16 keeps 8 bits of mantissa, so its bounds are a few times
what bfloat16 on a CPU with bf16 matmul gave, each noted beside it, and well below the spread of what is
compared (the models are drawn with ``initializer_range=0.2``, so that logits and readouts spread over
units rather than hundredths, and a wrong position, mask or cache shows).
"""
import json
import math
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from pra.backends.base import SamplingParams
from pra.backends.transformers_backend import TransformersBackend
from pra.benchmarks import load_eval_benchmark
from pra.models import default_dtype, load_causal_lm
from pra.prompts import DIRECT_PREFIX, policy_messages
from pra.reward_agent import PROMPT_RECORD, RewardAgent, ScoreRequest, load_reward_agent
from tests.fakes import FixedRetriever, tiny_llama_folder, tiny_lora_folder, tiny_tokenizer

DEVICE = os.environ.get("PRA_GPU_TEST_DEVICE") or "cuda"
KIND = torch.device(DEVICE).type
# What the code under test is told: nothing on a GPU run (it must pick cuda itself), the override otherwise.
AUTO = None if DEVICE == "cuda" else DEVICE
pytestmark = pytest.mark.requires(
    "cuda", KIND != "cuda" or torch.cuda.is_available(),
    f"no CUDA device (torch {torch.__version__}, built for CUDA {torch.version.cuda}); "
    "PRA_GPU_TEST_DEVICE=cpu runs these checks on the CPU")

FP32_ATOL = 1e-4          # float32 here and there: the same sums in another order
BF16_RMS, BF16_MAX = 0.06, 0.35   # bfloat16 logits: rms and max |difference| in float32 logits' stds
BF16_NATS = 0.1           # bfloat16 letter log-probabilities, nats (measured 0.029; letters 1.6-3.2 nats apart)
BF16_PROB = 0.05          # bfloat16 reward readouts, probabilities (measured 0.009)
PROMPT = ("Scurvy is caused by a deficiency of vitamin C, which the body needs to make collagen; its signs "
          "are bleeding gums, poor wound healing and bruising.")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Folders: ``base`` (a random 2-layer Llama), ``agent`` (a random non-zero LoRA adapter on it, with
    the prompt record ``pra train`` writes), ``encoder`` (a random 2-layer BERT with the same tokenizer)."""
    from transformers import BertConfig, BertModel

    root = tmp_path_factory.mktemp("gpu")
    base = tiny_llama_folder(root / "base", layers=2, initializer_range=0.2, max_position_embeddings=2048)
    tiny_lora_folder(root / "agent", base)
    (root / "agent" / PROMPT_RECORD).write_text('{"earlier_rewards": false}\n')
    tok = tiny_tokenizer()
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=64, max_position_embeddings=512, pad_token_id=tok.pad_token_id,
                         initializer_range=0.2)).save_pretrained(root / "encoder")
    tok.save_pretrained(root / "encoder")
    return SimpleNamespace(base=str(root / "base"), agent=str(root / "agent"), encoder=str(root / "encoder"))


@pytest.fixture(scope="module")
def cpu32(tiny):
    """The reference: the base model, float32 on the CPU."""
    return TransformersBackend(tiny.base, batch_size=8, dtype="float32", device="cpu")


@pytest.fixture(scope="module")
def questions():
    return load_eval_benchmark("medmcqa-eval", limit=3).questions


def close_logits(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    """[positions, vocab] logits of one prompt against float32's on the CPU. float32: within FP32_ATOL, the
    same next token everywhere. bfloat16 (measured on a CPU with bf16 matmul: rms 0.017, max 0.14 of the
    logits' std, argmax the same at 29 of 32 positions; logits one position off differ by rms 0.8): rms
    and max within BF16_RMS and BF16_MAX of the std, the same next token at three positions in four."""
    diff, scale = (got.float() - want), want.std().item()
    rms, worst = diff.pow(2).mean().sqrt().item(), diff.abs().max().item()
    same = (got.argmax(-1) == want.argmax(-1)).float().mean().item()
    if dtype == torch.float32:
        assert worst <= FP32_ATOL and same == 1.0, (worst, same)
    else:
        assert rms <= BF16_RMS * scale and worst <= BF16_MAX * scale and same >= 0.75, \
            f"{dtype} logits against float32 on the CPU: rms {rms:.4g}, max {worst:.4g}, std {scale:.4g}, argmax {same:.0%}"


# -- 1. loading ----------------------------------------------------------------------------------------

def test_load_causal_lm_picks_the_gpu_and_bfloat16_and_agrees_with_float32_on_the_cpu(tiny):
    lm, tok = load_causal_lm(tiny.base, device=AUTO)
    assert lm.device.type == KIND and lm.dtype == getattr(torch, default_dtype(DEVICE))
    if KIND == "cuda":
        assert lm.dtype == torch.bfloat16 and default_dtype(str(lm.device)) == "bfloat16"
    ref, _ = load_causal_lm(tiny.base, dtype="float32", device="cpu")
    ids = tok(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        got, want = lm(ids.to(lm.device)).logits[0].float().cpu(), ref(ids).logits[0]
    assert want.std() > 0.5                         # a spread that a wrong position or mask would show
    close_logits(got, want, lm.dtype)
    lm32, _ = load_causal_lm(tiny.base, dtype="float32", device=DEVICE)
    with torch.no_grad():
        close_logits(lm32(ids.to(lm32.device)).logits[0].cpu(), want, torch.float32)


# -- 2. the transformers backend -------------------------------------------------------------------------

def texts(out) -> list[list[str]]:
    return [[c.text for c in cs] for cs in out]


def test_backend_generates_on_the_gpu_as_on_the_cpu(tiny, cpu32, questions):
    dev = TransformersBackend(tiny.base, batch_size=8, device=AUTO)            # its default dtype
    dev32 = TransformersBackend(tiny.base, batch_size=8, dtype="float32", device=DEVICE)
    assert dev.device.type == dev32.device.type == KIND and dev.model.dtype == getattr(torch, default_dtype(DEVICE))
    prompts = [dev.render(policy_messages(q, dev.has_chat_template)) for q in questions]
    greedy = SamplingParams(max_tokens=12)
    # float32 on both: the same tokens, through the decode loop's cache, masks and dropped rows
    assert texts(dev32.generate(prompts, greedy)) == texts(cpu32.generate(prompts, greedy))
    sampled = SamplingParams(n=3, temperature=0.8, max_tokens=12, seed=1)
    first = dev.generate(prompts, sampled)
    dev.clear_prefix_cache()                     # the same computation again: the seeded draws repeat
    assert texts(dev.generate(prompts, sampled)) == texts(first)
    assert [len(cs) for cs in first] == [3] * len(prompts)
    assert all(isinstance(c.text, str) and 1 <= c.tokens <= 12 for cs in first for c in cs)
    assert any(c.text.strip() for cs in first for c in cs) and dev.stats.generated_tokens > 0


def test_letter_and_reward_readouts_agree_with_float32_on_the_cpu(tiny, cpu32, questions):
    dev = TransformersBackend(tiny.base, batch_size=8, device=AUTO)
    dev32 = TransformersBackend(tiny.base, batch_size=8, dtype="float32", device=DEVICE)
    prompts = [cpu32.render(policy_messages(q, True, direct=True), DIRECT_PREFIX) for q in questions]
    letters = [q.letters for q in questions]
    want = cpu32.choice_logprobs(prompts, letters)
    spread = max(max(lp.values()) - min(lp.values()) for lp in want)
    assert spread > 0.5                          # letters far apart enough for the bound below to mean something
    for backend, bound in ((dev32, FP32_ATOL), (dev, FP32_ATOL if dev.model.dtype == torch.float32 else BF16_NATS)):
        got = backend.choice_logprobs(prompts, letters)
        worst = max(abs(g[k] - w[k]) for g, w in zip(got, want) for k in w)
        assert worst <= bound, f"{backend.model.dtype} letters differ by {worst:.4g} nats (bound {bound})"

    # The reward agent (LoRA merged) as `pra eval` loads it: float32, on the GPU when there is one.
    q = questions[0]
    requests = [ScoreRequest(q, (), (), "Vitamin C deficiency impairs collagen synthesis."),
                ScoreRequest(q, (), (), "The answer is (A)."),
                ScoreRequest(q, ("Collagen needs vitamin C.",), (0.7,), "So the answer is (B).",
                             (("Scurvy", "Scurvy is a disease resulting from a lack of vitamin C."),))]
    agent = load_reward_agent(tiny.agent)
    assert agent.backend.device.type == KIND and agent.backend.model.dtype == torch.float32
    assert agent.earlier_rewards is False
    ref = RewardAgent(TransformersBackend(tiny.base, dtype="float32", device="cpu", adapter=tiny.agent),
                      earlier_rewards=False)
    want = ref.score(requests)
    assert max(r.reward for r in want) - min(r.reward for r in want) > 0.01      # the steps are told apart
    got = agent.score(requests)
    for g, w in zip(got, want):
        assert abs(g.reward - w.reward) <= FP32_ATOL and abs(g.action - w.action) <= FP32_ATOL, (g, w)
    half = load_reward_agent(tiny.agent, dtype="bfloat16")
    assert half.backend.model.dtype == torch.bfloat16
    for g, w in zip(half.score(requests), want):
        assert abs(g.reward - w.reward) <= BF16_PROB, (g, w)
        assert 0.0 < g.action < 1.0


def test_pra_beam_search_end_to_end_on_the_gpu(tiny, tmp_path):
    """`pra eval --method pra` on one medmcqa-eval question: the policy and the agent loaded from the config
    as the command loads them. Retrieval is not a GPU path (FAISS searches on the CPU; the encoder is
    checked below), so the passages come from a fixed retriever."""
    from eval.run import EvalConfig, Parts, run_with_parts
    from search.engine import SearchConfig

    cfg = EvalConfig(method="pra", policy=tiny.base, reward_agent=tiny.agent, search_controller="always",
                     limit=1, out=str(tmp_path / "run"), device=AUTO, batch_size=8,
                     search=SearchConfig(beam_width=2, branching=2, max_steps=2, step_tokens=8, temperature=0.7,
                                         docs_per_search=1))
    parts = Parts(retriever=FixedRetriever())
    summary = run_with_parts(cfg, parts)
    assert parts.policy.device.type == KIND and parts.policy.model.dtype == getattr(torch, default_dtype(DEVICE))
    assert parts.reward_agent.backend.device.type == KIND
    (record,) = [json.loads(line) for line in open(tmp_path / "run" / "records.jsonl")]
    assert record["prediction"] in "ABCD" and len(record["answers"]) == 2
    assert 1 <= len(record["steps"]) <= 2 and record["stats"]["candidates"] >= 4
    assert all(s["searched"] and s["doc_ids"] == ["doc1"] for s in record["steps"])
    assert all(0.0 <= s["reward"] <= 1.0 and 0.0 <= s["action"] <= 1.0 for s in record["steps"])
    assert summary["n"] == 1 and summary["searches_per_question"] == record["stats"]["searches"] > 0
    assert record["tokens"] > 0 and record["stats"]["reward_tokens"] > 0


# -- 3. training -----------------------------------------------------------------------------------------

def test_training_takes_bfloat16_steps_on_the_gpu_and_writes_the_agent(tiny, tmp_path, monkeypatch):
    from tests.test_training import write_labels
    from training.config import TrainConfig
    from training.train import SlotLossTrainer, train

    labels = write_labels(tmp_path / "labels.jsonl")
    cfg = TrainConfig(labels=str(labels), out=str(tmp_path / "agent"), base=tiny.base, search_label="margin",
                      lr=2e-3, warmup_steps=0, batch_size=3, grad_accum=1, max_steps=3, save_every=2,
                      val_fraction=0.25, max_tokens=512, bf16=True, device=AUTO)
    # A spy, not a stand-in: each loss computation calls through, noting where its inputs sit and what
    # dtype a plain linear layer of the model (down_proj, not adapted) computes in under the Trainer.
    seen, compute = [], SlotLossTrainer.compute_loss

    def noting(self, model, inputs, *args, **kwargs):
        layer = next(m for name, m in model.named_modules() if name.endswith("layers.0.mlp.down_proj"))
        hook = layer.register_forward_hook(lambda m, i, out: seen.append(
            (inputs["input_ids"].device.type, next(model.parameters()).device.type, out.dtype)))
        try:
            return compute(self, model, inputs, *args, **kwargs)
        finally:
            hook.remove()

    monkeypatch.setattr(SlotLossTrainer, "compute_loss", noting)
    metrics = train(cfg)
    assert len(seen) == 3 and set(seen) == {(KIND, KIND, torch.bfloat16)}, seen
    assert len(metrics["train_loss"]) == 3 and all(math.isfinite(x) for x in metrics["train_loss"])
    out = Path(cfg.out)
    for name in ("adapter_config.json", "adapter_model.safetensors", PROMPT_RECORD, "metrics.json"):
        assert (out / name).is_file(), name
    assert (out / "checkpoints" / "checkpoint-2" / "trainer_state.json").is_file()
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == tiny.base
    trained = load_reward_agent(cfg.out)
    assert trained.backend.device.type == KIND
    (r,) = trained.score([ScoreRequest(load_eval_benchmark("medmcqa-eval", limit=1).questions[0], (), (),
                                       "A first step.")])
    assert 0.0 < r.reward < 1.0 and 0.0 < r.action < 1.0


# -- 4. the dense encoder --------------------------------------------------------------------------------

def test_dense_encoder_embeds_on_the_gpu_as_on_the_cpu(tiny):
    from corpora.encoders import Encoder
    from corpora.types import Passage

    passages = [Passage(f"p{i}", t, x, "test") for i, (t, x) in enumerate([
        ("Scurvy", "Scurvy is a disease resulting from a lack of vitamin C (ascorbic acid)."),
        ("Rickets", "Rickets is the softening of bones in children due to a lack of vitamin D."),
        ("Beriberi", "Beriberi is caused by thiamine (vitamin B1) deficiency; it affects the heart and nerves."),
        ("", "Pellagra follows a lack of niacin."),
    ])]
    queries = ["Which vitamin deficiency causes scurvy?", "bone softening in children"]
    dev, ref = Encoder(tiny.encoder, device=AUTO), Encoder(tiny.encoder, device="cpu")
    assert torch.device(dev.device).type == KIND
    want_q, want_p = ref.encode_queries(queries), ref.encode_passages(passages)
    got_q, got_p = dev.encode_queries(queries), dev.encode_passages(passages)
    assert dev._query.model.device.type == KIND
    assert got_q.dtype == got_p.dtype == np.float32 and got_p.shape == (4, 32)
    assert np.allclose(got_q, want_q, atol=FP32_ATOL) and np.allclose(got_p, want_p, atol=FP32_ATOL)
    assert np.allclose(np.linalg.norm(got_p, axis=1), 1.0, atol=1e-5)
    half = dev.encode_passages(passages, dtype="bfloat16")        # bfloat16 autocast, output float32
    assert half.dtype == np.float32 and (half * want_p).sum(1).min() > 0.999     # cosines; between passages ~0.86


# -- 5. PULSE hidden states ------------------------------------------------------------------------------

def test_pulse_reads_hidden_states_on_the_gpu_as_on_the_cpu(tiny, cpu32):
    from pra.pulse.extract import StepReader, step_text

    head = "Question: which vitamin deficiency causes scurvy, and what are its signs?\n"
    items = [step_text(head, ["Collagen needs vitamin C.", x]) for x in ("So (C).", "It is iron, so (A).")]
    items.append(step_text("Question: another head.\n", ["One step only."]))
    # batches of two: the first two items share their head, which runs once (the cache path)
    want = StepReader.from_backend(cpu32, batch_size=2).read(items, token_stats=True)
    for dtype in ("float32", None):              # None: the device's default (bfloat16 on a GPU)
        backend = TransformersBackend(tiny.base, dtype=dtype, device=DEVICE)
        assert backend.device.type == KIND
        got = StepReader.from_backend(backend, batch_size=2).read(items, token_stats=True)
        exact = backend.model.dtype == torch.float32
        for g_item, w_item in zip(got, want):
            assert len(g_item) == len(w_item)
            for g, w in zip(g_item, w_item):
                assert g.tokens == w.tokens
                for pool in ("last", "mean"):
                    gt, wt = g.trajectories[pool], w.trajectories[pool]
                    assert np.isfinite(gt.angle).all() and np.isfinite(gt.norm).all()
                    if exact:
                        assert np.allclose(gt.angle, wt.angle, atol=FP32_ATOL)
                        assert np.allclose(gt.norm, wt.norm, rtol=FP32_ATOL)
                    else:
                        # bfloat16 measured: angles within 0.009 rad (of 0.6-1.9), norms within 0.5%
                        assert np.allclose(gt.angle, wt.angle, atol=0.05)
                        assert np.allclose(gt.norm, wt.norm, rtol=0.05)
                assert abs(g.nll - w.nll) <= (FP32_ATOL if exact else 0.05)      # bfloat16 measured: 0.011
