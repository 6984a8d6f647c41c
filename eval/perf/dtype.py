"""``python -m eval.perf.dtype``: float32 against bfloat16 for a policy on this machine's CPU (or GPU).

Prints prefill and decode tokens per second for each, then the ratios; ``pra.models.default_dtype``
picks bfloat16 where the CPU has native bf16 matmul for this reason.
"""
from __future__ import annotations

import argparse
import time

import torch

from pra.models import load_causal_lm


def speed(model: str, dtype: str, batch: int, prompt: int, new: int) -> tuple[float, float]:
    lm, _ = load_causal_lm(model, dtype=dtype)
    x = torch.randint(100, 1000, (batch, prompt), device=lm.device)
    mask = torch.ones_like(x)
    with torch.inference_mode():
        lm(x, attention_mask=mask)                         # warm-up
        start = time.perf_counter()
        lm(x, attention_mask=mask)
        prefill = batch * prompt / (time.perf_counter() - start)
        start = time.perf_counter()
        lm.generate(x[:, :64], attention_mask=mask[:, :64], max_new_tokens=new, min_new_tokens=new, do_sample=False)
        decode = batch * new / (time.perf_counter() - start)
    return prefill, decode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args()
    result = {d: speed(args.model, d, args.batch, 256, 16) for d in ("float32", "bfloat16")}
    for d, (p, g) in result.items():
        print(f"{d:9s} prefill {p:7.0f} tok/s   decode {g:6.0f} tok/s   (batch {args.batch})")
    (p32, g32), (p16, g16) = result["float32"], result["bfloat16"]
    print(f"summary: bfloat16/float32 prefill {p16 / p32:.2f}x, decode {g16 / g32:.2f}x")


if __name__ == "__main__":
    main()
