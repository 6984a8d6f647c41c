"""The statistics the agent evaluation and the rule baselines share: AUROC from ranks, and a percentile
interval over resamples of whole questions (``training.evaluate_agent``, ``training.evidence_check``,
``training.label_quality``)."""
from __future__ import annotations

from collections import defaultdict
from typing import Callable

import numpy as np

from training.dataset import Example

BOOTSTRAP_RESAMPLES = 1000


def _auroc(y: np.ndarray, p: np.ndarray) -> float | None:
    """ROC AUC (sklearn's roc_auc_score, ties counted half) from average ranks: the bootstraps call it
    thousands of times."""
    from scipy.stats import rankdata

    positives = int(y.sum())
    if not 0 < positives < len(y):
        return None
    negatives = len(y) - positives
    ranks = rankdata(p)
    return float((ranks[y == 1].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def question_bootstrap(examples: list[Example], statistic: Callable[[np.ndarray], float | None],
                       resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> list[float] | None:
    """95% percentile interval of ``statistic(example indices)`` over resamples of whole questions
    (None when fewer than half the resamples define it, e.g. one class only, and from a single
    question, whose every resample is itself: a zero-width interval that would claim certainty)."""
    by_question: dict[str, list[int]] = defaultdict(list)
    for i, e in enumerate(examples):
        by_question[e.question_id].append(i)
    if len(by_question) < 2:
        return None
    groups = [np.array(g) for g in by_question.values()]
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(resamples):
        drawn = np.concatenate([groups[k] for k in rng.integers(len(groups), size=len(groups))])
        value = statistic(drawn)
        if value is not None:
            values.append(value)
    if len(values) < resamples / 2:
        return None
    return [float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))]
