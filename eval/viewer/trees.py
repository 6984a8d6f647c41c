"""A run's records as search trees. A PRA record's ``tree`` holds every candidate step the beam ranked:
its reward, action readout, search and passages, and whether the prune kept it; ``final`` says where
the final beam ended. A record without a tree (CoT, SC, RAG, PULSE) is drawn as the chain of its kept
steps. Question texts come from the run's benchmark, passage texts from its corpus."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.report.runs import load_run
from pra.errors import UserError
from pra.selection import by_record_id


@dataclass
class TreeNode:
    parent: int | None          # index of the step it extends; None for a first step
    depth: int                  # step number, from 1
    text: str
    reward: float | None
    action: float | None        # p(search)
    searched: bool
    doc_ids: list[str]
    score: float | None         # the trace's score when it was ranked
    kept: bool                  # survived the prune at its depth
    answer: str | None = None   # the answer the trace ends with (forced or written)
    final: bool = False         # in the final beam
    forced: bool = False        # its answer was read from the logits after the step limit
    chosen: bool = False        # the trace the prediction was taken from
    dropped: bool = False       # kept at its depth (it had answered), then pushed out by later candidates


@dataclass
class QuestionTree:
    id: str
    question: str
    options: dict[str, str]
    gold: str
    prediction: str | None
    correct: bool
    forced: bool
    searches: int
    nodes: list[TreeNode]


@dataclass
class RunTrees:
    path: Path
    config: dict[str, Any]
    summary: dict[str, Any]
    questions: list[QuestionTree]
    passages: dict[str, tuple[str, str]] = field(default_factory=dict)   # id -> (title, text)
    notes: list[str] = field(default_factory=list)                      # what could not be shown

    def title(self, doc_id: str, chars: int = 60) -> str:
        """The passage's title; its opening words where it has none (BioASQ snippets); its id if unknown."""
        title, text = self.passages.get(doc_id, (doc_id, ""))
        return title or (text[:chars] + "..." if len(text) > chars else text)


def _step_node(step: dict[str, Any], parent: int | None, depth: int, score: float | None, kept: bool) -> TreeNode:
    return TreeNode(parent, depth, step.get("text", ""), step.get("reward"), step.get("action"),
                    bool(step.get("searched")), list(step.get("doc_ids") or []), score, kept)


def record_nodes(record: dict[str, Any]) -> list[TreeNode]:
    """The record's search tree, its final beam marked with the answers it gave."""
    if "tree" not in record:
        nodes = [_step_node(s, i - 1 if i else None, i + 1, None, True) for i, s in enumerate(record.get("steps", []))]
        if nodes:
            last = nodes[-1]
            last.final = last.chosen = True
            last.answer, last.forced = record.get("prediction"), bool(record.get("forced"))
        return nodes
    nodes = []
    for n in record["tree"]:
        node = _step_node(n["step"], n["parent"], n["depth"], n["score"], n["kept"])
        node.answer = n["answer"]
        nodes.append(node)
    scores = record.get("scores") or [0.0] * len(record["final"])
    best = max(range(len(scores)), key=lambda i: scores[i]) if scores else None   # first of the highest, as the engine
    for i, (index, answer) in enumerate(zip(record["final"], record.get("answers", []))):
        node = nodes[index]
        node.final, node.chosen = True, i == best
        node.forced = node.answer is None      # it had no answer of its own when it was ranked
        node.answer = answer
    extended = {n.parent for n in nodes}     # a kept node without children had finished
    for i, node in enumerate(nodes):
        node.dropped = node.kept and not node.final and i not in extended
    return nodes


def _questions(config: dict[str, Any], where: Path) -> dict[str, Any]:
    from pra.benchmarks import load_benchmark

    try:
        return by_record_id(load_benchmark(config["benchmark"], skip_bad=True).questions)
    except (OSError, ValueError) as err:
        raise UserError(f"{where}: benchmark {config['benchmark']!r} cannot be read for the question texts ({err})") from None


def _passages(config: dict[str, Any], ids: set[str]) -> tuple[dict[str, tuple[str, str]], list[str]]:
    from corpora.builders import load_corpus

    if not ids:
        return {}, []
    corpus = config.get("corpus", "medcorp-mini")
    try:
        passages = load_corpus(corpus).passages
    except (OSError, ValueError) as err:
        return {}, [f"corpus {corpus!r} cannot be read, so passages show as ids ({err})"]
    return {p.id: (p.title, p.text) for p in passages if p.id in ids}, []


def load_trees(path: str | Path) -> RunTrees:
    """Every record of the run folder as a tree, in the order the run wrote them."""
    run = load_run(Path(path))
    questions = _questions(run.config, run.path / "config.json")
    summary_file = run.path / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else dict(run.summary)
    trees = []
    for r in run.records:
        q = questions.get(r["id"])
        trees.append(QuestionTree(
            r["id"], q.question if q else f"(question {r['id']} is not in {run.config['benchmark']})",
            dict(q.options) if q else {}, r.get("gold", q.answer if q else "?"), r.get("prediction"),
            bool(r["correct"]), bool(r.get("forced")), int(r.get("stats", {}).get("searches", 0)), record_nodes(r)))
    ids = {d for t in trees for n in t.nodes for d in n.doc_ids}
    passages, notes = _passages(run.config, ids)
    return RunTrees(run.path, run.config, summary, trees, passages, notes)
