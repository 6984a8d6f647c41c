"""``pra show``: one self-contained HTML page per run. Style, script and data are inlined (no server, no
network), and the page draws a question's tree only when it is selected, so a run of thousands of
questions loads as one list."""
from __future__ import annotations

import html
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from eval.analysis import palette
from eval.analysis.viewer.trees import RunTrees
from pra.redact import redact_config

TEMPLATE = Path(__file__).with_name("page.html")
PAGE = "viewer.html"      # the page's name inside the run folder when no --out is given


def page_data(trees: RunTrees) -> dict[str, Any]:
    """What the page's script reads: the run, its questions with their nodes (each with the palette's
    colour for its reward), and the text of every passage a step saw."""
    questions = [{**{k: v for k, v in asdict(q).items() if k != "nodes"},
                  "nodes": [{**asdict(n), "color": palette.reward_color(n.reward)} for n in q.nodes]}
                 for q in trees.questions]
    return {"title": f"pra show {trees.path}", "summary": trees.summary, "config": redact_config(trees.config),
            "palette": palette.palette(), "questions": questions, **method_marks(trees),
            "passages": {pid: list(p) for pid, p in trees.passages.items()}, "notes": trees.notes}


def method_marks(trees: RunTrees) -> dict[str, bool]:
    """What the page draws for this run's method: rewards, p(search) and the prune only where a reward
    agent scored the steps (pra), searches only where some step searched."""
    nodes = [n for q in trees.questions for n in q.nodes]
    scored = trees.config.get("method") == "pra" or any(n.reward is not None for n in nodes)
    return {"scored": scored, "searches": scored or any(n.searched for n in nodes)}


def render_page(trees: RunTrees) -> str:
    data = page_data(trees)
    # "<" escaped inside the JSON so no text in it can close the script element.
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")
    return (TEMPLATE.read_text(encoding="utf-8").replace("__PRA_TITLE__", html.escape(data["title"]))
            .replace("__PRA_DATA__", payload))


def write_page(trees: RunTrees, out: str | Path | None = None) -> Path:
    """Write the run's page (default: RUN/viewer.html) and return its path."""
    path = Path(out) if out else trees.path / PAGE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_page(trees), encoding="utf-8")
    return path
