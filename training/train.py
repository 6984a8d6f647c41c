"""``pra train``: fine-tune the reward agent to emit ``r,s`` from the PRA prompt (LoRA by default).

The loss is a cross-entropy over the two digit logits only (``0``/``1``), at slot 1 (after the prompt)
and at slot 2 (after the target reward digit and ``,``). That is exactly what the readouts compute, a
softmax over those two logits, so the loss is the readouts' own log-likelihood; a cross-entropy over the
whole vocabulary would also spend its gradient on pushing mass onto the digits, which no readout looks
at, and could not take the soft rollout labels as targets the way the two-way form does.

The loop is transformers' ``Trainer`` with this loss as its ``compute_loss``. TRL is not used, and not a
dependency: TRL 1.16 has no process-reward trainer (its ``RewardTrainer`` scores whole sequences through a
classification head; the agent keeps the LM head, so that any LM engine serves it); ``SFTTrainer``'s
completion-only loss is a cross-entropy over the whole vocabulary with hard token targets, not this
two-way one with soft rollout targets, and its ``compute_loss_func`` hook gets token labels only (no place
for a soft target) and runs a second forward pass per batch for its metrics. Under ``accelerate launch``
the Trainer gives multi-GPU, DeepSpeed and FSDP; ``report_to`` gives the standard loggers. Checkpoints are
the Trainer's (``checkpoints/checkpoint-N``: adapter, optimizer, scheduler, RNG, data position); a run
started again on the same ``out`` resumes from the last whole one on the same trajectory.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

from pra.records import JsonlWriter, read_records
from pra.resume import check
from pra.reward_agent import PROMPT_RECORD, RewardAgent
from training.config import TrainConfig
from training.dataset import EARLIER_REWARDS, Example, encode, load_examples, split_by_question
from training.evaluate_agent import held_out_summary, validate, without_readouts
from pra.errors import UserError


def pad_left(batch: list[list[int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Model inputs of encoded examples. Left padding puts every row's two slots in the same columns:
    the last prompt token (third from the end) and ``,`` (the last)."""
    width = max(map(len, batch))
    ids = torch.tensor([[pad_id] * (width - len(x)) + x for x in batch])
    mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in batch])
    return {"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)}


def slot_logits(model, inputs: dict[str, torch.Tensor], digit_ids: list[int]) -> torch.Tensor:
    """[rows, slot, digit] logits of ``pad_left`` inputs (on the model's device)."""
    logits = model(**inputs, logits_to_keep=3).logits
    return logits[:, [0, 2]][:, :, digit_ids].float()


def slot_loss(logits: torch.Tensor, reward: torch.Tensor, search: torch.Tensor) -> torch.Tensor:
    """Per-example loss: two-way cross-entropy at slot 1 (the reward target may be soft) plus slot 2."""
    lp = logits.log_softmax(-1)
    return -(reward * lp[:, 0, 1] + (1 - reward) * lp[:, 0, 0]) - lp[:, 1].gather(1, search[:, None]).squeeze(1)


def with_adapter(model, cfg: TrainConfig):
    if not cfg.lora:
        return model
    from peft import LoraConfig, get_peft_model

    linear = sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
    unknown = [t for t in cfg.lora_targets if t not in linear]
    if unknown or not cfg.lora_targets:
        problem = f"{cfg.base} has no linear layer named {', '.join(unknown)}" if unknown else "none given"
        raise UserError(f"lora_targets: {problem} (its linear layers: {', '.join(linear)})")
    model = get_peft_model(model, LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                                             target_modules=list(cfg.lora_targets), task_type="CAUSAL_LM"))
    # The registry name, not the local cache folder, so that the adapter resolves on any machine.
    model.peft_config["default"].base_model_name_or_path = cfg.base
    return model


# The file that makes a folder loadable (as an adapter, as a model): moved into place last by ``export``.
LOADABLE = ("adapter_config.json", "config.json")


def export(model, tokenizer, folder: Path, cfg: TrainConfig) -> None:
    """A folder ``load_reward_agent`` takes: the adapter (naming its base) or the full model, and the
    prompt variant it was trained with. Everything is written into a temporary folder first, then moved
    in with the prompt record first and the config that makes the folder loadable last, so an export cut
    short never leaves a folder that loads as an agent with the wrong prompt or half its weights."""
    tmp = folder / f".export-tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        if cfg.lora:
            model.save_pretrained(tmp, save_embedding_layers=False)   # embeddings are frozen: no hub lookup
        else:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
        (tmp / PROMPT_RECORD).write_text(json.dumps({"earlier_rewards": EARLIER_REWARDS}) + "\n")
        for name in LOADABLE:                  # an earlier export's: the folder stops loading until done
            (folder / name).unlink(missing_ok=True)
        order = sorted(tmp.iterdir(), key=lambda p: (p.name != PROMPT_RECORD, p.name in LOADABLE, p.name))
        for path in order:
            os.replace(path, folder / path.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class SlotCollator:
    """Left-padded model inputs plus the two targets of each example."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        return {**pad_left([r["input_ids"] for r in rows], self.pad_id),
                "reward": torch.tensor([r["reward"] for r in rows], dtype=torch.float32),
                "search": torch.tensor([r["search"] for r in rows])}


class SlotLossTrainer(Trainer):
    """The slot loss as the Trainer's loss, summed and divided by the examples of the whole accumulated
    batch: a short last micro-batch weighs by its examples, not as a full one."""
    loss_is_scaled_for_ga = True

    def __init__(self, *args, digit_ids: list[int], **kwargs):
        super().__init__(*args, **kwargs)
        self.digit_ids = digit_ids

    def _get_num_items_in_batch(self, batch_samples: list, device: torch.device) -> int:
        return sum(len(b["reward"]) for b in batch_samples)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        logits = slot_logits(model, {k: inputs[k] for k in ("input_ids", "attention_mask", "position_ids")},
                             self.digit_ids)
        loss = slot_loss(logits, inputs["reward"], inputs["search"]).sum() / (num_items_in_batch or len(logits))
        return (loss, logits) if return_outputs else loss


class HeldOutLog(TrainerCallback):
    """``log.jsonl``: every optimizer step's loss, and the held-out metrics at step 0 (the untrained
    backbone), every ``eval_every`` steps and at the end. Written by the main process only; ids already
    there (a resumed run repeats the steps after its checkpoint) are kept as they were."""

    def __init__(self, backend, val_set: list[Example], cfg: TrainConfig, log: JsonlWriter):
        self.agent = RewardAgent(backend, cfg.max_doc_chars, EARLIER_REWARDS)
        self.val_set, self.log = val_set, log
        self.eval_every = cfg.eval_every

    def evaluate(self, step: int) -> None:
        if f"eval-{step}" not in self.log.done:
            self.log.write({"id": f"eval-{step}", "step": step, **validate(self.agent, self.val_set)})

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.evaluate(0)

    def on_step_end(self, args, state, control, **kwargs):
        every = self.eval_every
        if state.is_world_process_zero and every and state.global_step % every == 0:
            self.evaluate(state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs and "loss" in logs:
            self.log.write({"id": f"step-{state.global_step}", "step": state.global_step, "loss": logs["loss"],
                            "lr": logs.get("learning_rate"), "grad_norm": logs.get("grad_norm")})


def last_checkpoint(folder: Path) -> Path | None:
    """The newest whole checkpoint: the Trainer writes ``trainer_state.json`` last, so a folder without it
    is a write cut short."""
    whole = [p for p in folder.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()
             and (p / "trainer_state.json").exists()]
    return max(whole, key=lambda p: int(p.name.split("-")[-1]), default=None)


def native_bf16(cfg: TrainConfig) -> bool:
    """The recipe's ``bf16``, or where it is unset, whether the device multiplies bf16 natively (as
    inference picks its dtype, ``pra.models.default_dtype``): autocast pays there and is emulated, slower
    than float32, elsewhere."""
    from pra.models import default_dtype

    if cfg.bf16 is not None:
        return cfg.bf16
    return default_dtype(cfg.device or ("cuda" if torch.cuda.is_available() else "cpu")) == "bfloat16"


def training_arguments(cfg: TrainConfig, run: Path) -> TrainingArguments:
    """The recipe's settings in the Trainer's terms (``warmup_steps`` is capped once the steps are known)."""
    return TrainingArguments(
        output_dir=str(run / "checkpoints"), per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum, num_train_epochs=cfg.epochs, max_steps=cfg.max_steps or -1,
        learning_rate=cfg.lr, lr_scheduler_type=cfg.scheduler, warmup_steps=cfg.warmup_steps,
        weight_decay=cfg.weight_decay, max_grad_norm=cfg.max_grad_norm, bf16=cfg.bf16,
        save_strategy="steps", save_steps=cfg.save_every, save_total_limit=cfg.keep, logging_steps=1,
        report_to=cfg.report_to, seed=cfg.seed, data_seed=cfg.seed, remove_unused_columns=False,
        use_cpu=cfg.device == "cpu" or not torch.cuda.is_available(), dataloader_pin_memory=False, disable_tqdm=False)


def optimizer_steps(cfg: TrainConfig, examples: int, world_size: int) -> int:
    """As the Trainer counts them: each epoch's micro-batches in groups of ``grad_accum``, the last
    group possibly short."""
    per_epoch = math.ceil(math.ceil(examples / (cfg.batch_size * world_size)) / cfg.grad_accum)
    return min(per_epoch * cfg.epochs, cfg.max_steps) if cfg.max_steps else per_epoch * cfg.epochs


# Where a training run writes: not part of its fingerprint (training_args.json), so a run folder moved
# elsewhere resumes.
WHERE = ("out",)


def check_run(run: Path, record: dict[str, Any]) -> None:
    """Refuse to resume ``run`` unless its settings and what the data gave (examples, steps) are the
    same (``pra.resume.check``, the rule of run folders and label sets); keep them in training_args.json
    with their fingerprint."""
    previous = run / "training_args.json"
    old = json.loads(previous.read_text()) if previous.exists() else None
    record = json.loads(json.dumps(record))
    fp = check(run, "a training run", old, record, skip=WHERE)
    run.mkdir(parents=True, exist_ok=True)
    previous.write_text(json.dumps({**record, "fingerprint": fp}, indent=2))


def train(cfg: TrainConfig) -> dict[str, Any] | None:
    """Train (or resume training) the reward agent into ``cfg.out``; returns ``metrics.json`` (None on
    the other processes of a multi-process launch)."""
    from pra.backends.transformers_backend import TransformersBackend

    cfg = replace(cfg, bf16=native_bf16(cfg))     # resolved before the run is recorded: a resume elsewhere that
                                                  # would resolve it otherwise is refused, naming bf16
    torch.manual_seed(cfg.seed)       # the adapter's initial weights; the Trainer seeds the rest
    run = Path(cfg.out)
    train_set, val_set = split_by_question(load_examples(cfg.labels, cfg.reward_label, cfg.search_label,
                                                         cfg.always_without_docs), cfg.val_fraction, cfg.seed)
    args = training_arguments(cfg, run)
    backend = TransformersBackend(cfg.base, batch_size=16, dtype="float32", device=str(args.device))
    encoded = [(encode(backend, e, cfg.max_doc_chars), e) for e in train_set]
    if backend.context_window and cfg.max_tokens > backend.context_window:
        raise UserError(f"max_tokens {cfg.max_tokens} exceeds the {backend.context_window}-token context of {cfg.base}")
    kept = [{"input_ids": ids, "reward": e.reward, "search": e.search} for ids, e in encoded if len(ids) <= cfg.max_tokens]
    if not kept:
        raise UserError(f"no training example fits in max_tokens={cfg.max_tokens}")
    if len(kept) < len(encoded):
        longest = max(len(ids) for ids, _ in encoded)
        print(f"dropped {len(encoded) - len(kept)} of {len(encoded)} training examples longer than max_tokens="
              f"{cfg.max_tokens} (the longest: {longest} tokens); a larger max_tokens keeps them", file=sys.stderr)
    steps = optimizer_steps(cfg, len(kept), args.world_size)
    args.warmup_steps = min(cfg.warmup_steps, steps)
    record = {**asdict(cfg), "train_examples": len(kept), "dropped_too_long": len(encoded) - len(kept),
              "val_examples": len(val_set), "val_questions": len({e.question_id for e in val_set}),
              "optimizer_steps": steps, "effective_batch": cfg.batch_size * cfg.grad_accum * args.world_size}
    if args.process_index == 0:
        check_run(run, record)

    model = backend.model = with_adapter(backend.model, cfg)
    log = JsonlWriter(run / "log.jsonl")
    held_out = HeldOutLog(backend, val_set, cfg, log)
    trainer = SlotLossTrainer(model=model, args=args, train_dataset=kept,
                              data_collator=SlotCollator(backend.tokenizer.pad_token_id),
                              callbacks=[held_out], digit_ids=backend.token_ids(["0", "1"]))
    resume = last_checkpoint(run / "checkpoints")
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    if not trainer.is_world_process_zero():
        return None
    held_out.evaluate(steps)
    log.close()
    export(model, backend.tokenizer, run, cfg)
    metrics = run_metrics(run, val_set)
    (run / "metrics.json").write_text(json.dumps(metrics, indent=2))
    return metrics


def run_metrics(run: Path, val_set: list[Example]) -> dict[str, Any]:
    """``metrics.json`` from the run's ``log.jsonl``: the held-out summary of its first (untrained) and
    last evaluations, every evaluation without its readouts, and the training loss per step."""
    records = list(read_records(run / "log.jsonl"))
    evals = sorted((r for r in records if r["id"].startswith("eval-")), key=lambda r: r["step"])
    public = [without_readouts(e) for e in evals]
    return {**held_out_summary(val_set, evals[0], evals[-1]),
            "initial": public[0], "final": public[-1], "history": public,
            "train_loss": [r["loss"] for r in sorted((r for r in records if r["id"].startswith("step-")),
                                                     key=lambda r: r["step"])]}
