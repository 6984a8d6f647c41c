"""The report's figures (PNG, matplotlib's Agg backend: no display needed) and the numbers behind them."""
from __future__ import annotations

import math
import textwrap
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.ticker import MaxNLocator  # noqa: E402

from eval.analysis import palette  # noqa: E402
from eval.analysis.report.markdown import Section, accuracy, eval_command, table  # noqa: E402
from eval.analysis.report.runs import Run  # noqa: E402
from pra.errors import UserError


@dataclass(frozen=True)
class Point:
    x: float
    acc: float
    stderr: float
    n: int


def save_plot(fig, ax, xlabel: str, ylabel: str, title: str, path: Path) -> None:
    """Label a report plot and save it beside the report."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(textwrap.fill(title, 60, break_on_hyphens=False), fontsize=9)      # long run names wrap rather than leave the figure
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _finish(fig, ax, xlabel: str, title: str, path: Path, sec: Section) -> None:
    """Save an accuracy plot and link it from the section."""
    save_plot(fig, ax, xlabel, "accuracy", title, path)
    sec.body.append(f"![{title}]({path.name})")


def _slug(*parts: str) -> str:
    return "-".join("".join(c if c.isalnum() or c in "-." else "_" for c in p) for p in parts)


def _binomial(correct: Sequence[bool]) -> tuple[float, float]:
    n = len(correct)
    acc = sum(correct) / n
    return acc, math.sqrt(acc * (1 - acc) / n)


def vote_curve(run: Run) -> list[Point]:
    """Self-consistency accuracy when voting over only the first k saved samples, k = 1..K. Ties go to
    the earliest answer, as the engine's vote does. Needs every record to keep all K answers."""
    k_max = run.width
    records = run.records
    if any(len(r.get("answers", [])) != k_max for r in records):
        raise UserError(f"{run.path}: records do not keep all {k_max} sampled answers")
    points = []
    for k in range(1, k_max + 1):
        correct = [Counter(r["answers"][:k]).most_common(1)[0][0] == r["gold"] for r in records]
        acc, se = _binomial(correct)
        points.append(Point(k, acc, se, len(records)))
    return points


def samples_figure(runs: list[Run], out: Path) -> Section:
    """Figure 2: accuracy against samples per question: SC voting over k of its samples (a band of ±1
    standard error) and always-search PRA at B x b candidates per step, a line per reward agent."""
    sec = Section("Figure 2: accuracy vs number of samples (SC vs PRA at matching B x b)")
    groups: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for r in runs:
        if r.method in ("sc", "rag-sc", "pra"):
            groups[(r.benchmark, r.policy)].append(r)
    rows = []
    for (bench, policy), rs in sorted(groups.items()):
        sc = [r for r in rs if r.method in ("sc", "rag-sc")]
        pra = [r for r in rs if r.method == "pra" and r.controller == "always" and not r.variant]  # the paper's
        if not sc:
            sec.missing.append(f"sc for {policy} on {bench}: {eval_command(bench, policy, 'sc', '--samples 16', 'sc-k16')}")
        if not pra:
            sec.missing.append(f"pra for {policy} on {bench}: "
                               f"{eval_command(bench, policy, 'pra', '--recipe pra-cpu --beam-width 2 --branching 2', 'pra-B2-b2')}")
        fig, ax = plt.subplots(figsize=(5, 3.5))
        for r in sc:
            try:
                curve = vote_curve(r)
            except ValueError as err:
                sec.missing.append(str(err))
                continue
            xs, ys = [p.x for p in curve], [p.acc for p in curve]
            ax.plot(xs, ys, marker="o", label=r.label)
            ax.fill_between(xs, [p.acc - p.stderr for p in curve], [p.acc + p.stderr for p in curve], alpha=0.2)
            rows += [[bench, policy, r.label, p.x, accuracy(p.acc, p.stderr, p.n)] for p in curve]
        by_agent: dict[str, list[Run]] = defaultdict(list)
        for r in pra:
            by_agent[r.reward_agent].append(r)
        for agent, line in sorted(by_agent.items()):
            line.sort(key=lambda r: r.width)
            accs, errs = [r.summary["accuracy"] for r in line], [r.summary["stderr"] for r in line]
            kind = "trained" if line[0].trained else "untrained"
            ax.errorbar([r.width for r in line], accs, yerr=errs, fmt="s-", capsize=3,
                        label=f"pra ({kind} {agent}, search always)")
            rows += [[bench, policy, r.label, r.width, accuracy(r.summary["accuracy"], r.summary["stderr"],
                                                                r.summary["n"])] for r in line]
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        _finish(fig, ax, "samples per question (SC: k; PRA: B x b per step)", f"{policy} on {bench}",
                out / f"fig2-{_slug(bench, policy)}.png", sec)
    if not groups:
        sec.missing.append("no sc or pra runs")
        return sec
    sec.body.append(table(["benchmark", "policy", "run", "samples", "accuracy"], rows))
    sec.body.append("SC points vote over the first k of each question's saved samples (prefixes of one "
                    "sampled set, not independent runs).")
    return sec


def pareto(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats: none has at most as many searches and higher
    accuracy, or fewer searches and at least the accuracy."""
    keep = []
    for i, (s, a) in enumerate(points):
        if not any((s2 <= s and a2 > a) or (s2 < s and a2 >= a) for j, (s2, a2) in enumerate(points) if j != i):
            keep.append(i)
    return sorted(keep, key=lambda i: points[i])


def theta_of(run: Run) -> float | None:
    name, _, arg = run.controller.partition(":")
    return float(arg or 0.5) if name == "threshold" else None


def tradeoff_figure(runs: list[Run], out: Path) -> Section:
    """Figure 3: searches per question against accuracy (± s.e.) over θ_dep; other controllers
    (always, never, sample, probes) as single points. The Pareto frontier runs over every point, so a
    threshold that never searching matches at no searches is off it. One figure per benchmark,
    policy, agent and variant (reward aggregation, corpus): only the controller varies along a curve."""
    sec = Section("Figure 3: search-accuracy trade-off over θ_dep")
    groups: dict[tuple[str, str, str, str], list[Run]] = defaultdict(list)
    for r in runs:
        if r.method == "pra":
            groups[(r.benchmark, r.policy, r.reward_agent, r.variant)].append(r)
    rows = []
    for (bench, policy, agent, variant), rs in sorted(groups.items()):
        thresholds = sorted((r for r in rs if theta_of(r) is not None), key=theta_of)
        others = [r for r in rs if theta_of(r) is None]
        if len(thresholds) < 2:
            sec.missing.append(
                f"threshold runs for {policy} with {agent} on {bench} (have {len(thresholds)}), for θ in "
                "0.1 0.3 0.5 0.7 0.9: " + eval_command(bench, policy, "pra", f"--recipe pra-cpu --reward-agent {agent} "
                                                       "--search threshold:$θ", "pra-threshold-$θ"))
        pts = [(r.summary["searches_per_question"], r.summary["accuracy"]) for r in thresholds + others]
        front = set(pareto(pts))
        fig, ax = plt.subplots(figsize=(5, 3.5))
        if thresholds:
            ax.errorbar([p[0] for p in pts[:len(thresholds)]], [p[1] for p in pts[:len(thresholds)]],
                        yerr=[r.summary["stderr"] for r in thresholds],
                        fmt="o", capsize=3, color=palette.SEARCHED.color, label="threshold:θ")
            for r, (s, a) in zip(thresholds, pts):
                ax.annotate(f"θ={theta_of(r):g}", (s, a), fontsize=7, xytext=(3, 3), textcoords="offset points")
        for r in others:
            s = r.summary
            never = {"color": palette.NOT_SEARCHED.color} if r.controller == "never" else {}
            ax.errorbar([s["searches_per_question"]], [s["accuracy"]], yerr=[s["stderr"]], fmt="^", capsize=3,
                        label=f"search {r.controller}", **never)
        fp = sorted(pts[i] for i in front)
        if len(fp) > 1:
            ax.plot([p[0] for p in fp], [p[1] for p in fp], "-", color="tab:red", label="Pareto frontier")
        suffix = (variant.replace(", ", "-").replace(" ", "-"),) if variant else ()
        title = f"{policy} on {bench}, agent {agent}" + (f", {variant}" if variant else "")
        _finish(fig, ax, palette.SEARCHES, title, out / f"fig3-{_slug(bench, policy, agent, *suffix)}.png", sec)
        for i, r in enumerate(thresholds + others):
            s = r.summary
            rows.append([bench, policy, agent, variant or "default", r.controller, f"{s['searches_per_question']:.2f}",
                         accuracy(s["accuracy"], s["stderr"], s["n"]), "yes" if i in front else ""])
    if not groups:
        sec.missing.append("no pra runs")
        return sec
    sec.body.append(table(["benchmark", "policy", "agent", "variant", "search", "searches / q", "accuracy", "Pareto"], rows))
    return sec
