"""Training-free step error scores on the same readouts as the probe, each oriented so that higher
should mean "more likely an error" (the evaluation still fixes each one's sign on validation):

- perplexity: exp of the step tokens' mean surprise;
- max_prob: minus the mean top next-token probability (a confident step scores low);
- entropy: mean next-token entropy;
- CoE-R and CoE-C (Chain-of-Embedding, Wang et al. 2025): on the step's mean-pooled state through all
  layers, magnitude changes M_l = ||h_l+1 - h_l|| / ||h_L - h_0|| and angle changes
  A_l = angle(h_l, h_l+1) / angle(h_0, h_L). CoE-R = mean(M) - mean(A); CoE-C = |mean_l M_l e^(i A_l)|.
  The paper finds both higher on correct answers, so the error scores are their negatives.
"""
from __future__ import annotations

import numpy as np

from pra.pulse.features import Trajectory

BASELINES = ("perplexity", "max_prob", "entropy", "coe_r", "coe_c")


def coe_scores(t: Trajectory) -> tuple[np.ndarray, np.ndarray]:
    """(CoE-R, CoE-C) per step; higher = a more confident, more likely correct step."""
    m = t.shift / np.maximum(t.end_shift[:, None], 1e-12)
    a = t.angle / np.maximum(t.end_angle[:, None], 1e-12)
    coe_r = m.mean(axis=1) - a.mean(axis=1)
    coe_c = np.abs((m * np.exp(1j * a)).mean(axis=1))
    return coe_r, coe_c


def baseline_scores(nll: np.ndarray, max_prob: np.ndarray, entropy: np.ndarray,
                    mean_trajectory: Trajectory) -> dict[str, np.ndarray]:
    coe_r, coe_c = coe_scores(mean_trajectory)
    return {"perplexity": np.exp(nll), "max_prob": -max_prob, "entropy": entropy,
            "coe_r": -coe_r, "coe_c": -coe_c}
