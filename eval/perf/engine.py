"""Engine benchmark: ``pra perf engine`` (``--model`` and ``--backend`` for other sizes and paths:
``--model qwen2.5-coder-0.5b-instruct --backend llamacpp``).

From one run on 16 medmcqa-eval questions (B=2, b=4, at most 3 steps, greedy, the model as policy and as
untrained reward agent on the same backend, never-search so that policy and scoring dominate):
  1. the stage-batched queue against the same engine fed one question at a time (same answers?);
  2. the batched run without prefix caching (every prompt computed from its first token);
  3. prefix-reused reward scoring against naive scoring, replaying the scoring requests of a sampled run
     on half the questions (greedy siblings are identical and scored once, so they share nothing);
  4. the share of wall time spent outside backend calls;
  5. peak memory.
"""
from __future__ import annotations

import argparse
import resource
import time
from dataclasses import replace

from pra.backends import load_policy
from pra.benchmarks import load_eval_benchmark
from pra.reward_agent import RewardAgent
from search.controllers import Never
from search.engine import Engine, SearchConfig, Trace


class Recording(RewardAgent):
    """The reward agent, keeping every batch of requests it scored (to replay them for timing)."""

    def __init__(self, backend):
        super().__init__(backend)
        self.batches = []

    def score(self, requests):
        self.batches.append(requests)
        return super().score(requests)


def timed_run(engine: Engine, questions, max_active: int) -> tuple[float, dict]:
    backends = {id(engine.policy): engine.policy, id(engine.reward_agent.backend): engine.reward_agent.backend}
    for b in backends.values():      # each run starts cold: no prefix cached by the run before
        b.clear_prefix_cache()
    before = sum(b.stats.seconds for b in backends.values())
    start = time.perf_counter()
    answers = {t.question.id: t.prediction for t in engine.run([Trace(q) for q in questions], max_active=max_active)}
    wall = time.perf_counter() - start
    inside = sum(b.stats.seconds for b in backends.values()) - before
    return wall, {"answers": answers, "outside": (wall - inside) / wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--questions", type=int, default=16)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--backend", default="transformers", choices=("transformers", "llamacpp"))
    args = ap.parse_args()
    questions = load_eval_benchmark("medmcqa-eval", limit=args.questions).questions
    options = {"batch_size": 64, "dtype": "float32"} if args.backend == "transformers" else {}  # exact: answers compared
    backend = load_policy(args.model, backend=args.backend, **options)
    agent = Recording(backend)
    config = SearchConfig(beam_width=2, branching=4, max_steps=3, step_tokens=32, temperature=0.0)
    engine = Engine(backend, config, reward_agent=agent, controller=Never())

    batched, info_b = timed_run(engine, questions, max_active=len(questions))
    single, info_s = timed_run(engine, questions, max_active=1)
    backend.share_prefix = False
    uncached, info_u = timed_run(engine, questions, max_active=len(questions))
    backend.share_prefix = True
    # Greedy siblings are identical (and scored once), so the scoring comparison replays the requests
    # of a sampled run, where the b candidates of a beam differ and share their prefix.
    agent.batches.clear()
    sampled = replace(config, temperature=0.7, top_p=0.95, seed=0)
    list(Engine(backend, sampled, reward_agent=agent, controller=Never()).run(
        [Trace(q) for q in questions[: len(questions) // 2]], max_active=len(questions)))
    requests = [r for batch in agent.batches for r in batch]
    same = info_b["answers"] == info_s["answers"]
    print(f"queue: {len(questions)} questions batched {batched:.1f} s, one at a time {single:.1f} s, "
          f"speed-up {single / batched:.2f}x (target >= 1.8x); identical answers: {same}")
    print(f"prefix caching (policy steps, forced answers, reward prompts): batched run without it "
          f"{uncached:.1f} s, speed-up {uncached / batched:.2f}x; identical answers: "
          f"{info_u['answers'] == info_b['answers']}")
    print(f"time outside backend calls: batched {info_b['outside']:.1%}, one at a time {info_s['outside']:.1%} "
          f"(target < 10%)")

    def score_time(share: bool) -> float:
        backend.share_prefix = share
        backend.clear_prefix_cache()
        start = time.perf_counter()
        for s in range(0, len(requests), 64):
            agent.score(requests[s:s + 64])
        return time.perf_counter() - start

    reused, naive = score_time(True), score_time(False)
    print(f"scoring {len(requests)} sampled candidate steps: prefix reuse {reused:.1f} s, naive {naive:.1f} s, "
          f"speed-up {naive / reused:.2f}x (target >= 1.5x)")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory {peak:.0f} MB")
    print(f"summary: queue {single / batched:.2f}x, prefix caching {uncached / batched:.2f}x, scoring prefix reuse {naive / reused:.2f}x, outside backends "
          f"{info_b['outside']:.1%}, same answers {same}, peak {peak:.0f} MB")


if __name__ == "__main__":
    main()
