"""Which θ searches a given share of candidates? ``pra runs theta RUN...`` reads the p(search) a PRA
run's agent gave its candidates before any documents, from the saved search trees; no gold answer.

A threshold controller (``--search threshold:θ``) searches a candidate when p(search) ≥ θ, and where
p(search) sits depends on the policy that wrote the candidates: `pra-qwen05-goldprob-1k`'s median on
its held-out training prompts (the 1.5B's traces) is 0.58, on the 0.5B's candidates 0.39, so θ = 0.58
searched 5% of them. Read θ from a run of the policy it will steer: a few questions under ``--search
never`` or ``threshold:θ`` (any θ: a reading controller keeps the read it decided on, made before the
documents). A run that searched always read each p(search) after its documents and is refused.

The share is of the candidates read; a θ run's beams differ from an always run's, so its searches as a
share of always's come out near, not at, the share asked for.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from eval.analysis.compare import run_config, run_records
from pra.errors import UserError
from search.controllers import make_controller, parse_controller

SHARES = (0.25, 0.4, 0.5)


@dataclass(frozen=True)
class SearchReads:
    run: str
    controller: str              # the run's --search
    reads: np.ndarray            # p(search) of every candidate, read before documents
    searched: int                # of them, how many the run searched

    def theta(self, share: float) -> float:
        """The θ at which a ``share`` of these candidates reach p(search) ≥ θ."""
        return float(np.quantile(self.reads, 1 - share, method="higher"))

    def share_at(self, theta: float) -> float:
        return float(np.mean(self.reads >= theta))


def reads_before_documents(controller: str) -> bool:
    """Whether a run under ``controller`` kept, for its searched candidates too, the p(search) read before
    their documents (a controller that decides from the readout); its unsearched candidates never had any."""
    name = parse_controller(controller)[0]
    return name in ("always", "never", "threshold", "sample") and make_controller(controller).needs_readout


def _controller(run: Path) -> str:
    config = run_config(run)
    if config is None:
        raise UserError(f"{run / 'config.json'}: missing; the run's search controller is read from it")
    if not isinstance(config.get("search_controller"), str):
        raise UserError(f"{run / 'config.json'}: no search_controller (is {run} a PRA run?)")
    return config["search_controller"]


def _steps(run: Path, records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every candidate's step, checked: an error names the run and the record."""
    steps = []
    for n, r in enumerate(records, 1):
        tree = r.get("tree") if isinstance(r, dict) else None
        if not isinstance(tree, list):
            raise UserError(f"{run}: record {n} keeps no search tree (PRA runs keep one; CoT, SC and RAG do not)")
        for node in tree:
            step = node.get("step") if isinstance(node, dict) else None
            if (not isinstance(step, dict) or not isinstance(step.get("searched"), bool)
                    or not isinstance(step.get("action"), (int, float, type(None)))):
                raise UserError(f"{run}: record {n} (id {str(r.get('id'))[:60]!r}) has a tree node without "
                                "step.searched (true/false) and step.action (a number)")
            steps.append(step)
    return steps


def search_reads(run: Path) -> SearchReads:
    controller = _controller(run)
    steps = _steps(run, run_records(run))
    first = reads_before_documents(controller)
    reads = [s["action"] for s in steps if s["action"] is not None and (first or not s["searched"])]
    if not reads:
        raise UserError(f"{run}: no p(search) read before documents (--search {controller}: "
                        + ("every candidate was read after its search); " if steps else "no candidates); ")
                        + "run a few questions with --search never or threshold:θ")
    if not first and any(s["searched"] for s in steps):
        raise UserError(f"{run}: --search {controller} read its searched candidates after their documents, "
                        "so the unsearched ones alone would bias θ low; run a few questions with --search "
                        "never or threshold:θ")
    return SearchReads(str(run), controller, np.array(reads, dtype=float),
                       sum(s["searched"] for s in steps if s["action"] is not None))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="PRA run folders (records.jsonl with search trees)")
    ap.add_argument("--share", type=float, action="append",
                    help=f"a share of candidates to search (repeatable; default {', '.join(map(str, SHARES))})")
    args = ap.parse_args(argv)
    shares = tuple(args.share or SHARES)
    if any(not 0 < s <= 1 for s in shares):
        raise UserError(f"--share: each must be in (0, 1], got {', '.join(map(str, shares))}")
    results = [search_reads(run) for run in args.runs]
    print("| run | --search | candidates | searched | p(search) quartiles | "
          + " | ".join(f"θ for {s:.0%}" for s in shares) + " |")
    print("| --- " * (5 + len(shares)) + "|")
    for r in results:
        q1, q2, q3 = np.quantile(r.reads, [0.25, 0.5, 0.75])
        print(f"| {r.run} | {r.controller} | {len(r.reads)} | {r.searched / len(r.reads):.1%} | "
              f"{q1:.3f} / {q2:.3f} / {q3:.3f} | " + " | ".join(f"{r.theta(s):.3f}" for s in shares) + " |")
    last = results[-1]
    print(f"{len(results)} run(s); for {last.run}: --search threshold:{last.theta(shares[0]):.2f} searches "
          f"{last.share_at(round(last.theta(shares[0]), 2)):.0%} of its {len(last.reads)} candidates")


if __name__ == "__main__":
    main()
