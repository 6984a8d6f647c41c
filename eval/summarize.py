"""``python -m eval.summarize RUN_DIR... [--first N]``: one Markdown row per saved run, from its records.

``--first N`` keeps the benchmark's first N questions, so runs of different sizes compare on the same
questions (e.g. CoT over 100 questions next to PRA over the first 50).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from pra.benchmarks import load_eval_benchmark
from eval.run import summarize
from pra.records import read_records
from pra.selection import split_id


def run_row(run: Path, first: int | None = None) -> dict:
    cfg = json.loads((run / "config.json").read_text())
    records = list(read_records(run / "records.jsonl"))
    if first is not None:
        ids = {q.id for q in load_eval_benchmark(cfg["benchmark"], limit=first).questions}
        records = [r for r in records if split_id(r["id"])[0] in ids]     # every rotation of them
    method = cfg["method"]
    if method == "pra":
        method += f" ({cfg['reward_agent']}, search {cfg['search_controller']})"
    elif method in ("sc", "rag-sc"):
        method += f" (k={cfg['samples']})"
    return {"run": str(run), "method": method, "policy": cfg["policy"], **summarize(records)}


def markdown(rows: list[dict]) -> str:
    lines = ["| policy | method | n | accuracy | forced | tokens / q | seconds / q | searches / q |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['policy']} | {r['method']} | {r['n']} | {r['accuracy']:.3f} ± {r['stderr']:.3f} | {r['forced']} | "
                     f"{r['tokens_per_question']:.0f} | {r['seconds_per_question']:.1f} | "
                     f"{r['searches_per_question']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--first", type=int, help="only the benchmark's first N questions")
    args = ap.parse_args()
    print(markdown([run_row(r, args.first) for r in args.runs if (r / "records.jsonl").exists()]))


if __name__ == "__main__":
    main()
