"""PULSE detection evaluation: does a score flag the steps the teacher judged wrong?

Held-out steps come from policy traces on evaluation sets (medmcqa-eval in distribution; mmlu-med or
pubmedqa out of distribution). ``pra label`` refuses evaluation sets on purpose, so that they never
become training data; ``run_label(..., purpose="detection")`` (``pra probe label``) is the one explicit
way to label them, and marks its folder ``purpose: detection``: feature files built from it carry that mark and
``pra probe train`` refuses them.

Every score is evaluated on the same test steps: the probe at its own threshold, and each baseline
with its sign and Youden threshold fixed on the probe's validation questions (training questions).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from pra.pulse.baselines import BASELINES, baseline_scores
from pra.pulse.dataset import StepTable, load_features
from pra.pulse.metrics import detection_metrics, youden_threshold
from pra.pulse.probe import Probe
from pra.records import JsonlWriter, read_records
from pra.errors import MissingFile, UserError


def probe_name(p: Probe) -> str:
    return f"pulse {p.parts} {p.layers[0]}:{p.layers[1]} {p.pooling}"


def _baselines(t: StepTable) -> dict[str, np.ndarray]:
    return baseline_scores(t.nll, t.max_prob, t.entropy, t.trajectories["mean"])


def evaluate_detection(probe: Probe, train: StepTable, tests: dict[str, StepTable],
                       with_baselines: bool = True) -> list[dict[str, Any]]:
    """One row per (test set, score): n, positives, AUROC, PR-AUC, F1 at the validation threshold."""
    for t in (train, *tests.values()):
        if t.backbone != probe.backbone:
            raise UserError(f"{t.path}: steps of {t.backbone}, but the probe reads {probe.backbone}")
    val = train.subset(np.flatnonzero(np.isin(train.question_ids, probe.val_questions)))
    if not len(val):
        raise UserError(f"{train.path}: none of the probe's validation questions; give the features it was trained on")
    y_val = val.errors(probe.label)
    rows = []
    for name, test in tests.items():
        overlap = set(test.question_ids) & set(train.question_ids)
        if overlap:
            raise UserError(f"{test.path}: {len(overlap)} question(s) also in the training features")
        y = test.errors(probe.label)
        rows.append({"test": name, "score": probe_name(probe), "label": probe.label,
                     **detection_metrics(y, probe.score(test.trajectories[probe.pooling]), probe.threshold)})
        if with_baselines:
            on_val, on_test = _baselines(val), _baselines(test)
            for b in BASELINES:
                # The sign that ranks validation errors higher; then Youden's threshold there.
                sign = 1.0 if detection_metrics(y_val, on_val[b], 0.0)["auroc"] >= 0.5 else -1.0
                threshold = youden_threshold(y_val, sign * on_val[b])
                rows.append({"test": name, "score": b + ("" if sign > 0 else " (negated)"), "label": probe.label,
                             **detection_metrics(y, sign * on_test[b], threshold)})
    return rows


def write_rows(rows: list[dict[str, Any]], path: str | Path) -> None:
    """Append rows to a results file; a row already there (same test and score) is kept as it was."""
    with JsonlWriter(path) as writer:
        for r in rows:
            writer.write({"id": f"{r['test']}|{r['score']}", **r})


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| test steps | score | n | errors | AUROC | PR-AUC | F1 | flagged |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['test']} | {r['score']} | {r['n']} | {r['positives']} | {r['auroc']:.3f} | "
                     f"{r['pr_auc']:.3f} | {r['f1']:.3f} | {r['flagged']:.2f} |")
    return "\n".join(lines)


def load_rows(path: str | Path) -> list[dict[str, Any]]:
    if not Path(path).is_file():
        raise MissingFile(f"{path}: no results file (write one with `pra probe eval --results`)")
    return list(read_records(path))
