"""Detection metrics for step error scores (higher = more likely an error): AUROC, PR-AUC (average
precision), and F1 at a threshold chosen on validation by Youden's J (max TPR - FPR)."""
from __future__ import annotations

import numpy as np
from sklearn.metrics import average_precision_score, f1_score, roc_auc_score, roc_curve
from pra.errors import UserError


def _check(y: np.ndarray, what: str) -> None:
    if len(set(np.asarray(y).tolist())) < 2:
        raise UserError(f"{what} needs both error and correct steps; got {int(np.sum(y))} errors of {len(y)}")


def youden_threshold(y: np.ndarray, scores: np.ndarray) -> float:
    """The score threshold (flag when score >= it) that maximises TPR - FPR on these steps."""
    _check(y, "choosing a threshold")
    fpr, tpr, thresholds = roc_curve(y, scores)
    best = int(np.argmax(tpr - fpr))
    return float(min(thresholds[best], np.max(scores)))    # roc_curve's first threshold is +inf


def detection_metrics(y: np.ndarray, scores: np.ndarray, threshold: float) -> dict[str, float]:
    _check(y, "detection metrics")
    y = np.asarray(y)
    flagged = np.asarray(scores) >= threshold
    return {"n": int(len(y)), "positives": int(y.sum()),
            "auroc": float(roc_auc_score(y, scores)), "pr_auc": float(average_precision_score(y, scores)),
            "f1": float(f1_score(y, flagged, zero_division=0)), "flagged": float(flagged.mean()),
            "threshold": float(threshold)}
