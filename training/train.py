"""``pra train``: fine-tune the reward agent to emit ``r,s`` from the PRA prompt (LoRA by default).

The loss is a cross-entropy over the two digit logits only (``0``/``1``), at slot 1 (after the prompt)
and at slot 2 (after the target reward digit and ``,``). That is exactly what the readouts compute, a
softmax over those two logits, so the loss is the readouts' own log-likelihood; a cross-entropy over the
whole vocabulary would also spend its gradient on pushing mass onto the digits, which no readout looks
at, and could not take the soft rollout labels as targets the way the two-way form does.

A plain PyTorch loop: micro-batches with gradient accumulation, AdamW, a transformers scheduler,
autocast for bf16. The data order is a function of the seed and the epoch, so a checkpoint (weights,
optimizer, scheduler, step, RNG state) is all a resumed run needs to continue the same trajectory.
"""
from __future__ import annotations

import json
import math
import random
import shutil
import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from pra.records import JsonlWriter, read_records
from pra.reward_agent import RewardAgent
from training.config import TrainConfig
from training.dataset import Example, encode, load_examples, split_by_question


def slot_logits(model, batch: list[list[int]], pad_id: int, digit_ids: list[int]) -> torch.Tensor:
    """[rows, slot, digit] logits of a batch of encoded examples. Left padding puts every row's two
    slots in the same columns: the last prompt token (third from the end) and ``,`` (the last)."""
    width = max(map(len, batch))
    dev = model.device
    ids = torch.tensor([[pad_id] * (width - len(x)) + x for x in batch], device=dev)
    mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in batch], device=dev)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=3).logits
    return logits[:, [0, 2]][:, :, digit_ids].float()


def slot_loss(logits: torch.Tensor, reward: torch.Tensor, search: torch.Tensor) -> torch.Tensor:
    """Per-example loss: two-way cross-entropy at slot 1 (the reward target may be soft) plus slot 2."""
    lp = logits.log_softmax(-1)
    return -(reward * lp[:, 0, 1] + (1 - reward) * lp[:, 0, 0]) - lp[:, 1].gather(1, search[:, None]).squeeze(1)


def validate(backend, examples: list[Example], max_doc_chars: int) -> dict[str, Any]:
    """Reward AUROC and PR-AUC against the held-out teacher labels and search-action accuracy, read
    through ``RewardAgent.score``: the inference code path, prefix sharing included."""
    from sklearn.metrics import average_precision_score, roc_auc_score

    if not examples:
        return {"examples": 0}
    training = backend.model.training
    backend.model.eval()
    backend.prefix_cache.clear()      # states cached at the last validation came from older weights
    readouts = RewardAgent(backend, max_doc_chars).score([e.request for e in examples])
    backend.model.train(training)
    y = [int(e.reward >= 0.5) for e in examples]
    p = [r.reward for r in readouts]
    both = len(set(y)) == 2
    return {"examples": len(examples), "positive_share": statistics.fmean(y),
            "reward_auroc": roc_auc_score(y, p) if both else None,
            "reward_pr_auc": average_precision_score(y, p) if both else None,
            "search_accuracy": statistics.fmean((r.action >= 0.5) == bool(e.search)
                                                for r, e in zip(readouts, examples))}


def micro_batches(n: int, batch_size: int, epochs: int, seed: int) -> list[list[int]]:
    """Every epoch's shuffled order cut into micro-batches; a function of the seed alone."""
    out = []
    for epoch in range(epochs):
        order = list(range(n))
        random.Random(seed * 1000 + epoch).shuffle(order)
        out += [order[i:i + batch_size] for i in range(0, n, batch_size)]
    return out


def with_adapter(model, cfg: TrainConfig):
    if not cfg.lora:
        return model
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(model, LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                                             target_modules=list(cfg.lora_targets), task_type="CAUSAL_LM"))
    # The registry name, not the local cache folder, so that the adapter resolves on any machine.
    model.peft_config["default"].base_model_name_or_path = cfg.base
    return model


def export(model, tokenizer, folder: Path, cfg: TrainConfig) -> None:
    """A folder ``load_reward_agent`` takes: the adapter (naming its base) or the full model."""
    if cfg.lora:
        model.save_pretrained(folder, save_embedding_layers=False)   # embeddings are frozen: no hub lookup
    else:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)


def save_checkpoint(run: Path, step: int, model, tokenizer, optimizer, scheduler, cfg: TrainConfig) -> Path:
    """``checkpoints/step-N``: the agent, its trainable weights, optimizer, scheduler, step and RNG,
    written to a temporary folder and renamed, so a stop mid-write leaves the last checkpoint whole."""
    folder = run / "checkpoints" / f"step-{step:06d}"
    tmp = folder.with_name(".tmp-" + folder.name)
    shutil.rmtree(tmp, ignore_errors=True)
    export(model, tokenizer, tmp, cfg)
    torch.save({"step": step, "trainable": {n: p.detach() for n, p in model.named_parameters() if p.requires_grad},
                "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "rng": torch.get_rng_state(),
                "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
               tmp / "state.pt")
    tmp.rename(folder)
    for old in sorted(folder.parent.glob("step-*"))[:-cfg.keep]:
        shutil.rmtree(old)
    return folder


def load_checkpoint(folder: Path, model, optimizer, scheduler) -> int:
    state = torch.load(folder / "state.pt", map_location=model.device, weights_only=True)
    model.load_state_dict(state["trainable"], strict=False)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"].cpu())
    if state["cuda_rng"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])
    return state["step"]


def train(cfg: TrainConfig) -> dict[str, Any]:
    """Train (or resume training) the reward agent into ``cfg.out``; returns ``metrics.json``."""
    from transformers import get_scheduler

    from pra.backends.transformers_backend import TransformersBackend

    torch.manual_seed(cfg.seed)
    run = Path(cfg.out)
    run.mkdir(parents=True, exist_ok=True)
    backend = TransformersBackend(cfg.base, batch_size=16, dtype="float32", device=cfg.device)
    train_set, val_set = split_by_question(load_examples(cfg.labels, cfg.reward_label, cfg.search_label),
                                           cfg.val_fraction, cfg.seed)
    encoded = [(encode(backend, e, cfg.max_doc_chars), e) for e in train_set]
    kept = [(ids, e) for ids, e in encoded if len(ids) <= cfg.max_tokens]
    if not kept:
        raise ValueError(f"no training example fits in max_tokens={cfg.max_tokens}")
    batches = micro_batches(len(kept), cfg.batch_size, cfg.epochs, cfg.seed)
    steps = math.ceil(len(batches) / cfg.grad_accum)
    steps = min(steps, cfg.max_steps) if cfg.max_steps else steps
    args = {**asdict(cfg), "train_examples": len(kept), "dropped_too_long": len(encoded) - len(kept),
            "val_examples": len(val_set), "val_questions": len({e.question_id for e in val_set}),
            "optimizer_steps": steps, "effective_batch": cfg.batch_size * cfg.grad_accum}
    previous = run / "training_args.json"
    if previous.exists() and json.loads(previous.read_text()) != json.loads(json.dumps(args)):
        raise ValueError(f"{run} holds a run with other settings or data; resume with the same ones or use a new out")
    previous.write_text(json.dumps(args, indent=2))

    model = backend.model = with_adapter(backend.model, cfg)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr,
                                  weight_decay=cfg.weight_decay)
    scheduler = get_scheduler(cfg.scheduler, optimizer, num_warmup_steps=min(cfg.warmup_steps, steps),
                              num_training_steps=steps)
    found = sorted((run / "checkpoints").glob("step-*"))
    start = load_checkpoint(found[-1], model, optimizer, scheduler) if found else 0
    digit_ids = backend.token_ids(["0", "1"])
    pad = backend.tokenizer.pad_token_id
    log = JsonlWriter(run / "log.jsonl")

    def evaluate(step: int) -> None:
        if f"eval-{step}" not in log.done:
            log.write({"id": f"eval-{step}", "step": step, **validate(backend, val_set, cfg.max_doc_chars)})

    if start == 0:
        evaluate(0)      # the untrained backbone: the baseline the trained agent is compared with
    model.train()
    bar = tqdm(range(start, steps), initial=start, total=steps, desc="train")
    for step in bar:
        began = time.perf_counter()
        group = batches[step * cfg.grad_accum:(step + 1) * cfg.grad_accum]
        n = sum(map(len, group))
        total = 0.0
        for mb in group:
            rows = [kept[i] for i in mb]
            with torch.autocast(model.device.type, dtype=torch.bfloat16, enabled=cfg.bf16):
                logits = slot_logits(model, [ids for ids, _ in rows], pad, digit_ids)
            reward = torch.tensor([e.reward for _, e in rows], device=model.device)
            search = torch.tensor([e.search for _, e in rows], device=model.device)
            loss = slot_loss(logits, reward, search).sum() / n
            loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], cfg.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        done = step + 1
        log.write({"id": f"step-{done}", "step": done, "loss": total, "lr": scheduler.get_last_lr()[0],
                   "seconds": round(time.perf_counter() - began, 3)})
        bar.set_postfix(loss=f"{total:.4f}")
        if done % cfg.save_every == 0 or done == steps:
            save_checkpoint(run, done, model, backend.tokenizer, optimizer, scheduler, cfg)
        if cfg.eval_every and done % cfg.eval_every == 0:
            evaluate(done)
    evaluate(steps)
    log.close()
    export(model, backend.tokenizer, run, cfg)
    records = list(read_records(run / "log.jsonl"))
    evals = sorted((r for r in records if r["id"].startswith("eval-")), key=lambda r: r["step"])
    metrics = {"initial": evals[0], "final": evals[-1], "history": evals,
               "train_loss": [r["loss"] for r in sorted((r for r in records if r["id"].startswith("step-")),
                                                         key=lambda r: r["step"])]}
    (run / "metrics.json").write_text(json.dumps(metrics, indent=2))
    return metrics
