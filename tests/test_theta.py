"""``pra runs theta``: the θ that searches a given share of candidates, read from a run's saved p(search)
reads made before any documents; on hand-made trees and on the committed Qwen runs."""
import json
from pathlib import Path

import pytest

from eval.analysis.theta import main, reads_before_documents, search_reads
from pra.errors import UserError

QWEN = Path(__file__).parent.parent / "eval" / "results" / "qwen" / "q05" / "medmcqa"


def write_run(folder: Path, controller: str, actions: list[tuple[float, bool]]) -> Path:
    """One record whose tree holds a candidate per (p(search), searched)."""
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"search_controller": controller}))
    tree = [{"parent": None, "depth": 1, "step": {"text": "...", "action": a, "searched": s}, "score": 0.5}
            for a, s in actions]
    (folder / "records.jsonl").write_text(json.dumps({"id": "q", "gold": "A", "correct": True, "tree": tree}) + "\n")
    return folder


@pytest.mark.parametrize("controller, first", [
    ("threshold:0.3", True), ("sample", True), ("always", False), ("never", False), ("rsus:0.5", False),
])
def test_only_a_reading_controller_keeps_the_read_before_documents_for_its_searched_candidates(controller, first):
    assert reads_before_documents(controller) is first


def test_theta_is_the_quantile_that_searches_the_share_asked_for(tmp_path):
    run = search_reads(write_run(tmp_path / "th", "threshold:0.35", [(a / 10, a >= 4) for a in range(10)]))
    assert len(run.reads) == 10 and run.searched == 6
    assert run.theta(0.5) == 0.5 and run.share_at(run.theta(0.5)) == 0.5
    assert run.theta(0.25) == 0.7 and run.share_at(0.7) == 0.3       # 0.7, 0.8, 0.9: no θ gives exactly 25%
    never = search_reads(write_run(tmp_path / "never", "never", [(0.2, False), (0.6, False)]))
    assert list(never.reads) == [0.2, 0.6] and never.searched == 0


def test_runs_whose_reads_saw_documents_are_refused_by_name(tmp_path):
    with pytest.raises(UserError, match=r"always: no p\(search\) read before documents .*every candidate was read"):
        search_reads(write_run(tmp_path / "always", "always", [(0.9, True), (0.8, True)]))
    with pytest.raises(UserError, match="rsus: --search rsus read its searched candidates after their documents"):
        search_reads(write_run(tmp_path / "rsus", "rsus", [(0.9, True), (0.1, False)]))
    bare = tmp_path / "bare"
    bare.mkdir()
    with pytest.raises(UserError, match=r"bare/config.json: missing"):
        search_reads(bare)
    (bare / "config.json").write_text("{}")
    with pytest.raises(UserError, match="no search_controller"):
        search_reads(bare)
    run = write_run(tmp_path / "bad", "never", [(0.2, False)])
    (run / "records.jsonl").write_text(json.dumps({"id": "q7", "tree": [{"step": {"action": "high"}}]}) + "\n")
    with pytest.raises(UserError, match=r"bad: record 1 \(id 'q7'\) has a tree node without step.searched"):
        search_reads(run)
    with pytest.raises(UserError, match=r"--share: each must be in \(0, 1\]"):
        main([str(tmp_path / "never"), "--share", "1.5"])


def test_on_the_committed_theta_run_the_theta_for_its_own_share_is_its_theta(capsys):
    """The untrained 1.5B agent steering the 0.5B at θ = 0.34 (README: selective search) searched 34.9%
    of its candidates; read back from its trees, the θ for that share is 0.34 again, and its median
    before documents (0.314) is below the 0.34 read with documents in the always run."""
    run = search_reads(QWEN / "pra-untrained15-theta034")
    assert (len(run.reads), run.searched) == (6472, 2257)
    assert round(run.theta(2257 / 6472), 2) == 0.34 and run.share_at(0.34) == pytest.approx(2257 / 6472)
    assert round(run.theta(0.5), 3) == 0.314
    main([str(QWEN / "pra-untrained15-theta034"), "--share", "0.5"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("| run | --search | candidates | searched |") and "| 6472 | 34.9% |" in lines[2]
    assert lines[-1].endswith("--search threshold:0.31 searches 52% of its 6472 candidates")
