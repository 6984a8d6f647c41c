"""Trajectory features: how a step's pooled hidden state turns and grows from layer to layer.

Layer ``l`` is ``hidden_states[l]`` of a transformers forward pass: 0 is the embedding output, ``L``
the last block's output (after the final norm in Llama-style models, which is why the default
intervals stop short of it). A step's states are first reduced, for all layers, to a ``Trajectory``;
PULSE features for any interval [a, b] and the CoE baselines are read from it, so one extraction
serves every ablation.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from pra.errors import UserError

POOLINGS = ("last", "mean")      # the step's last token, or the mean over its tokens
PARTS = ("both", "angle", "magnitude")

# Mid-to-late intervals per backbone (layers counted as above); other backbones get default_layers().
DEFAULT_LAYERS: dict[str, tuple[int, int]] = {
    "smollm2-135m-instruct": (15, 27),   # 30 blocks
    "gemma3-270m": (9, 16),              # 18 blocks
}


def default_layers(backbone: str, n_layers: int) -> tuple[int, int]:
    """The registry's interval, else from the middle block to about nine tenths of the depth."""
    if backbone in DEFAULT_LAYERS:
        return DEFAULT_LAYERS[backbone]
    return n_layers // 2, n_layers - max(1, n_layers // 10)


def parse_layers(text: str) -> tuple[int, int]:
    """``"a:b"`` -> (a, b)."""
    try:
        a, b = (int(x) for x in text.split(":"))
    except ValueError:
        raise UserError(f"layer interval must be a:b (two integers), got {text!r}") from None
    return a, b


def check_layers(layers: tuple[int, int], n_layers: int) -> None:
    a, b = layers
    if not 0 <= a < b <= n_layers:
        raise UserError(f"layer interval {a}:{b} must satisfy 0 <= a < b <= {n_layers} (layers of this backbone)")


@dataclass(frozen=True)
class Trajectory:
    """Per step (first axis) and layer: norms ||h_l|| (L+1), angles between h_l and h_l+1 (L, radians),
    shifts ||h_l+1 - h_l|| (L), and the angle and shift from the first layer to the last (for CoE)."""
    norm: np.ndarray
    angle: np.ndarray
    shift: np.ndarray
    end_angle: np.ndarray
    end_shift: np.ndarray

    @property
    def n_layers(self) -> int:
        return self.angle.shape[-1]

    def take(self, rows) -> "Trajectory":
        """The trajectories of some steps (an index array or a slice)."""
        return Trajectory(*(getattr(self, f)[rows] for f in TRAJECTORY_FIELDS))


TRAJECTORY_FIELDS = ("norm", "angle", "shift", "end_angle", "end_shift")


def concat(ts: list[Trajectory]) -> Trajectory:
    return Trajectory(*(np.concatenate([getattr(t, f) for t in ts]) for f in TRAJECTORY_FIELDS))


def _angle(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    cos = torch.nn.functional.cosine_similarity(x, y, dim=-1, eps=1e-12)
    return torch.arccos(cos.clamp(-1.0, 1.0))


def trajectory(states: torch.Tensor) -> Trajectory:
    """``states``: [steps, L+1, d] pooled hidden states, one row per layer. Computed in float64 so that
    bf16 or float32 states give the same angles to many digits."""
    h = states.double()
    norm = h.norm(dim=-1)
    angle = _angle(h[:, :-1], h[:, 1:])
    shift = (h[:, 1:] - h[:, :-1]).norm(dim=-1)
    end_angle = _angle(h[:, 0], h[:, -1])
    end_shift = (h[:, -1] - h[:, 0]).norm(dim=-1)
    return Trajectory(*(t.cpu().numpy() for t in (norm, angle, shift, end_angle, end_shift)))   # states on a GPU too


def pulse_features(t: Trajectory, layers: tuple[int, int], parts: str = "both") -> np.ndarray:
    """[steps, k]: over the interval [a, b], the b - a angular changes between consecutive layers,
    then the b - a magnitude changes ||h_l+1|| - ||h_l|| (or only one of the two)."""
    if parts not in PARTS:
        raise UserError(f"parts must be one of {', '.join(PARTS)}, got {parts!r}")
    check_layers(layers, t.n_layers)
    a, b = layers
    blocks = []
    if parts in ("both", "angle"):
        blocks.append(t.angle[:, a:b])
    if parts in ("both", "magnitude"):
        blocks.append(t.norm[:, a + 1:b + 1] - t.norm[:, a:b])
    return np.concatenate(blocks, axis=1).astype(np.float32)
