"""Assemble report.md (and its PNGs) from saved run folders and, optionally, a labelled data file,
trajectory-quality files and an error-injection result."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from eval.analysis.report.figures import samples_figure, tradeoff_figure
from eval.analysis.report.margins import margin_figures
from eval.analysis.report.markdown import table
from eval.analysis.report.quality import injection_section, quality_section
from eval.analysis.report.runs import load_runs
from eval.analysis.report.tables import against_baselines, agent_by_search, backbone_swap, methods_by_benchmark, reward_level


@dataclass
class ReportConfig:
    runs: list[Path]
    out: Path
    labels: Path | None = None
    first: int | None = None        # keep each benchmark's first N questions in every run
    quality: list[Path] = field(default_factory=list)    # eval.analysis.quality JSONL files
    injection: list[Path] = field(default_factory=list)  # eval.analysis.inject results (JSON), one per agent


def build_report(cfg: ReportConfig) -> Path:
    cfg.out.mkdir(parents=True, exist_ok=True)
    runs, notes = load_runs(cfg.runs, cfg.first)
    sections = [methods_by_benchmark(runs), against_baselines(runs), backbone_swap(runs), agent_by_search(runs), reward_level(runs),
                samples_figure(runs, cfg.out), tradeoff_figure(runs, cfg.out), *margin_figures(cfg.labels, cfg.out),
                quality_section(cfg.quality), injection_section(cfg.injection)]
    head = ["# pra report",
            f"Regenerated from saved records only ({len(runs)} runs"
            + (f", each cut to its benchmark's first {cfg.first} questions" if cfg.first else "") + ").",
            table(["run", "benchmark", "policy", "method", "n"],
                  [[f"`{r.path}`", r.benchmark, r.policy, r.label, len(r.records)] for r in runs])]
    if notes:
        head.append("\n".join(f"- {n}" for n in notes))
    path = cfg.out / "report.md"
    path.write_text("\n\n".join(head + [s.render() for s in sections]) + "\n")
    return path
