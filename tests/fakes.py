"""Scripted stand-ins for the plumbing tests of the engine (real-model tests live beside them), and tiny
random Llama models with SmolLM2's tokenizer: real forward passes of a real architecture in milliseconds."""
from __future__ import annotations

import os
import re
from pathlib import Path
from types import SimpleNamespace

from pra.reward_agent import Readout
from pra.backends.base import BackendStats, Completion, LMBackend, SamplingParams


class ScriptedPolicy(LMBackend):
    """``script(question_text, step_number, sample_index) -> step text``; records every call."""

    def __init__(self, script, force: str = "A"):
        self.name, self.script, self.force = "scripted", script, force
        self.stats = BackendStats()
        self.calls: list[list[str]] = []

    @property
    def has_chat_template(self) -> bool:
        return False

    def render(self, messages, assistant_prefix=""):
        return messages[-1].content + "\n" + assistant_prefix

    def generate(self, prompts, params: SamplingParams, seeds=None):
        self.calls.append(prompts)
        out = []
        for p in prompts:
            question = re.findall(r"Question: (.*)", p)[-1]
            step = int(re.findall(r"Step (\d+):", p)[-1])
            out.append([Completion(self.script(question, step, i), 3, True) for i in range(params.n)])
        return out

    def choice_logprobs(self, prompts, choices):
        return [{c: (0.0 if c == self.force else -5.0) for c in cs} for cs in choices]

    def slot_logprobs(self, prompts, digits=("0", "1"), sep=","):
        raise AssertionError("the engine never asks the policy for reward readouts")


class TableRewardAgent:
    """Reward = a number looked up from the candidate step's text; action fixed."""

    def __init__(self, rewards: dict[str, float], action: float = 0.0):
        self.rewards, self.action, self.requests = rewards, action, []

    def score(self, requests):
        self.requests.append(requests)
        return [Readout(self.rewards.get(r.step, 0.5), self.action) for r in requests]


class FixedRetriever:
    """Returns one passage, ``doc1``, for every query; remembers the queries."""

    def __init__(self):
        self.queries = []

    def retrieve(self, queries, k):
        self.queries += queries
        passage = SimpleNamespace(id="doc1", title="T", text="evidence")
        return [[SimpleNamespace(passage=passage, score=1.0, rank=1)] for _ in queries]


def tiny_tokenizer():
    """SmolLM2-135M-Instruct's tokenizer and chat template: from the folder ``$PRA_TOKENIZER_DIR`` names
    when it is set (a copy of the tokenizer's files, for a machine without the embedded model, such as a
    GPU machine with no network), else from the embedded model."""
    from transformers import AutoTokenizer

    folder = os.environ.get("PRA_TOKENIZER_DIR")
    if not folder:
        from pra.models import resolve
        folder = resolve("smollm2-135m-instruct")
    return AutoTokenizer.from_pretrained(folder)


def tiny_llama(layers: int, seed: int = 0, **config):
    """(a random Llama with ``layers`` layers, 32 wide, weights drawn after ``torch.manual_seed(seed)``;
    SmolLM2's tokenizer). ``config``: further ``LlamaConfig`` fields."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = tiny_tokenizer()
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, pad_token_id=tok.pad_token_id, **config)
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg), tok


def tiny_llama_folder(folder: Path, layers: int, seed: int = 0, **config) -> Path:
    """``tiny_llama`` saved as a model folder (weights, config, tokenizer) that any model flag takes."""
    model, tok = tiny_llama(layers, seed, **config)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def tiny_lora_folder(folder: Path, base: Path) -> Path:
    """A random, non-zero LoRA adapter (r=4 on q_proj, v_proj) on the model folder ``base``, saved as
    ``pra train`` saves an agent: its config names ``base`` as the backbone."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    model = get_peft_model(LlamaForCausalLM.from_pretrained(base),
                           LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    model.peft_config["default"].base_model_name_or_path = str(base)
    model.save_pretrained(folder)
    return folder
