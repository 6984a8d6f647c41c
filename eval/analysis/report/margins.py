"""Figures 4 and 5: where search matters. Mean |dm| (the judge's margin shift from documents) by a
step's relative position in its trace and by its question's difficulty, split by whether the trace's
answer was correct; from a labelled data file (``training/label.py``'s labels.jsonl and the
traces.jsonl beside it, which holds each trace's answer)."""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from eval.analysis import palette
from eval.analysis.report.figures import plt, save_plot
from eval.analysis.report.markdown import Section, mean_se, table
from pra.records import read_records
from pra.errors import MissingFile, UserError

POSITION_BINS = 4
# Difficulty from the policy's own rollouts: share of a question's rollout answers that are gold.
DIFFICULTY = (("easy", 2 / 3), ("medium", 1 / 3), ("hard", 0.0))     # (name, solve rate at least)
LABEL_FIELDS = ("question_id", "trace", "step_index", "gold", "dm")


@dataclass(frozen=True)
class LabelledStep:
    question_id: str
    trace: int
    step_index: int          # 1-based
    dm: float
    rollout_answers: tuple[str, ...]
    gold: str


def load_labels(path: Path) -> tuple[list[LabelledStep], dict[tuple[str, int], str | None]]:
    """The labelled steps and each trace's answer; ``path`` is labels.jsonl or its folder."""
    labels = path / "labels.jsonl" if path.is_dir() else path
    traces = labels.parent / "traces.jsonl"
    if not labels.exists():
        raise MissingFile(f"{labels}: no labels file")
    if not traces.exists():
        raise MissingFile(f"{traces}: the trace answers are needed beside {labels.name}")
    steps = []
    for i, r in enumerate(read_records(labels), 1):
        for key in LABEL_FIELDS:
            if r.get(key) is None:
                raise UserError(f"{labels}: record {i}: field {key!r} missing")
        steps.append(LabelledStep(r["question_id"], int(r["trace"]), int(r["step_index"]), float(r["dm"]),
                                  tuple(r.get("rollout_answers") or ()), r["gold"]))
    answers = {}
    for i, r in enumerate(read_records(traces), 1):
        if "id" not in r or "traces" not in r:
            raise UserError(f"{traces}: record {i}: fields 'id' and 'traces' needed")
        for t, tr in enumerate(r["traces"]):
            answers[(r["id"], t)] = tr.get("answer")
    return steps, answers


@dataclass(frozen=True)
class Bin:
    name: str
    correct: tuple[float, ...]      # |dm| of steps in traces that answered correctly
    incorrect: tuple[float, ...]


def _split(items: Iterable[tuple[str, LabelledStep]], names: Sequence[str],
           answers: dict[tuple[str, int], str | None]) -> list[Bin]:
    good, bad = defaultdict(list), defaultdict(list)
    for name, s in items:
        (good if answers.get((s.question_id, s.trace)) == s.gold else bad)[name].append(abs(s.dm))
    return [Bin(n, tuple(good[n]), tuple(bad[n])) for n in names]


def by_position(steps: list[LabelledStep], answers: dict[tuple[str, int], str | None],
                bins: int = POSITION_BINS) -> list[Bin]:
    """Relative position = step index / the trace's number of labelled steps, in ``bins`` equal bins."""
    length: dict[tuple[str, int], int] = defaultdict(int)
    for s in steps:
        length[(s.question_id, s.trace)] = max(length[(s.question_id, s.trace)], s.step_index)
    names = [f"{k / bins:.2f}–{(k + 1) / bins:.2f}" for k in range(bins)]
    placed = ((names[min(bins - 1, math.ceil(s.step_index / length[(s.question_id, s.trace)] * bins) - 1)], s)
              for s in steps)
    return _split(placed, names, answers)


def solve_rates(steps: list[LabelledStep]) -> dict[str, float]:
    """Per question: share of all its steps' rollout answers that are gold (questions without rollouts
    are absent)."""
    hits, total = defaultdict(int), defaultdict(int)
    for s in steps:
        hits[s.question_id] += sum(a == s.gold for a in s.rollout_answers)
        total[s.question_id] += len(s.rollout_answers)
    return {q: hits[q] / total[q] for q in total if total[q]}


def by_difficulty(steps: list[LabelledStep], answers: dict[tuple[str, int], str | None]) -> list[Bin]:
    rates = solve_rates(steps)
    level = lambda rate: next(name for name, low in DIFFICULTY if rate >= low)
    placed = ((level(rates[s.question_id]), s) for s in steps if s.question_id in rates)
    return _split(placed, [name for name, _ in DIFFICULTY], answers)


def _figure(bins: list[Bin], xlabel: str, title: str, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(5, 3.5))
    xs = range(len(bins))
    for attr, mark, shift in (("correct", palette.CORRECT, -0.05), ("incorrect", palette.INCORRECT, 0.05)):
        stats = [mean_se(getattr(b, attr)) for b in bins]
        pts = [(x + shift, st) for x, st in zip(xs, stats) if st]
        ax.errorbar([p[0] for p in pts], [p[1][0] for p in pts], yerr=[p[1][1] for p in pts],
                    marker="o", capsize=3, label=f"{mark.name} traces", color=mark.color)
    ax.set_xticks(list(xs), [b.name for b in bins], fontsize=8)
    save_plot(fig, ax, xlabel, "mean |dm|", title, path)


def _rows(bins: list[Bin]) -> list[list[str]]:
    fmt = lambda st, xs: f"{st[0]:.3f} ± {st[1]:.3f} (n={len(xs)})" if st else "—"
    return [[b.name, fmt(mean_se(b.correct), b.correct), fmt(mean_se(b.incorrect), b.incorrect)] for b in bins]


def margin_figures(labels: Path | None, out: Path) -> list[Section]:
    fig4 = Section("Figure 4: mean |dm| by relative step position")
    fig5 = Section("Figure 5: mean |dm| by question difficulty")
    if labels is None:
        for sec in (fig4, fig5):
            sec.missing.append("a labelled data file: `pra report ... --labels runs/labels-cpu` "
                               "(made by `pra label --recipe cpu`)")
        return [fig4, fig5]
    steps, answers = load_labels(labels)
    source = f"From `{labels}`: {len(steps)} labelled steps of {len({s.question_id for s in steps})} questions."
    position = by_position(steps, answers)
    _figure(position, "relative step position (step / trace length)", "mean |dm| by position", out / "fig4-position.png")
    fig4.body += [source, "![position](fig4-position.png)", table(["position", "correct traces", "incorrect traces"],
                                                                 _rows(position))]
    difficulty = by_difficulty(steps, answers)
    if not any(b.correct or b.incorrect for b in difficulty):
        fig5.missing.append(f"rollout answers in `{labels}` (difficulty is the share of a question's "
                            "rollouts reaching gold; label with the rollout teacher)")
        return [fig4, fig5]
    _figure(difficulty, "question difficulty (policy rollouts' solve rate)", "mean |dm| by difficulty",
            out / "fig5-difficulty.png")
    fig5.body += [source + " Difficulty: easy if at least 2/3 of the question's rollout answers are gold, "
                  "hard if under 1/3.", "![difficulty](fig5-difficulty.png)",
                  table(["difficulty", "correct traces", "incorrect traces"], _rows(difficulty))]
    return [fig4, fig5]
