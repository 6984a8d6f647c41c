"""Training-step benchmark: ``pra perf train [--recipe NAME] [--base MODEL] [--steps N]``.

``pra train`` autocasts to bfloat16 where the device multiplies bf16 natively (a GPU, an AVX512-BF16
or AMX CPU; ``training.train.native_bf16``). Whether that pays on a CPU depends on the CPU and the
backbone, so this measures it: on the recipe's first training examples, the same optimizer steps
(the Trainer, the slot loss, the adapter, each mode from the same fresh adapter) run once in float32
and once under bf16 autocast. It prints each mode's seconds an example (the first step, a warm-up,
left out) and how far the two losses differ; the last line is a one-line summary.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from statistics import mean

import torch
from transformers import PrinterCallback, TrainerCallback
from transformers.trainer_utils import SaveStrategy

from pra.errors import UserError
from training.config import TrainConfig, load_config
from training.dataset import encode, load_examples, split_by_question
from training.train import SlotCollator, SlotLossTrainer, native_bf16, training_arguments, with_adapter


class StepClock(TrainerCallback):
    """Each optimizer step's seconds and logged loss."""

    def __init__(self):
        self.seconds: list[float] = []
        self.losses: list[float] = []

    def on_step_begin(self, args, state, control, **kwargs):
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.seconds.append(time.perf_counter() - self.start)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses.append(float(logs["loss"]))


def first_examples(cfg: TrainConfig, backend, count: int) -> list[dict]:
    """The first ``count`` training examples of the recipe's split that fit ``max_tokens``, as the
    Trainer takes them (token ids and targets)."""
    train_set, _ = split_by_question(load_examples(cfg.labels, cfg.reward_label, cfg.search_label,
                                                   cfg.always_without_docs), cfg.val_fraction, cfg.seed)
    rows = []
    for e in train_set:
        ids = encode(backend, e, cfg.max_doc_chars)
        if len(ids) <= cfg.max_tokens:
            rows.append({"input_ids": ids, "reward": e.reward, "search": e.search})
        if len(rows) == count:
            return rows
    raise UserError(f"{cfg.labels}: {len(rows)} training examples fit max_tokens={cfg.max_tokens}, fewer than "
                    f"the {count} that --steps asks for (steps x batch_size x grad_accum)")


def timed_steps(cfg: TrainConfig, backend, rows: list[dict], bf16: bool) -> StepClock:
    """``cfg.max_steps`` optimizer steps of a fresh adapter on ``backend``'s model (seeded as ``pra train``
    seeds it), in float32 or under bf16 autocast; no checkpoint is written, and an adapter is removed
    again at the end."""
    torch.manual_seed(cfg.seed)
    model = with_adapter(backend.model, cfg)
    clock = StepClock()
    with tempfile.TemporaryDirectory() as tmp:
        args = training_arguments(replace(cfg, bf16=bf16, device="cpu"), Path(tmp))
        args.save_strategy, args.disable_tqdm = SaveStrategy.NO, True
        trainer = SlotLossTrainer(model=model, args=args, train_dataset=rows, callbacks=[clock],
                                  data_collator=SlotCollator(backend.tokenizer.pad_token_id),
                                  digit_ids=backend.token_ids(["0", "1"]))
        trainer.remove_callback(PrinterCallback)     # each step's log: the summary says what matters
        trainer.train()
    if cfg.lora:
        backend.model = model.unload()
    return clock


def main(argv: list[str] | None = None) -> None:
    from pra.backends.transformers_backend import TransformersBackend

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", default="qwen-goldprob", help="the training recipe (its `train:` block)")
    ap.add_argument("--labels", help="labels.jsonl (default: the recipe's)")
    ap.add_argument("--base", help="the backbone (default: the recipe's)")
    ap.add_argument("--batch-size", dest="batch_size", type=int, help="default: the recipe's")
    ap.add_argument("--grad-accum", dest="grad_accum", type=int, help="default: the recipe's")
    ap.add_argument("--steps", type=int, default=4, help="optimizer steps in each mode, the first one not timed")
    a = ap.parse_args(argv)
    if a.steps < 2:
        raise UserError("--steps: at least 2 (the first step is a warm-up and is not timed)")
    cfg = load_config(TrainConfig, "train", a.recipe, {**vars(a), "max_steps": a.steps, "device": "cpu"})
    if not Path(cfg.labels).is_file():
        raise UserError(f"no labels file {cfg.labels}: run `pra label` for it, or pass --labels")

    def load():
        return TransformersBackend(cfg.base, batch_size=1, dtype="float32", device="cpu")

    backend = load()
    rows = first_examples(cfg, backend, a.steps * cfg.batch_size * cfg.grad_accum)
    float32 = timed_steps(cfg, backend, rows, bf16=False)
    bf16 = timed_steps(cfg, backend if cfg.lora else load(), rows, bf16=True)   # full fine-tuning moved the weights
    per_example = {name: mean(c.seconds[1:]) / (cfg.batch_size * cfg.grad_accum)
                   for name, c in (("float32", float32), ("bf16 autocast", bf16))}
    moved = max(abs(x - y) for x, y in zip(float32.losses, bf16.losses))
    threads = torch.get_num_threads()
    tokens = mean(len(r["input_ids"]) for r in rows)
    print(f"{cfg.base}, {'LoRA r=' + str(cfg.lora_r) if cfg.lora else 'full'}, {len(rows)} examples (mean {tokens:.0f} "
          f"tokens), batch {cfg.batch_size} x {cfg.grad_accum}, {threads} threads")
    for name, clock in (("float32", float32), ("bf16 autocast", bf16)):
        steps = ", ".join(f"{s:.1f}" for s in clock.seconds[1:])
        print(f"  {name:14s} {per_example[name]:6.2f} s an example  (steps 2-{a.steps}: {steps} s)")
    print(f"  the loss of a step differs by at most {moved:.4f} between the two")
    default = "bf16 autocast" if native_bf16(replace(cfg, bf16=None)) else "float32"
    print(f"summary: bf16 autocast runs {per_example['float32'] / per_example['bf16 autocast']:.2f}x the speed of float32 "
          f"for {cfg.base} on this CPU; pra train's default here: {default}")


if __name__ == "__main__":
    main()
