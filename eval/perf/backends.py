"""Backend benchmark: ``python -m eval.perf.backends``: transformers against vLLM, in one run.

1. The same PRA workload on both: 16 medmcqa-eval questions, B=2, b=4, at most 3 steps, greedy, SmolLM2
   as policy and as untrained reward agent, never-search (policy and scoring dominate). Prints policy
   decode tokens/s, reward readouts/s and wall time per backend, their ratios, and whether the two
   gave the same answers (both float32).
2. The ``pra-cpu`` recipe as a user runs it (the shipped agent, always-search, B=2, b=2, sampled) on a
   few questions per backend: seconds per question, the number the CPU default is chosen by.

vLLM spawns its engine process, hence the ``__main__`` guard; its engine start (and, the first time,
its torch compile) is timed apart from the workload.
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, replace

from pra.backends.base import LMBackend
from pra.benchmarks import load_eval_benchmark
from pra.reward_agent import RewardAgent
from search.controllers import Never
from search.engine import Engine, SearchConfig, Trace

WORKLOAD = SearchConfig(beam_width=2, branching=4, max_steps=3, step_tokens=32, temperature=0.0)


@dataclass
class Timing:
    seconds: float = 0.0
    tokens: int = 0      # policy: tokens decoded; agent: readouts (one per scored step)


class TimedPolicy:
    """Delegates to a backend, timing its ``generate`` calls and counting the tokens it decoded (greedy
    copies are decoded once, so the backend's own count is the one that matters)."""

    def __init__(self, backend: LMBackend):
        self.backend, self.timing = backend, Timing()

    def __getattr__(self, name):
        return getattr(self.backend, name)

    def generate(self, prompts, params, seeds=None):
        before, start = self.backend.stats.generated_tokens, time.perf_counter()
        out = self.backend.generate(prompts, params, seeds=seeds)
        self.timing.seconds += time.perf_counter() - start
        self.timing.tokens += self.backend.stats.generated_tokens - before
        return out


class TimedAgent(RewardAgent):
    def __init__(self, backend: LMBackend):
        super().__init__(backend)
        self.timing = Timing()

    def score(self, requests):
        start = time.perf_counter()
        out = super().score(requests)
        self.timing.seconds += time.perf_counter() - start
        self.timing.tokens += len(requests)
        return out


def load(backend: str, model: str) -> LMBackend:
    if backend == "vllm":
        from pra.backends.vllm_backend import VLLMBackend
        return VLLMBackend(model)
    from pra.backends.transformers_backend import TransformersBackend
    return TransformersBackend(model, batch_size=64, dtype="float32")


def workload(backend: str, model: str, questions) -> dict:
    start = time.perf_counter()
    base = load(backend, model)
    policy, agent = TimedPolicy(base), TimedAgent(load(backend, model) if backend == "vllm" else base)
    started = time.perf_counter() - start
    engine = Engine(policy, WORKLOAD, reward_agent=agent, controller=Never())
    start = time.perf_counter()
    traces = list(engine.run([Trace(q) for q in questions], max_active=len(questions)))   # a generator
    wall = time.perf_counter() - start
    return {"start": started, "wall": wall, "answers": {t.question.id: t.prediction for t in traces},
            "decode": policy.timing.tokens / policy.timing.seconds,
            "readouts": agent.timing.tokens / agent.timing.seconds,
            "split": (policy.timing.seconds, agent.timing.seconds,
                      wall - policy.timing.seconds - agent.timing.seconds),
            "counts": (policy.timing.tokens, agent.timing.tokens)}


def recipe_seconds(backend: str, n: int) -> float:
    """Seconds per question of the ``pra-cpu`` recipe on ``backend`` (policy and agent), parts loaded first."""
    import tempfile
    from eval.run import Parts, eval_config, run_eval

    with tempfile.TemporaryDirectory() as out:
        cfg = eval_config({"recipe": "pra-cpu", "backend": backend, "agent_backend": backend, "sample": n,
                           "out": out})
        parts = Parts().complete(cfg)
        start = time.perf_counter()
        run_eval(cfg, policy=parts.policy, reward_agent=parts.reward_agent, retriever=parts.retriever,
                 controller=parts.controller)
        return (time.perf_counter() - start) / n


def release(backend: str) -> None:
    """Stop vLLM's engines between phases: each holds its weights and a 2 GiB KV cache, and the recipe
    (agent as a LoRA request) starts an engine of its own, with LoRA on."""
    if backend == "vllm":
        from pra.backends.vllm_backend import shutdown_engines
        shutdown_engines()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=16)
    ap.add_argument("--recipe-questions", type=int, default=2, help="questions of the pra-cpu recipe per backend")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    args = ap.parse_args()
    questions = load_eval_benchmark("medmcqa-eval", limit=args.questions).questions
    runs, recipe = {}, {}
    for backend in ("transformers", "vllm"):
        runs[backend] = workload(backend, args.model, questions)
        release(backend)
        recipe[backend] = recipe_seconds(backend, args.recipe_questions)
        release(backend)
    tf, vl = runs["transformers"], runs["vllm"]
    for name, r in runs.items():
        print(f"{name:12s} start {r['start']:6.1f} s | workload {r['wall']:6.1f} s ({r['wall'] / len(questions):.2f} "
              f"s/question) | policy decode {r['decode']:7.1f} tok/s | reward readouts {r['readouts']:6.1f}/s")
        print(f"{'':12s} time in policy steps {r['split'][0]:.1f} s ({r['counts'][0]} tokens), reward scoring "
              f"{r['split'][1]:.1f} s ({r['counts'][1]} readouts), the rest (forced answers, queue) {r['split'][2]:.1f} s")
    same = sum(tf["answers"][k] == vl["answers"][k] for k in tf["answers"])
    print(f"vLLM / transformers: wall {tf['wall'] / vl['wall']:.2f}x faster, decode {vl['decode'] / tf['decode']:.2f}x, "
          f"readouts {vl['readouts'] / tf['readouts']:.2f}x; same answers {same}/{len(questions)}")
    print(f"pra-cpu recipe ({args.recipe_questions} questions, shipped agent, always-search): transformers "
          f"{recipe['transformers']:.1f} s/question, vllm {recipe['vllm']:.1f} s/question (target <= 5)")
    print(f"summary: vLLM/transformers wall {tf['wall'] / vl['wall']:.2f}x, decode {vl['decode'] / tf['decode']:.2f}x, "
          f"readouts {vl['readouts'] / tf['readouts']:.2f}x, same answers {same}/{len(questions)}, pra-cpu "
          f"{recipe['transformers']:.1f} vs {recipe['vllm']:.1f} s/question")


if __name__ == "__main__":
    main()
