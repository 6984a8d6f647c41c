"""The settings of ``pra label`` and ``pra train``, filled from a YAML recipe (``label:`` and ``train:``
blocks of one file, so that the training block can point at the labelling block's output), then from
command-line flags. Each field's help is its flag's (``pra.options``: the flags of `pra label`,
`pra train` and `pra probe label` are generated from these fields)."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from pra.config_files import check_types, range_problems, read_recipe
from pra.errors import UserError
from pra.options import option

RECIPES = Path(__file__).parent / "recipes"
TEACHERS = ("judge", "rollout", "goldprob")
GOLDPROB_DTYPES = ("float32", "bfloat16", "float16")     # what the transformers backend loads weights in


def _backends() -> tuple[str, ...]:
    from pra.backends import BACKENDS
    return tuple(BACKENDS)


RETRIEVAL_MODES = ("dense", "bm25", "hybrid")       # corpora.retrieval.load_retriever's modes


# What training.dataset reads as the reward and search targets (its REWARD_LABELS and SEARCH_LABELS,
# which import this module; tests/test_label.py keeps them equal).
REWARD_LABEL_NAMES = ("judge", "rollout", "soft", "goldprob", "goldprob_soft", "evidence")
SEARCH_LABEL_NAMES = ("always", "margin")


def comma_list(text: str) -> list[str]:
    """``a,b,c``: the non-empty names."""
    return [t.strip() for t in text.split(",") if t.strip()]


def teacher_list(text: str) -> list[str]:
    """``--teachers judge,rollout``: each one of ``TEACHERS``."""
    names = comma_list(text)
    if unknown := [n for n in names if n not in TEACHERS] or ([] if names else [text]):
        raise argparse.ArgumentTypeError(f"unknown teacher {', '.join(map(repr, unknown))}; "
                                         f"choose one or more of {', '.join(TEACHERS)} (comma-separated)")
    return names


@dataclass
class LabelConfig:
    benchmark: str = option("medmcqa-train", group="data", metavar="NAME|FILE",
                            help="training questions (medmcqa-train); evaluation sets are refused")
    limit: int | None = option(300, group="data", metavar="N", help="the first N questions")
    shard: str | None = option(None, group="data", metavar="i/n", help="this machine's share of the questions")
    out: str = option("runs/labels", group="output", metavar="DIR",
                      help="folder: traces.jsonl, labels.jsonl, label_stats.json, label_config.json")
    policy: str = option("smollm2-135m-instruct", group="policy", metavar="MODEL",
                         help="the policy whose traces are labelled (and which completes the rollouts): "
                              "embedded name, hub id or folder")
    backend: str = option("transformers", group="policy", choices=_backends, help="the policy's backend")
    base_url: str | None = option(None, group="policy", metavar="URL",
                                  help="the OpenAI-compatible server for --backend openai")
    traces: int = option(1, group="policy", metavar="k",
                         help="per question: 1 = greedy CoT, k > 1 = k sampled traces")
    max_steps: int = option(4, group="policy", help="steps per trace at most")
    step_tokens: int = option(48, group="policy", help="new tokens per step at most")
    temperature: float = option(0.7, group="policy", help="of sampled traces and rollouts")
    top_p: float = option(0.95, group="policy", help="of sampled traces and rollouts")
    seed: int = option(0, group="policy", help="of sampling")
    batch_size: int = option(16, group="engine", help="sequences per forward batch (transformers backend)")
    max_active: int = option(16, group="engine", help="questions (or partial traces) in the engine's queue at once")
    chunk: int = option(4, group="engine", help="questions labelled per batch: what a stop loses at most")
    block: int = option(32, group="engine",
                        help="questions traced, then labelled, before the next block: a stop keeps every finished block's labels")
    teachers: list[str] = option(group="teachers", type=teacher_list, metavar="T,T",
                                 default_factory=lambda: ["judge", "rollout"],
                                 help="comma-separated: judge, rollout, goldprob")
    judge: str = option("smollm2-135m-instruct", group="teachers", metavar="MODEL",
                        help="judge model: embedded name, hub id, or the served name")
    judge_backend: str = option("transformers", group="teachers", choices=_backends, help="the judge's backend")
    judge_base_url: str | None = option(None, group="teachers", metavar="URL",
                                        help="the server for --judge-backend openai")
    corpus: str = option("medcorp-mini", group="retrieval", metavar="NAME|DIR",
                         help="the passages retrieved from (`pra list corpora`)")
    retrieval: str = option("dense", group="retrieval", choices=RETRIEVAL_MODES,
                            help="dense (FAISS) | bm25 | hybrid (both, fused)")
    docs: int = option(2, group="retrieval",
                       help="passages per step (the judge's evidence; training prompts' documents)")
    max_doc_chars: int = option(600, group="retrieval",
                                help="per passage in the judge's prompt (and the policy's, for goldprob)")
    rollouts: int = option(4, group="teachers", help="rollout: completions per partial trace")
    rollout_steps: int = option(2, group="teachers",
                                help="rollout: further steps per completion before its answer is forced (>= 1)")
    rollout_threshold: float = option(0.5, group="teachers",
                                      help="rollout: the hard label is 1 when the share reaching the gold answer "
                                           "is at least this")
    # bfloat16 logits move in steps of 1/8 to 1/4, coarser than most steps' rise in gold probability
    goldprob_dtype: str | None = option("float32", group="teachers", choices=GOLDPROB_DTYPES,
                                        help="goldprob (transformers backend): the weights its letter reads use "
                                             "(a recipe's null: the policy as loaded)")


@dataclass
class TrainConfig:
    labels: str = option("runs/labels/labels.jsonl", group="data", metavar="FILE",
                         help="labels.jsonl from `pra label`")
    out: str = option("runs/agent", group="output", metavar="DIR",
                      help="folder: the agent (adapter), checkpoints/, log.jsonl, metrics.json, training_args.json")
    base: str = option("smollm2-135m-instruct", group="model", metavar="MODEL",
                       help="backbone: registry name or hub id (what the adapter records as its base)")
    reward_label: str = option("judge", group="data", choices=REWARD_LABEL_NAMES,
                               help="the reward target: judge | rollout | soft (the rollout share as a soft "
                                    "target) | goldprob | goldprob_soft | evidence")
    search_label: str = option("always", group="data", choices=SEARCH_LABEL_NAMES,
                               help="always (the paper's main setting) | margin (median |dm|, judge's or goldprob's)")
    always_without_docs: bool = option(True, group="data", flag="--only-with-docs", action="store_false",
                                       show_default=None,
                                       help="always: each step's prompt with documents only (by default also "
                                            "without them, training.dataset)")
    lora: bool = option(True, group="model", flag="--full", action="store_false", show_default=None,
                        help="full fine-tuning, not LoRA")
    lora_r: int = option(8, group="model", help="LoRA rank")
    lora_alpha: int = option(16, group="model", help="LoRA alpha")
    lora_dropout: float = option(0.05, group="model", help="LoRA dropout")
    lora_targets: list[str] = option(group="model", type=comma_list, metavar="NAME,NAME",
                                     default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
                                     help="comma-separated module names LoRA adapts, e.g. "
                                          "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
    lr: float = option(3e-5, group="optimizer", help="learning rate")
    scheduler: str = option("cosine", group="optimizer", metavar="NAME",
                            help="any transformers.get_scheduler name")
    warmup_steps: int = option(100, group="optimizer", help="optimizer steps of warm-up")
    weight_decay: float = option(0.01, group="optimizer", help="AdamW weight decay")
    batch_size: int = option(4, group="optimizer", help="examples per forward pass")
    grad_accum: int = option(4, group="optimizer", help="forward passes per optimizer step")
    epochs: int = option(3, group="optimizer", help="passes over the labels")
    max_steps: int | None = option(None, group="optimizer", metavar="N",
                                   help="optimizer steps at most (a smoke run, or a run stopped short of its epochs)")
    max_grad_norm: float = option(1.0, group="optimizer", help="gradient clipping norm")
    bf16: bool | None = option(None, group="model", action=argparse.BooleanOptionalAction,
                               help="autocast to bfloat16 (weights and optimizer stay float32); default: where the "
                                    "device multiplies bf16 natively (a GPU, an AVX512-BF16 or AMX CPU), else float32")
    max_doc_chars: int = option(400, group="data", help="per passage in the agent's prompt, as at inference")
    max_tokens: int = option(1024, group="data", help="longer prompts are dropped (and counted), never cut")
    val_fraction: float = option(0.1, group="data", help="share of the questions held out for validation")
    save_every: int = option(50, group="output", help="optimizer steps between checkpoints")
    eval_every: int | None = option(None, group="output", metavar="N",
                                    help="optimizer steps between validations (also at start and end)")
    keep: int = option(2, group="output", help="checkpoints kept")
    seed: int = option(0, group="optimizer", help="of the adapter's initial weights, shuffling and the validation split")
    device: str | None = option(None, group="model", metavar="DEVICE",
                                help="cpu forces the CPU; default: what the Trainer (or accelerate launch) picks")
    report_to: str = option("none", group="output", metavar="NAME",
                            help="the Trainer's loggers: none | tensorboard | wandb | ... (log.jsonl always)")
# (field, lowest, highest, lowest excluded): every number must also be finite (pra.config_files.range_problems)
RANGES: dict[type, tuple] = {
    LabelConfig: (("limit", 1, None), ("traces", 1, None), ("max_steps", 1, None), ("step_tokens", 1, None),
                  ("temperature", 0, None), ("top_p", 0, 1, True), ("batch_size", 1, None), ("max_active", 1, None),
                  ("chunk", 1, None), ("block", 1, None), ("docs", 0, None), ("max_doc_chars", 1, None), ("rollouts", 1, None),
                  ("rollout_steps", 1, None), ("rollout_threshold", 0, 1)),
    TrainConfig: (("lr", 0, None, True), ("batch_size", 1, None), ("grad_accum", 1, None), ("epochs", 1, None),
                  ("max_steps", 1, None), ("save_every", 1, None), ("eval_every", 1, None), ("keep", 1, None),
                  ("lora_r", 1, None), ("lora_alpha", 0, None, True), ("lora_dropout", 0, 1), ("warmup_steps", 0, None),
                  ("weight_decay", 0, None), ("max_grad_norm", 0, None, True), ("max_doc_chars", 1, None),
                  ("max_tokens", 1, None), ("val_fraction", 0, 1)),
}


def load_config(cls: type, section: str, recipe: str | None, overrides: dict[str, Any]):
    """``cls`` from the recipe's ``section`` block, then every override that is not None; a field of the
    wrong type (naming the recipe) or a number out of range (naming the flag) is a UserError."""
    data = read_recipe(recipe, RECIPES, cls, section) if recipe else {}
    given = {f.name: overrides[f.name] for f in fields(cls) if overrides.get(f.name) is not None}
    check_types(cls, given, "command line")
    data.update(given)
    if problems := range_problems(data, RANGES.get(cls, ())):
        raise UserError("\n".join(problems))
    return cls(**data)
