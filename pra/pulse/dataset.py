"""Step feature files: one JSON line per labelled step with its readouts, written from a labels file
(``pra label``, or ``pra probe label`` for detection-only labels on evaluation sets) and read back as
arrays. Append-only and resumable; a trace is read in one forward pass for all its steps.

A step's error label is 1 where the teacher judged it incorrect (``judge_label == 0``), or, with
``label="rollout"``, where its Monte-Carlo rollouts mostly missed the gold answer, or, with
``label="goldprob"``, where it did not raise the policy's permutation-averaged gold probability.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
from tqdm import tqdm

from pra.prompts import policy_messages
from pra.pulse.extract import StepReader, StepReadout, step_text
from pra.pulse.features import TRAJECTORY_FIELDS, Trajectory
from pra.records import JsonlWriter, read_records
from pra.types import Question
from pra.errors import MissingFile, UserError

LABELS = ("judge", "rollout", "goldprob")
PURPOSES = ("train", "detection")   # detection: labels of evaluation traces, never to train on


def labels_purpose(labels_path: Path) -> str:
    """What a labels file may be used for, from the ``purpose`` its folder's label_config.json records
    (``pra probe label`` writes "detection"; ``pra label`` writes none: training data)."""
    config = labels_path.parent / "label_config.json"
    purpose = json.loads(config.read_text()).get("purpose", "train") if config.exists() else "train"
    if purpose not in PURPOSES:
        raise UserError(f"{config}: field 'purpose' must be one of {', '.join(PURPOSES)}, got {purpose!r}")
    return purpose


def _field(record: dict, name: str, where: str) -> Any:
    if name not in record:
        raise UserError(f"{where}: field '{name}' is missing")
    return record[name]


def _traces(labels_path: Path) -> list[tuple[Question, list[dict]]]:
    """Label records grouped into traces, each with its steps in order, checked for consistency."""
    groups: dict[tuple[str, Any], list[dict]] = {}
    for n, r in enumerate(read_records(labels_path), 1):
        where = f"{labels_path}:{n}"
        for name in ("id", "question_id", "question", "options", "gold", "steps", "step", "step_index"):
            _field(r, name, where)
        groups.setdefault((r["question_id"], r.get("trace", 0)), []).append(r)
    out = []
    for (qid, trace), recs in groups.items():
        recs.sort(key=lambda r: r["step_index"])
        full = recs[-1]["steps"] + [recs[-1]["step"]]
        for r in recs:
            if r["steps"] + [r["step"]] != full[:r["step_index"]]:
                raise UserError(f"{labels_path}: step {r['id']} does not continue trace {qid}/{trace}")
        q = Question(qid, recs[0]["question"], recs[0]["options"], recs[0]["gold"], "labels")
        out.append((q, recs))
    return out


def _trajectory_json(t: Trajectory) -> dict[str, Any]:
    return {f: np.round(getattr(t, f)[0], 6).tolist() for f in TRAJECTORY_FIELDS}


def write_features(backend, labels_path: str | Path, out_path: str | Path, batch_size: int = 8) -> int:
    """Readouts for every labelled step (resuming where ``out_path`` stops); returns steps written."""
    labels_path = Path(labels_path)
    if not labels_path.exists():
        raise MissingFile(f"no labels file {labels_path}")
    purpose = labels_purpose(labels_path)
    reader = StepReader.from_backend(backend, batch_size)
    written = 0
    with JsonlWriter(out_path) as writer:
        todo = [(q, recs) for q, recs in _traces(labels_path) if any(r["id"] not in writer.done for r in recs)]
        for s in tqdm(range(0, len(todo), batch_size), desc="step features"):
            chunk = todo[s:s + batch_size]
            items = [step_text(backend.render(policy_messages(q, backend.has_chat_template), ""),
                               recs[-1]["steps"] + [recs[-1]["step"]]) for q, recs in chunk]
            for (q, recs), readouts in zip(chunk, reader.read(items, token_stats=True)):
                for r in recs:
                    writer.write(_record(r, readouts[r["step_index"] - 1], backend.name, purpose))
                    written += 1
    return written


def _record(r: dict, readout: StepReadout, backbone: str, purpose: str) -> dict[str, Any]:
    return {"id": r["id"], "question_id": r["question_id"], "trace": r.get("trace", 0),
            "step_index": r["step_index"], "purpose": purpose, "backbone": backbone,
            **{f"{k}_label": r.get(f"{k}_label") for k in LABELS},
            "tokens": readout.tokens, "nll": readout.nll, "max_prob": readout.max_prob, "entropy": readout.entropy,
            **{p: _trajectory_json(t) for p, t in readout.trajectories.items()}}


@dataclass
class StepTable:
    """A feature file as arrays, one row per step."""
    path: Path
    backbone: str
    purpose: str
    ids: list[str]
    question_ids: np.ndarray
    teacher: dict[str, np.ndarray]          # label name -> 1 correct / 0 incorrect / -1 missing
    trajectories: dict[str, Trajectory]     # pooling -> all steps
    nll: np.ndarray
    max_prob: np.ndarray
    entropy: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def errors(self, label: str) -> np.ndarray:
        """1 where the step is an error by the ``label`` teacher."""
        if label not in LABELS:
            raise UserError(f"label must be one of {', '.join(LABELS)}, got {label!r}")
        y = self.teacher[label]
        if (y < 0).any():
            raise UserError(f"{self.path}: {int((y < 0).sum())} steps lack field '{label}_label'")
        return 1 - y

    def subset(self, rows: np.ndarray) -> "StepTable":
        return StepTable(self.path, self.backbone, self.purpose, [self.ids[i] for i in rows],
                         self.question_ids[rows], {k: v[rows] for k, v in self.teacher.items()},
                         {p: t.take(rows) for p, t in self.trajectories.items()},
                         self.nll[rows], self.max_prob[rows], self.entropy[rows])


def load_features(path: str | Path) -> StepTable:
    path = Path(path)
    records = list(read_records(path))
    if not records:
        raise UserError(f"{path}: no step features (missing or empty file)")
    for name in ("backbone", "purpose"):
        values = {str(_field(r, name, f"{path}:{r.get('id')}")) for r in records}
        if len(values) > 1:
            raise UserError(f"{path}: field '{name}' differs between steps ({', '.join(sorted(values))})")
    array = lambda key: np.array([np.nan if r.get(key) is None else r[key] for r in records], dtype=np.float64)
    teacher = {k: np.array([-1 if r.get(f"{k}_label") is None else int(r[f"{k}_label"]) for r in records])
               for k in LABELS}
    trajectories = {}
    for pooling in ("last", "mean"):
        rows = [_field(r, pooling, f"{path}:{r['id']}") for r in records]
        trajectories[pooling] = Trajectory(*(np.array([row[f] for row in rows], dtype=np.float64)
                                             for f in TRAJECTORY_FIELDS))
    return StepTable(path, records[0]["backbone"], records[0]["purpose"], [r["id"] for r in records],
                     np.array([r["question_id"] for r in records]), teacher, trajectories,
                     array("nll"), array("max_prob"), array("entropy"))


def split_questions(question_ids: Iterable[str], fraction: float, seed: int) -> set[str]:
    """A seeded share of the distinct questions (validation): a question's steps stay on one side."""
    distinct = sorted(set(question_ids))
    rng = np.random.default_rng(seed)
    n = max(1, round(fraction * len(distinct)))
    return set(rng.permutation(distinct)[:n].tolist())
