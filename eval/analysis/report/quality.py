"""Trajectory quality per method (files of ``pra runs quality``) and the reward agent's
error-injection sensitivity (the JSON of ``pra runs inject``)."""
from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

from eval.analysis.quality import CRITERIA
from eval.analysis.report.markdown import Section, mean_se, table
from pra.records import read_records
from pra.errors import MissingFile, UserError
from pra.models import DEFAULT_REWARD_AGENT

LINE_FIELDS = ("run", "method", "judge", "composite", "criteria")
SCORES = (*CRITERIA, "answer")


def _cell(xs: list[float]) -> str:
    mean, se = mean_se(xs)
    return f"{mean:.3f} ± {se:.3f}"


def quality_section(files: list[Path]) -> Section:
    """Per run (and judge): mean composite and each criterion, ± standard error over its records."""
    sec = Section("Trajectory quality per method (MedTraj)")
    if not files:
        sec.missing.append("quality files: `pra runs quality RUN_DIR --judge smollm2-135m-instruct --out "
                           "runs/quality/NAME.jsonl`, then `pra report ... --quality runs/quality/*.jsonl`")
        return sec
    groups: dict[tuple[str, str, str, str], list[dict]] = defaultdict(list)
    for path in files:
        if not path.exists():
            raise MissingFile(f"{path}: no quality file")
        for i, line in enumerate(read_records(path), 1):
            for key in LINE_FIELDS:
                if key not in line:
                    raise UserError(f"{path}: record {i}: field {key!r} missing")
            lacking = [k for k in SCORES if k not in line["criteria"]]
            if lacking:
                raise UserError(f"{path}: record {i}: field 'criteria' lacks {lacking[0]!r}")
            groups[(line["run"], line.get("policy") or "", line["method"], line["judge"])].append(line)
    rows = [[f"`{run}`", policy, method, judge, len(lines), _cell([l["composite"] for l in lines]),
             *(_cell([l["criteria"][k] for l in lines]) for k in SCORES)]
            for (run, policy, method, judge), lines in sorted(groups.items())]
    sec.body.append(table(["run", "policy", "method", "judge", "n", "composite", *SCORES], rows))
    sec.body.append("Mean ± standard error over the run's judged records. Each criterion is the judge's expected "
                    "0-9 digit / 9; hallucination is the ratio of made-up claims (lower is better; the composite "
                    "takes 1 - ratio); answer is the share of predictions matching gold. Composite weights: "
                    "`eval.analysis.quality.Weights`.")
    return sec


def _injection_result(path: Path) -> dict:
    try:
        result = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise UserError(f"{path}: cannot read ({err})") from None
    for key in ("reward_agent", "run", "traces", "modes", "all"):
        if key not in result:
            raise UserError(f"{path}: field {key!r} missing")
    for mode, m in [*result["modes"].items(), ("all", result["all"])]:
        for key in ("share", "n"):
            if key not in m:
                raise UserError(f"{path}: field {key!r} missing for mode {mode!r}")
    return result


def _share(m: dict) -> str:
    share, n = m["share"], m["n"]
    if share is None or not n:
        return "—"
    return f"{share:.3f} ± {math.sqrt(share * (1 - share) / n):.3f} (n {n})"


def injection_section(paths: list[Path]) -> Section:
    """Per injection mode: the share of injected errors each reward agent scored below the original, one
    column per result (e.g. the trained agent and its untrained backbone on the same traces)."""
    sec = Section("Error-injection sensitivity of the reward agent")
    if not paths:
        sec.missing.append(f"an injection result: `pra runs inject RUN_DIR --reward-agent {DEFAULT_REWARD_AGENT} "
                           "--out runs/quality/inject.json`, then `pra report ... --injection runs/quality/inject.json`")
        return sec
    results = [_injection_result(p) for p in paths]
    modes = list(dict.fromkeys(m for r in results for m in r["modes"]))
    rows = [[mode, *(_share(r["modes"][mode]) if mode in r["modes"] else "—" for r in results)] for mode in modes]
    rows.append(["**all**", *(_share(r["all"]) for r in results)])
    for r in results:
        sec.body.append(f"`{r['reward_agent']}` on {r['traces']} correct traces of `{r['run']}` (at least two steps "
                        f"each; seed {r.get('seed', '—')}).")
    sec.body.append("An injected error counts as caught when the agent's reward for the weakest injected step is "
                    "below its reward for the weakest original step it replaces (steps read in order, earlier ones "
                    "shown with their rewards, no documents); n counts the traces a mode applies to.")
    sec.body.append(table(["mode", *(f"`{r['reward_agent']}`: share scored lower" for r in results)], rows))
    return sec
