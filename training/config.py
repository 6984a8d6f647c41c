"""The settings of ``pra label`` and ``pra train``, filled from a YAML recipe (``label:`` and ``train:``
blocks of one file, so that the training block can point at the labelling block's output), then from
command-line flags."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from pra.config_files import check_types, range_problems, read_recipe
from pra.errors import UserError

RECIPES = Path(__file__).parent / "recipes"


@dataclass
class LabelConfig:
    benchmark: str = "medmcqa-train"     # training questions only; evaluation sets are refused
    limit: int | None = 300
    shard: str | None = None             # "i/n"
    out: str = "runs/labels"
    # the policy whose traces are labelled (and which completes the rollouts)
    policy: str = "smollm2-135m-instruct"
    backend: str = "transformers"        # transformers | vllm | openai
    base_url: str | None = None
    traces: int = 1                      # per question: 1 = greedy CoT, k > 1 = k sampled traces
    max_steps: int = 4
    step_tokens: int = 48
    temperature: float = 0.7             # sampled traces and rollouts
    top_p: float = 0.95
    seed: int = 0
    batch_size: int = 16
    max_active: int = 16                 # questions (or partial traces) in the engine's queue at once
    chunk: int = 4                       # questions labelled per batch: what a stop loses at most
    # teachers
    teachers: list[str] = field(default_factory=lambda: ["judge", "rollout"])   # and/or goldprob
    judge: str = "smollm2-135m-instruct"
    judge_backend: str = "transformers"
    judge_base_url: str | None = None
    corpus: str = "medcorp-mini"
    retrieval: str = "dense"             # dense | bm25 | hybrid
    docs: int = 2                        # passages per step (the judge's evidence; training prompts' documents)
    max_doc_chars: int = 600             # per passage in the judge's prompt (and the policy's, for goldprob)
    rollouts: int = 4                    # n completions per partial trace
    rollout_steps: int = 2               # further steps per completion before an answer is forced (>= 1)
    rollout_threshold: float = 0.5       # hard rollout label: share reaching the gold answer >= this
    # goldprob (transformers backend): the weights its letter reads use. bfloat16 logits move in steps
    # of 1/8 to 1/4, coarser than most steps' rise in gold probability; None reads with the policy as loaded
    goldprob_dtype: str | None = "float32"


@dataclass
class TrainConfig:
    labels: str = "runs/labels/labels.jsonl"
    out: str = "runs/agent"
    base: str = "smollm2-135m-instruct"  # registry name or hub id: what the adapter records as its base
    reward_label: str = "judge"          # judge | rollout | soft (the rollout share as a soft target) | goldprob | goldprob_soft | evidence
    search_label: str = "always"         # always (the paper's main setting) | margin (median |dm|, judge's or goldprob's)
    always_without_docs: bool = True     # always: each step's prompt without documents too (training.dataset)
    lora: bool = True                    # False: full fine-tuning
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.05
    lora_targets: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    lr: float = 3e-5
    scheduler: str = "cosine"            # any transformers.get_scheduler name
    warmup_steps: int = 100
    weight_decay: float = 0.01
    batch_size: int = 4                  # examples per forward pass
    grad_accum: int = 4                  # forward passes per optimizer step
    epochs: int = 3
    max_steps: int | None = None         # optimizer steps at most (smoke runs)
    max_grad_norm: float = 1.0
    bf16: bool = False                   # autocast to bfloat16 (weights and optimizer stay float32)
    max_doc_chars: int = 400             # per passage in the agent's prompt, as at inference
    max_tokens: int = 1024               # longer prompts are dropped (and counted), never cut
    val_fraction: float = 0.1            # of the questions
    save_every: int = 50                 # optimizer steps between checkpoints
    eval_every: int | None = None        # optimizer steps between validations (also at start and end)
    keep: int = 2                        # checkpoints kept
    seed: int = 0
    device: str | None = None            # "cpu" forces the CPU; default: what the Trainer (or accelerate launch) picks
    report_to: str = "none"              # the Trainer's loggers: none | tensorboard | wandb | ... (log.jsonl always)


# (field, lowest, highest, lowest excluded): every number must also be finite (pra.config_files.range_problems)
RANGES: dict[type, tuple] = {
    LabelConfig: (("limit", 1, None), ("traces", 1, None), ("max_steps", 1, None), ("step_tokens", 1, None),
                  ("temperature", 0, None), ("top_p", 0, 1, True), ("batch_size", 1, None), ("max_active", 1, None),
                  ("chunk", 1, None), ("docs", 0, None), ("max_doc_chars", 1, None), ("rollouts", 1, None),
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
