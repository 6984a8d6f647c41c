"""Post-hoc rewards for saved traces: ``pra runs rescore RUN --out OUT [--reward-agent NAME]``.

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
from typing import Any, Sequence

from pra.benchmarks import load_eval_benchmark
from pra.records import JsonlWriter, read_records
from pra.reward_agent import ScoreRequest, load_reward_agent
from pra.types import Question
from pra.errors import UserError
from pra.models import DEFAULT_REWARD_AGENT
from pra.selection import by_record_id

CHUNK = 8     # records scored per batch: what a stop loses at most


def prefix_rewards(agent, jobs: Sequence[tuple[Question, Sequence[str], int]]) -> dict[tuple[str, tuple[str, ...]], float]:
    """For each (question, steps, depth): the agent's reward for the last step of every prefix of at
    most ``depth`` steps, keyed by (question id, prefix). Read as during decoding, earlier steps shown
    with the rewards they got, but without documents; one batched call per depth."""
    rewards: dict[tuple[str, tuple[str, ...]], float] = {}
    for depth in range(1, max((d for *_, d in jobs), default=0) + 1):
        todo: dict[tuple[str, tuple[str, ...]], ScoreRequest] = {}
        for q, steps, d in jobs:
            key = (q.id, tuple(steps[:depth]))
            if depth <= d and key not in rewards:
                earlier = tuple(rewards[(q.id, key[1][:i])] for i in range(1, depth))
                todo[key] = ScoreRequest(q, key[1][:-1], earlier, key[1][-1])
        for key, readout in zip(todo, agent.score(list(todo.values()))):
            rewards[key] = readout.reward
    return rewards


def rescore_records(records: list[dict[str, Any]], questions: dict[str, Question], agent) -> list[dict[str, Any]]:
    """The records with ``rewards`` and ``outcome`` filled in for each sample, scored step by step: a
    step's prompt shows the rewards the earlier steps just got; the outcome is the final answer judged
    as one more step."""
    traces = [(questions[r["id"]], (*s["steps"], f"Therefore, the answer is ({s['answer']}).")) for r in records
              for s in r["samples"]]
    rewards = prefix_rewards(agent, [(q, steps, len(steps)) for q, steps in traces])
    scored = iter([rewards[(q.id, steps[:k])] for k in range(1, len(steps) + 1)] for q, steps in traces)
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
        raise UserError(f"{run / 'records.jsonl'}: record {missing[0]!r} has no `samples` (made before "
                         f"pra eval kept every sampled trace, or by a method without samples)")
    questions = by_record_id(load_eval_benchmark(config["benchmark"], limit=config.get("limit")).questions)
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
    ap.add_argument("--reward-agent", default=DEFAULT_REWARD_AGENT)
    a = ap.parse_args()
    print(f"{rescore(a.run, a.out, a.reward_agent)} records rescored into {a.out / 'records.jsonl'}")


if __name__ == "__main__":
    main()
