"""The PULSE probe: an MLP (two hidden layers, 128 and 64) on trajectory features, trained with binary
cross-entropy weighted 3:1 towards errors (the paper's setting for about a quarter of positive steps),
early-stopped on the validation loss; its flag threshold is chosen on validation by Youden's J. Saved
as one file with everything needed to read a step the same way again: backbone, layer interval,
pooling, feature parts, feature standardisation, threshold, and the validation questions."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from pra.pulse.dataset import StepTable, split_questions
from pra.pulse.features import PARTS, POOLINGS, Trajectory, check_layers, default_layers, pulse_features
from pra.pulse.metrics import youden_threshold
from pra.errors import MissingFile, UserError


@dataclass
class ProbeConfig:
    layers: tuple[int, int] | None = None    # [a, b]; None: the backbone's default interval
    pooling: str = "last"                    # last | mean
    parts: str = "both"                      # both | angle | magnitude
    label: str = "judge"                     # judge | rollout: which teacher defines an error
    hidden: tuple[int, ...] = (128, 64)
    pos_weight: float = 3.0
    lr: float = 1e-3
    weight_decay: float = 1e-4
    batch_size: int = 64
    max_epochs: int = 300
    patience: int = 20                       # epochs without a better validation loss before stopping
    val_fraction: float = 0.2                # of the training questions
    seed: int = 0


def mlp(n_in: int, hidden: tuple[int, ...]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(n_in, width), nn.ReLU()]
        n_in = width
    return nn.Sequential(*layers, nn.Linear(n_in, 1))


@dataclass
class Probe:
    backbone: str
    layers: tuple[int, int]
    pooling: str
    parts: str
    label: str
    threshold: float
    mean: np.ndarray
    std: np.ndarray
    net: nn.Sequential
    hidden: tuple[int, ...]
    val_questions: list[str] = field(default_factory=list)
    history: dict[str, Any] = field(default_factory=dict)

    def features(self, t: Trajectory) -> np.ndarray:
        return pulse_features(t, self.layers, self.parts)

    @torch.no_grad()
    def score(self, t: Trajectory) -> np.ndarray:
        """p(error) for each step of ``t`` (trajectories pooled as this probe's ``pooling``)."""
        x = torch.from_numpy((self.features(t) - self.mean) / self.std)
        return torch.sigmoid(self.net(x).squeeze(-1)).numpy().astype(np.float64)

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {"backbone": self.backbone, "layers": list(self.layers), "pooling": self.pooling,
                "parts": self.parts, "label": self.label, "threshold": self.threshold,
                "hidden": list(self.hidden), "val_questions": list(self.val_questions), "history": self.history}
        torch.save({"meta": meta, "mean": torch.from_numpy(self.mean), "std": torch.from_numpy(self.std),
                    "state": self.net.state_dict()}, path)

    @classmethod
    def load(cls, path: str | Path) -> "Probe":
        path = Path(path)
        if not path.is_file():
            raise MissingFile(f"no probe file {path} (train one with `pra probe train`)")
        blob = torch.load(path, weights_only=True)
        meta = blob["meta"]
        for key in ("backbone", "layers", "pooling", "parts", "label", "threshold", "hidden"):
            if key not in meta:
                raise UserError(f"{path}: probe field '{key}' is missing")
        mean, std = blob["mean"].numpy(), blob["std"].numpy()
        net = mlp(len(mean), tuple(meta["hidden"]))
        net.load_state_dict(blob["state"])
        net.eval()
        return cls(**{**meta, "layers": tuple(meta["layers"]), "hidden": tuple(meta["hidden"])},
                   mean=mean, std=std, net=net)


def fit_mlp(x_train: np.ndarray, y_train: np.ndarray, x_val: np.ndarray, y_val: np.ndarray,
            cfg: ProbeConfig) -> tuple[nn.Sequential, dict[str, Any]]:
    """Train on standardised features (the caller standardises); keep the weights of the epoch with
    the lowest validation loss, stop after ``patience`` epochs without improvement."""
    torch.manual_seed(cfg.seed)
    net = mlp(x_train.shape[1], cfg.hidden)
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    loss_fn = nn.BCEWithLogitsLoss(pos_weight=torch.tensor(cfg.pos_weight))
    xt, yt = torch.from_numpy(x_train).float(), torch.from_numpy(y_train).float()
    xv, yv = torch.from_numpy(x_val).float(), torch.from_numpy(y_val).float()
    gen = torch.Generator().manual_seed(cfg.seed)
    best, best_state, best_epoch, losses = float("inf"), None, 0, []
    for epoch in range(cfg.max_epochs):
        net.train()
        for idx in torch.randperm(len(xt), generator=gen).split(cfg.batch_size):
            opt.zero_grad()
            loss_fn(net(xt[idx]).squeeze(-1), yt[idx]).backward()
            opt.step()
        net.eval()
        with torch.no_grad():
            val = float(loss_fn(net(xv).squeeze(-1), yv))
        losses.append(round(val, 5))
        if val < best - 1e-6:
            best, best_state, best_epoch = val, copy.deepcopy(net.state_dict()), epoch
        elif epoch - best_epoch >= cfg.patience:
            break
    net.load_state_dict(best_state)
    net.eval()
    return net, {"best_epoch": best_epoch, "epochs": len(losses), "val_loss": best, "val_losses": losses}


def train_probe(table: StepTable, cfg: ProbeConfig) -> Probe:
    """Split the table's questions into train / validation, fit, choose the threshold on validation."""
    if table.purpose != "train":
        raise UserError(f"{table.path} holds detection-only labels (evaluation traces); train on features "
                         "of `pra label` training labels")
    if cfg.pooling not in POOLINGS or cfg.parts not in PARTS:
        raise UserError(f"pooling must be one of {POOLINGS} and parts one of {PARTS}")
    n_layers = table.trajectories[cfg.pooling].n_layers
    layers = tuple(cfg.layers) if cfg.layers else default_layers(table.backbone, n_layers)
    check_layers(layers, n_layers)
    y = table.errors(cfg.label)
    x = pulse_features(table.trajectories[cfg.pooling], layers, cfg.parts)
    val_q = split_questions(table.question_ids, cfg.val_fraction, cfg.seed)
    is_val = np.isin(table.question_ids, list(val_q))
    for name, part in (("training", ~is_val), ("validation", is_val)):
        if len(set(y[part].tolist())) < 2:
            raise UserError(f"{table.path}: the {name} split has {int(y[part].sum())} error steps of "
                             f"{int(part.sum())} by the {cfg.label} teacher; it needs both kinds")
    mean, std = x[~is_val].mean(axis=0), x[~is_val].std(axis=0) + 1e-6
    z = ((x - mean) / std).astype(np.float32)
    net, history = fit_mlp(z[~is_val], y[~is_val], z[is_val], y[is_val], cfg)
    probe = Probe(table.backbone, layers, cfg.pooling, cfg.parts, cfg.label, 0.5, mean.astype(np.float32),
                  std.astype(np.float32), net, tuple(cfg.hidden), sorted(val_q),
                  {**history, "train_steps": int((~is_val).sum()), "val_steps": int(is_val.sum()),
                   "train_errors": int(y[~is_val].sum()), "val_errors": int(y[is_val].sum())})
    val = table.subset(np.flatnonzero(is_val))
    probe.threshold = youden_threshold(y[is_val], probe.score(val.trajectories[cfg.pooling]))
    return probe
