"""Teachers' label quality against a stronger reference:
``pra agent label-quality LABELS.jsonl [MORE_LABELS.jsonl ...] [--questions 30] [--rollouts 16]``.

The reference of a state (a question and the steps so far) is the share of ``rollouts`` continuations
by the labels' policy that reach the gold answer, continuation j asked under cyclic rotation j mod n
of the options (equally many under each), so that a letter preference scores exactly 1/n and
averages out. A state that ends in an answer is its own outcome, as for the teachers. Each labelled
step k gets ref_k (after it) and ref_{k-1} (before it; the question alone for the first step), and
two reference labels:

  value  ref_k > 1/n: after the step the policy reaches gold more often than a letter guess would
  rise   ref_k > ref_{k-1}: the step moved the policy towards gold (what goldprob labels)

Per teacher in the file: the positive share of its label, its agreement with each reference label,
and the AUROC of its score (judge: m_docs; rollout: the share; goldprob: dp) against each, with a
95% interval from a bootstrap over questions (a question's steps share its trace); with more than one
teacher, each pair's AUROC difference with a paired interval (``auroc_differences``). The trivial
baselines: AUROC 0.5, and for agreement a constant label's (``*_constant_agreement`` beside the
reference). Over all steps, and over the steps that give no answer: an answering step is its own
outcome for the rollout and goldprob teachers and the reference alike, so it agrees there by
construction.

More labels files over the same traces (another teacher's ``pra label`` run in a folder that holds a
copy of the first one's traces.jsonl) add their teachers, step by step; the first file's teacher wins
where two hold the same one. The rollouts are kept beside the first file's labels in
``reference-r{rollouts}-s{seed}.jsonl`` (one record per question, resumable); the report goes to
stdout and ``label_quality.json``.
"""
from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from itertools import combinations
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from pra.errors import MissingFile, UserError
from pra.benchmarks import load_benchmark
from pra.records import JsonlWriter, read_records
from pra.selection import rotate
from pra.steps import extract_answer
from pra.types import Question
from training.config import LabelConfig
from training.bootstrap import _auroc, question_bootstrap
from training.label import LABEL_KEYS, RECORDED, _backend, continuations

SCORES = {"judge": "m_docs", "rollout": "soft_label", "goldprob": "goldprob_dp"}
REFERENCES = ("value", "rise")


def reference_shares(cfg: LabelConfig, policy, states: list[tuple[Question, tuple[str, ...]]],
                     rollouts: int) -> list[dict[str, Any]]:
    """Per state: the rollouts' answers under each rotation and the share that reaches gold."""
    out: list[dict[str, Any] | None] = [None] * len(states)
    starts, owners = [], []
    for s, (q, steps) in enumerate(states):
        answer = extract_answer(steps[-1], q.letters) if steps else None
        if answer:
            out[s] = {"steps": list(steps), "answers": [answer], "share": float(answer == q.answer)}
            continue
        for r in range(len(q.options)):
            starts.append((rotate(q, r), steps))
            owners.append(s)
    per_rotation = -(-rollouts // max((len(q.options) for q, _ in states), default=1))
    for s, asked, answers in zip(owners, (q for q, _ in starts),
                                 continuations(cfg, policy, starts, per_rotation) if starts else []):
        rec = out[s] or {"steps": list(states[s][1]), "answers": [], "hits": 0}
        rec["answers"].append({"rotation": asked.id, "answers": answers})
        rec["hits"] += sum(a == asked.answer for a in answers)
        out[s] = rec
    for rec in out:
        if "hits" in rec:
            rec["share"] = rec.pop("hits") / sum(len(a["answers"]) for a in rec["answers"])
    return out


def build_reference(folder: Path, questions: int | None, rollouts: int, seed: int, chunk: int = 2) -> dict:
    """The reference share of every state of the traces of the first ``questions`` questions (in the
    labelled benchmark's order) in ``folder`` (``pra label``'s: traces.jsonl, label_config.json), from
    (or added to) the reference file: {(question id, steps): share}. It needs the traces only, so it
    may run beside the labelling."""
    settings, traces = folder / "label_config.json", folder / "traces.jsonl"
    for needed in (settings, traces):
        if not needed.is_file():
            raise MissingFile(f"{needed}: pra label writes it (the policy to roll out, the traces)")
    data = {k: v for k, v in json.loads(settings.read_text()).items() if k not in RECORDED}
    cfg = replace(LabelConfig(**data), seed=seed)     # another seed: rotation 0 must not repeat the rollout teacher
    known = {q.id: q for q in load_benchmark(cfg.benchmark, limit=cfg.limit).questions}
    written = {r["id"]: r for r in read_records(traces)}     # in the order the traces finished
    chosen = [written[i] for i in known if i in written][:questions]
    path = folder / f"reference-r{rollouts}-s{seed}.jsonl"
    with JsonlWriter(path) as writer:
        todo = [r for r in chosen if r["id"] not in writer.done]
        policy = _backend(cfg.policy, cfg.backend, cfg.base_url, cfg.batch_size) if todo else None
        for s in range(0, len(todo), chunk):
            states, owner = [], []
            for r in todo[s:s + chunk]:
                prefixes = {tuple(t["steps"][:k]): None for t in r["traces"] for k in range(len(t["steps"]) + 1)}
                states += [(known[r["id"]], p) for p in prefixes]
                owner += [r["id"]] * len(prefixes)
            got = reference_shares(cfg, policy, states, rollouts)
            for r in todo[s:s + chunk]:
                writer.write({"id": r["id"], "states": [g for g, o in zip(got, owner) if o == r["id"]]})
            print(f"reference: {min(s + chunk, len(todo))}/{len(todo)} questions", flush=True)
    ids = {r["id"] for r in chosen}
    return {(rec["id"], tuple(st["steps"])): st["share"] for rec in read_records(path) if rec["id"] in ids
            for st in rec["states"]}


def quality(records: list[dict], shares: dict) -> dict[str, Any]:
    """The report (module docstring) for the labelled steps whose states the reference holds."""
    steps = []
    for r in records:
        before, after = tuple(r["steps"]), tuple(r["steps"]) + (r["step"],)
        if (r["question_id"], after) in shares:
            ref_k, ref_prev = shares[(r["question_id"], after)], shares[(r["question_id"], before)]
            steps.append({**r, "ref": ref_k, "value": int(ref_k > 1 / len(r["options"])),
                          "rise": int(ref_k > ref_prev),
                          "answering": extract_answer(r["step"], list(r["options"])) is not None})
    report: dict[str, Any] = {}
    for subset, chosen in (("all_steps", steps), ("steps_without_answer", [s for s in steps if not s["answering"]])):
        part: dict[str, Any] = {"steps": len(chosen), "questions": len({s["question_id"] for s in chosen})}
        if not chosen:
            report[subset] = part
            continue
        positive = {k: statistics.fmean(s[k] for s in chosen) for k in REFERENCES}
        part["reference"] = {"mean_share": round(statistics.fmean(s["ref"] for s in chosen), 4),
                             **{f"{k}_positive": round(p, 4) for k, p in positive.items()},
                             # the trivial baseline of a teacher's agreement: one constant label for every step
                             **{f"{k}_constant_agreement": round(max(p, 1 - p), 4) for k, p in positive.items()}}
        units = [SimpleNamespace(question_id=s["question_id"]) for s in chosen]
        ys = {ref: np.array([s[ref] for s in chosen]) for ref in REFERENCES}
        scores: dict[str, np.ndarray] = {}
        for teacher, key in LABEL_KEYS.items():
            have = [i for i, s in enumerate(chosen) if s.get(key) is not None]
            if len(have) < len(chosen):
                continue
            label = np.array([s[key] for s in chosen])
            score = scores[teacher] = np.array([s[SCORES[teacher]] for s in chosen], dtype=float)
            row: dict[str, Any] = {"positive": round(float(label.mean()), 4)}
            for ref, y in ys.items():
                auroc = _auroc(y, score)
                ci = question_bootstrap(units, lambda idx: _auroc(y[idx], score[idx]))
                row[ref] = {"agreement": round(float((label == y).mean()), 4),
                            "auroc": None if auroc is None else round(auroc, 4),
                            "auroc_ci95": None if ci is None else [round(c, 4) for c in ci]}
            part[teacher] = row
        if len(scores) > 1:
            part["auroc_differences"] = auroc_differences(ys, units, scores)
        report[subset] = part
    return report


def auroc_differences(ys: dict[str, np.ndarray], units: list, scores: dict[str, np.ndarray]) -> dict[str, Any]:
    """Each pair of teachers' AUROC difference against each reference label, with a paired bootstrap
    over questions (both AUROCs from the same resample): whether one teacher ranks steps better than
    another, not only each better than chance."""
    def difference(y: np.ndarray, a: np.ndarray, b: np.ndarray) -> float | None:
        pair = _auroc(y, a), _auroc(y, b)
        return None if None in pair else pair[0] - pair[1]

    out: dict[str, Any] = {}
    for a, b in combinations(reversed(list(scores)), 2):
        row = {}
        for ref, y in ys.items():
            d = difference(y, scores[a], scores[b])
            ci = question_bootstrap(units, lambda idx: difference(y[idx], scores[a][idx], scores[b][idx]))
            row[ref] = {"difference": None if d is None else round(d, 4),
                        "ci95": None if ci is None else [round(c, 4) for c in ci]}
        out[f"{a} - {b}"] = row
    return out


def merged_records(paths: list[Path]) -> list[dict]:
    """The first file's step records, each with the teacher fields the other files give the same step
    (same id, same steps); a step another file holds with other text means other traces: refused."""
    records = list(read_records(paths[0]))
    by_id = {r["id"]: r for r in records}
    for path in paths[1:]:
        for r in read_records(path):
            mine = by_id.get(r["id"])
            if mine is None:
                continue                                    # not labelled in the first file (yet)
            if (mine["steps"], mine["step"]) != (r["steps"], r["step"]):
                raise UserError(f"{path}: step {r['id']} is not {paths[0]}'s step {r['id']}; "
                                "files compared together must label the same traces (copy traces.jsonl)")
            for key, value in r.items():
                mine.setdefault(key, value)
    return records


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("labels", type=Path, nargs="+",
                        help="labels.jsonl from pra label (the first: traces.jsonl, label_config.json beside it); "
                             "more files over the same traces add their teachers")
    parser.add_argument("--reference-only", action="store_true", help="roll out the reference (from the traces) and stop")
    parser.add_argument("--questions", type=int, default=30, help="the first N questions the labels' traces hold, in the benchmark's order")
    parser.add_argument("--rollouts", type=int, default=16, help="per state, spread evenly over the rotations")
    parser.add_argument("--seed", type=int, default=1, help="of the reference rollouts (not the labels' own)")
    args = parser.parse_args(argv)
    missing = [] if args.reference_only else [str(p) for p in args.labels if not p.is_file()]
    if missing:
        raise MissingFile(f"no labels file {', '.join(missing)}")
    if args.rollouts < 1 or args.questions < 1:
        raise UserError("--rollouts and --questions must be >= 1")
    first = args.labels[0]
    shares = build_reference(first.parent, args.questions, args.rollouts, args.seed)
    if args.reference_only:
        return {"states": len(shares)}
    report = {"labels": [str(p) for p in args.labels], "rollouts": args.rollouts,
              **quality(merged_records(args.labels), shares)}
    (first.parent / "label_quality.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
