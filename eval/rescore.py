"""Post-hoc rewards for saved traces: ``python -m eval.rescore RUN --out OUT [--reward-agent NAME]``.

Every sampled trace of every record (its ``samples``, written by ``pra eval`` for SC and PRA runs) gets
the reward agent's reward for each step, read as during decoding (earlier steps shown with their
rewards, no documents) but without steering anything, and an outcome reward: the agent's reward for the
trace's final answer as one more step. ``pra report`` re-ranks these traces by the outcome reward and by
the process rewards aggregated as last, min, max and mean (the paper's Table 4). Resumable: records
already in ``OUT`` are skipped.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from eval.benchmarks import load_eval_benchmark
from pra.records import JsonlWriter, read_records
from pra.reward_agent import ScoreRequest, load_reward_agent
from pra.types import Question

CHUNK = 8     # records scored per batch: what a stop loses at most


def rescore_records(records: list[dict[str, Any]], questions: dict[str, Question], agent) -> list[dict[str, Any]]:
    """The records with ``rewards`` and ``outcome`` filled in for each sample, scored step by step: a
    step's prompt shows the rewards the earlier steps just got."""
    samples = [(questions[r["id"]], s) for r in records for s in r["samples"]]
    rewards: list[list[float]] = [[] for _ in samples]
    for depth in range(max(len(s["steps"]) for _, s in samples) + 1):
        jobs = []
        for i, (q, s) in enumerate(samples):
            steps = s["steps"]
            if depth < len(steps):
                jobs.append((i, ScoreRequest(q, tuple(steps[:depth]), tuple(rewards[i]), steps[depth])))
            elif depth == len(steps):        # the outcome: the final answer judged as one more step
                jobs.append((i, ScoreRequest(q, tuple(steps), tuple(rewards[i]),
                                             f"Therefore, the answer is ({s['answer']}).")))
        for (i, _), readout in zip(jobs, agent.score([req for _, req in jobs])):
            rewards[i].append(readout.reward)
    scored = iter(rewards)
    out = []
    for r in records:
        new = []
        for s in r["samples"]:
            *process, outcome = next(scored)
            new.append({**s, "rewards": process, "outcome": outcome})
        out.append({**r, "samples": new})
    return out


def rescore(run: Path, out: Path, reward_agent: str) -> int:
    """Rescore ``run`` into ``out``; returns the number of records written now."""
    config = json.loads((run / "config.json").read_text())
    records = list(read_records(run / "records.jsonl"))
    missing = [r["id"] for r in records if not r.get("samples")]
    if missing:
        raise ValueError(f"{run / 'records.jsonl'}: record {missing[0]!r} has no `samples` (made before "
                         f"pra eval kept every sampled trace, or by a method without samples)")
    questions = {q.id: q for q in load_eval_benchmark(config["benchmark"], limit=config.get("limit")).questions}
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({**config, "out": str(out), "rescored_by": reward_agent,
                                                 "rescored_from": str(run)}, indent=2))
    agent = load_reward_agent(reward_agent)
    written = 0
    with JsonlWriter(out / "records.jsonl") as writer:
        todo = [r for r in records if r["id"] not in writer.done]
        for s in range(0, len(todo), CHUNK):
            for record in rescore_records(todo[s:s + CHUNK], questions, agent):
                writer.write(record)
                written += 1
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a pra eval output folder whose records keep `samples`")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--reward-agent", default="pra-smollm2-cpu")
    a = ap.parse_args()
    print(f"{rescore(a.run, a.out, a.reward_agent)} records rescored into {a.out / 'records.jsonl'}")


if __name__ == "__main__":
    main()
