"""Trajectory quality after MedTraj: ``pra runs quality RUN_DIR --judge MODEL --out OUT.jsonl [--first N]``.

An LLM judge grades a trace on five criteria (coherence, evidence support, hallucination ratio,
completeness, traceability), each read without generation as the expected value of a 0-9 digit under
the judge's next-token distribution (``choice_logprobs`` over the ten digits), so a hesitant judge
gives a graded score rather than a coin flip. With answer match (prediction == gold) they make one
composite value in [0, 1]; the hallucination ratio enters as 1 - ratio, since lower is better.

The marginal contribution of a step is the change of a value when the step is added to the trace so
far: of the composite (every prefix of the trace is judged), or of any prefix scorer's value, e.g. the
reward agent's reward. The empty trace is worth 0, so a trace's contributions sum to its value.

The command writes one JSON line per record of the run (append-only, resumable: records already in
OUT are skipped) with each criterion, the composite and the per-step contributions.
"""
from __future__ import annotations

import argparse
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from pra.benchmarks import load_eval_benchmark
from eval.analysis.report.runs import load_run
from pra.backends.base import LMBackend
from pra.prompts import format_question
from pra.records import JsonlWriter, read_records
from pra.steps import extract_answer
from pra.types import Message, Question
from pra.errors import UserError
from pra.selection import by_record_id

DIGITS = [str(d) for d in range(10)]
JUDGE_SYSTEM = "You are a medical expert who grades students' reasoning strictly."
JUDGE_HEAD = ("Below are a medical multiple-choice question, its correct answer and a student's step-by-step "
              "solution, with the evidence the student retrieved for a step where there is some. Grade the "
              "solution on the one criterion asked at the end.")
# What each criterion asks; 0 and 9 are the ends of the scale. The hallucination reading is a ratio.
CRITERIA = {
    "coherence": "Do the steps follow logically from one another, without contradictions or unexplained jumps? "
                 "0 = not at all, 9 = fully coherent.",
    "evidence": "How well is each claim supported by the evidence shown or by established medical knowledge? "
                "0 = unsupported, 9 = fully supported.",
    "hallucination": "What share of the solution's claims are made up or false (not in the question, the evidence "
                     "or established medical knowledge)? 0 = none of them, 9 = all of them.",
    "completeness": "Does the solution cover the reasoning needed to reach the correct answer? "
                    "0 = none of it, 9 = all of it.",
    "traceability": "Can each step be traced back to the question, the evidence or an earlier step? "
                    "0 = no step can, 9 = every step can.",
}


@dataclass(frozen=True)
class Weights:
    """Weights of the composite. Defaults: coherence 0.2, evidence 0.15, hallucination 0.15 (on
    1 - ratio), completeness 0.15, traceability 0.15, answer match 0.2; any non-negative weights with a
    positive sum work (they are normalised)."""
    coherence: float = 0.2
    evidence: float = 0.15
    hallucination: float = 0.15
    completeness: float = 0.15
    traceability: float = 0.15
    answer: float = 0.2

    def __post_init__(self) -> None:
        values = asdict(self)
        bad = [k for k, v in values.items() if not v >= 0]
        if bad or not sum(values.values()) > 0:
            raise UserError(f"composite weights must be non-negative with a positive sum, got {values}")


@dataclass(frozen=True)
class QualityConfig:
    weights: Weights = field(default_factory=Weights)
    max_doc_chars: int = 300         # of each retrieved passage shown to the judge
    chunk: int = 4                   # records judged per batch: what a stop loses at most


@dataclass(frozen=True)
class Scores:
    """One trace's criteria in [0, 1]; ``hallucination`` is the ratio (lower is better), ``answer`` 0 or 1."""
    coherence: float
    evidence: float
    hallucination: float
    completeness: float
    traceability: float
    answer: float


def composite(s: Scores, w: Weights = Weights()) -> float:
    """The weighted mean of the criteria, hallucination taken as 1 - ratio."""
    values = {**asdict(s), "hallucination": 1.0 - s.hallucination}
    weights = asdict(w)
    return sum(weights[k] * values[k] for k in weights) / sum(weights.values())


def expected_digit(logprobs: dict[str, float]) -> float:
    """E[d] / 9 under the judge's distribution over the digits 0-9 (renormalised over them)."""
    z = sum(math.exp(v) for v in logprobs.values())
    return sum(math.exp(v) * int(d) for d, v in logprobs.items()) / z / 9


def deltas(values: Sequence[float], empty: float = 0.0) -> list[float]:
    """The change each step brings, from the values of the trace after each step (the empty trace is
    worth ``empty``)."""
    return [b - a for a, b in zip([empty, *values], values)]


def marginal_contributions(steps: Sequence[str], value: Callable[[Sequence[str]], float],
                           empty: float = 0.0) -> list[float]:
    """value(steps[:k]) - value(steps[:k-1]) for each step k; ``value`` rates a trace prefix (e.g. a
    reward agent's reward for the prefix's last step, ``eval.analysis.inject.Scorer``)."""
    return deltas([value(steps[:k]) for k in range(1, len(steps) + 1)], empty)


@dataclass(frozen=True)
class JudgedTrace:
    """What the judge reads: the question, the steps with the passages retrieved for each, the answer."""
    question: Question
    steps: tuple[str, ...]
    answer: str | None
    evidence: tuple[tuple[tuple[str, str], ...], ...] = ()     # per step, (title, text) pairs

    def prefixes(self) -> list["JudgedTrace"]:
        """The trace after each step; a partial trace's answer is the last one its steps state."""
        out = []
        for k in range(1, len(self.steps) + 1):
            stated = [a for a in (extract_answer(s, self.question.letters) for s in self.steps[:k]) if a]
            answer = self.answer if k == len(self.steps) else (stated[-1] if stated else None)
            out.append(JudgedTrace(self.question, self.steps[:k], answer, self.evidence[:k]))
        return out


class QualityJudge:
    """Grades traces with any ``LMBackend``: one prompt per criterion, all in one batched call. The
    criterion comes last, so the prompts of one trace (and of its prefixes) share their opening. The
    judge is shown the correct answer, as the teacher judge of ``training/label.py``: a small judge
    cannot grade medical content without a reference."""

    def __init__(self, backend: LMBackend, config: QualityConfig = QualityConfig()):
        self.backend = backend
        self.config = config

    def prompts(self, t: JudgedTrace) -> list[str]:
        q = t.question
        lines = []
        for i, step in enumerate(t.steps, 1):
            lines.append(f"Step {i}: {step}")
            docs = t.evidence[i - 1] if i <= len(t.evidence) else ()
            lines += [f"  Evidence for step {i} [{j}] ({title}) {text[:self.config.max_doc_chars]}"
                      for j, (title, text) in enumerate(docs, 1)]
        head = "\n\n".join([JUDGE_HEAD, format_question(q), f"Correct answer: ({q.answer}) {q.options[q.answer]}",
                            "Student's solution:\n" + "\n".join(lines)])
        return [self.backend.render([Message("system", JUDGE_SYSTEM),
                                     Message("user", f"{head}\n\nCriterion: {ask}\nReply with one digit from 0 to 9.")])
                for ask in CRITERIA.values()]

    def score(self, traces: Sequence[JudgedTrace]) -> list[Scores]:
        prompts = [p for t in traces for p in self.prompts(t)]
        readings = iter(expected_digit(lp) for lp in self.backend.choice_logprobs(prompts, [DIGITS] * len(prompts)))
        return [Scores(**{c: next(readings) for c in CRITERIA}, answer=float(t.answer == t.question.answer))
                for t in traces]


# -- the command -----------------------------------------------------------------------------------

def _evidence(run: Path, config: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """The passages the records' steps retrieved, by id (the corpus is read only if some step searched)."""
    ids = {d for r in records for s in r["steps"] for d in s.get("doc_ids") or ()}
    if not ids:
        return {}
    from corpora.builders import load_corpus

    corpus = config.get("corpus", "medcorp-mini")
    found = {p.id: (p.title, p.text) for p in load_corpus(corpus).passages if p.id in ids}
    missing = sorted(ids - set(found))
    if missing:
        raise UserError(f"{run / 'records.jsonl'}: passage {missing[0]!r} is not in corpus {corpus!r}")
    return found


def _judged(r: dict[str, Any], q: Question, passages: dict[str, tuple[str, str]]) -> JudgedTrace:
    steps = [s for s in r["steps"] if s.get("text", "").strip()]      # an empty step only ends a trace
    return JudgedTrace(q, tuple(s["text"] for s in steps), r["prediction"],
                       tuple(tuple(passages[d] for d in s.get("doc_ids") or ()) for s in steps))


def check_resume(out: Path, **expected: str) -> None:
    """Refuse to append to a file made from other inputs (another run, another judge)."""
    for i, line in enumerate(read_records(out), 1):
        for key, value in expected.items():
            if line.get(key) != value:
                raise UserError(f"{out}: record {i} has {key} {line.get(key)!r}, not {value!r}; write to a new file")


def score_run(run: Path, judge: LMBackend, out: Path, first: int | None = None,
              config: QualityConfig = QualityConfig()) -> tuple[int, int]:
    """Judge the first ``first`` records of ``run`` (all by default) into ``out``; returns (written
    now, left out for having no steps)."""
    saved = load_run(run)
    run_config, records = saved.config, list(saved.records[:first])
    for i, r in enumerate(records, 1):
        for key in ("steps", "prediction", "gold"):
            if key not in r:
                raise UserError(f"{run / 'records.jsonl'}: record {i}: field {key!r} missing")
    questions = by_record_id(load_eval_benchmark(run_config["benchmark"]).questions)
    unknown = [r["id"] for r in records if r["id"] not in questions]
    if unknown:
        raise UserError(f"{run / 'records.jsonl'}: question {unknown[0]!r} is not in {run_config['benchmark']!r}")
    check_resume(out, run=str(run), judge=judge.name)
    passages = _evidence(run, run_config, records)
    qj = QualityJudge(judge, config)
    written = 0
    with JsonlWriter(out) as writer:
        judged = [(r, _judged(r, questions[r["id"]], passages)) for r in records if r["id"] not in writer.done]
        todo = [(r, t) for r, t in judged if t.steps]
        for s in range(0, len(todo), config.chunk):
            chunk = todo[s:s + config.chunk]
            started = time.perf_counter()
            scores = iter(qj.score([p for _, t in chunk for p in t.prefixes()]))
            seconds = (time.perf_counter() - started) / len(chunk)
            for r, t in chunk:
                prefix = [next(scores) for _ in t.steps]
                values = [composite(p, config.weights) for p in prefix]
                writer.write({"id": r["id"], "run": str(run), "method": saved.label, "policy": saved.policy,
                              "judge": judge.name, "correct": r["correct"], "steps": len(t.steps),
                              "criteria": {k: round(v, 4) for k, v in asdict(prefix[-1]).items()},
                              "composite": round(values[-1], 4), "prefix_composite": [round(v, 4) for v in values],
                              "marginal": [round(v, 4) for v in deltas(values)], "seconds": round(seconds, 3)})
                written += 1
    return written, len(judged) - len(todo)


def main(argv: list[str] | None = None) -> None:
    from pra.backends import load_policy

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a pra eval output folder (config.json, records.jsonl)")
    ap.add_argument("--judge", required=True, help="judge model: embedded name, hub id, or the served name")
    ap.add_argument("--out", type=Path, required=True, help="JSONL, one line per record (resumable)")
    ap.add_argument("--first", type=int, help="only the run's first N records")
    ap.add_argument("--backend", default="transformers", help="transformers | vllm | openai")
    ap.add_argument("--base-url", help="OpenAI-compatible server for --backend openai")
    a = ap.parse_args(argv)
    judge = load_policy(a.judge, backend=a.backend, **({"base_url": a.base_url} if a.backend == "openai" else {}))
    written, empty = score_run(a.run, judge, a.out, a.first)
    print(f"{written} records judged into {a.out}" + (f"; {empty} without steps left out" if empty else ""))


if __name__ == "__main__":
    main()
