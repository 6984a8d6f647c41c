"""A run's records as search trees. A PRA record's ``tree`` holds every candidate step the beam ranked:
its reward, action readout, search and passages, and whether the prune kept it; ``final`` says where
the final beam ended. A record without a tree (CoT, SC, RAG, PULSE) is drawn as the chain of its kept
steps. Question texts come from the run's benchmark, passage texts from its corpus."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.analysis.report.runs import load_run
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


class Malformed(ValueError):
    """A hand-edited or damaged record the viewer cannot draw; ``load_trees`` names its file and line."""


def _number(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Malformed(f"{what} must be a number, got {value!r:.40}")
    return value


def _list(value: Any, what: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise Malformed(f"{what} must be a list, got {value!r:.40}")
    return value


def _step_node(step: dict[str, Any], parent: int | None, depth: int, score: float | None, kept: bool) -> TreeNode:
    if not isinstance(step, dict):
        raise Malformed(f"a step must be an object, got {step!r:.40}")
    text = step.get("text", "")
    if not isinstance(text, str):
        raise Malformed(f"a step's text must be text, got {text!r:.40}")
    return TreeNode(parent, depth, text, _number(step.get("reward"), "a step's reward"),
                    _number(step.get("action"), "a step's action"), bool(step.get("searched")),
                    [str(d) for d in _list(step.get("doc_ids"), "a step's doc_ids")], _number(score, "a score"), kept)


def _index(value: Any, size: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < size:
        raise Malformed(f"{what} must be a node index from 0 to {size - 1}, got {value!r:.40}")
    return value


def record_nodes(record: dict[str, Any]) -> list[TreeNode]:
    """The record's search tree, its final beam marked with the answers it gave; a record that does not
    hold one (a value of the wrong type, an index out of range) raises ``Malformed``."""
    if "tree" not in record:
        nodes = [_step_node(s, i - 1 if i else None, i + 1, None, True)
                 for i, s in enumerate(_list(record.get("steps"), "steps"))]
        if nodes:
            last = nodes[-1]
            last.final = last.chosen = True
            last.answer, last.forced = record.get("prediction"), bool(record.get("forced"))
        return nodes
    nodes = []
    for i, n in enumerate(_list(record["tree"], "tree")):
        if not isinstance(n, dict):
            raise Malformed(f"tree node {i} must be an object, got {n!r:.40}")
        parent = None if n["parent"] is None else _index(n["parent"], i, f"tree node {i}'s parent")
        depth = n["depth"]
        if isinstance(depth, bool) or not isinstance(depth, int):
            raise Malformed(f"tree node {i}'s depth must be an integer, got {depth!r:.40}")
        node = _step_node(n["step"], parent, depth, n["score"], bool(n["kept"]))
        node.answer = None if n["answer"] is None else str(n["answer"])
        nodes.append(node)
    final = [_index(i, len(nodes), "final") for i in _list(record.get("final"), "final")]
    scores = [_number(x, "a score") for x in _list(record.get("scores"), "scores")] or [0.0] * len(final)
    best = max(range(len(scores)), key=lambda i: scores[i] or 0.0) if scores else None   # first of the highest, as the engine
    for i, (index, answer) in enumerate(zip(final, _list(record.get("answers"), "answers"))):
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


def _question_tree(r: dict[str, Any], questions: dict[str, Any], config: dict[str, Any]) -> QuestionTree:
    q = questions.get(str(r["id"]))
    searches = _number((r.get("stats") or {}).get("searches", 0), "stats.searches") or 0
    prediction = r.get("prediction")
    return QuestionTree(
        str(r["id"]), q.question if q else f"(question {r['id']} is not in {config['benchmark']})",
        dict(q.options) if q else {}, str(r.get("gold", q.answer if q else "?")),
        None if prediction is None else str(prediction), bool(r["correct"]), bool(r.get("forced")), int(searches),
        record_nodes(r))


def load_trees(path: str | Path) -> RunTrees:
    """Every record of the run folder as a tree, in the order the run wrote them."""
    run = load_run(Path(path))
    questions = _questions(run.config, run.path / "config.json")
    trees = []
    for n, r in enumerate(run.records, 1):
        try:
            trees.append(_question_tree(r, questions, run.config))
        except (Malformed, KeyError, TypeError, IndexError, ValueError, AttributeError) as err:
            why = str(err) if isinstance(err, Malformed) else f"field {err} missing" if isinstance(err, KeyError) else \
                f"{type(err).__name__}: {err}"
            raise UserError(f"{run.path / 'records.jsonl'}: record {n} (id {str(r.get('id'))[:60]!r}) cannot be "
                            f"drawn: {why}") from None
    summary_file = run.path / "summary.json"
    try:
        summary = json.loads(summary_file.read_text(encoding="utf-8")) if summary_file.exists() else dict(run.summary)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"{summary_file}: not valid JSON ({err}); delete it and `pra show` summarises the records") from None
    except (KeyError, TypeError, ValueError) as err:       # no summary.json, and records a summary cannot count
        raise UserError(f"{run.path / 'records.jsonl'}: the records cannot be summarised ({type(err).__name__}: {err}) "
                        "and there is no summary.json") from None
    if not isinstance(summary, dict):
        raise UserError(f"{summary_file}: expected a JSON object, got {type(summary).__name__}")
    ids = {d for t in trees for n in t.nodes for d in n.doc_ids}
    passages, notes = _passages(run.config, ids)
    return RunTrees(run.path, run.config, summary, trees, passages, notes)
