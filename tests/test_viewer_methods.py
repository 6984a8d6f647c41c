"""The viewer page is method-aware: a CoT run's page shows its steps without the reward agent's legend,
readouts or empty "–" slots; a PRA run's page shows them; both explain gold (bold blue) and the
prediction (underlined). Checked in the data the page reads and, where Chromium is installed, in the
page a real headless Chromium renders."""
from __future__ import annotations

import re
from pathlib import Path

from eval.analysis import palette
from eval.run import EvalConfig, run_eval
from eval.analysis.viewer.page import page_data, write_page
from eval.analysis.viewer.trees import load_trees
from search.engine import SearchConfig
from tests.fakes import ScriptedPolicy
from tests.test_viewer import chromium, needs_chromium, scripted_run


def cot_run(tmp_path: Path) -> Path:
    run = tmp_path / "cot"
    run_eval(EvalConfig(method="cot", limit=2, out=str(run), search=SearchConfig(max_steps=3)),
             policy=ScriptedPolicy(lambda qt, step, i: f"thought {step}", force="B"))
    return run


def _part(dom: str, element_id: str, tag: str) -> str:
    return re.search(rf'<{tag}[^>]*id="{element_id}"[^>]*>(.*?)</{tag}>', dom, re.S).group(1)


def test_page_data_says_what_the_method_has(tmp_path):
    cot = page_data(load_trees(cot_run(tmp_path)))
    pra = page_data(load_trees(scripted_run(tmp_path)))
    assert (cot["scored"], cot["searches"]) == (False, False)
    assert pra["scored"] is True


@needs_chromium
def test_cot_page_has_no_reward_legend_or_empty_slots(tmp_path):
    page = write_page(load_trees(cot_run(tmp_path)), tmp_path / "cot.html")
    dom = chromium(page, tmp_path, "--dump-dom", fragment="#q=1").stdout
    assert 'data-ready="1"' in dom
    legend, detail = _part(dom, "legend", "div"), _part(dom, "detail", "section")
    assert palette.REWARD not in legend and palette.ACTION not in legend and "scale" not in legend
    assert palette.REWARD not in detail and palette.ACTION not in detail and "–" not in detail
    assert palette.SEARCHED.name not in legend and "candidates" not in detail
    assert "gold answer" in legend and "the prediction" in legend and 'class="gold"' in legend
    assert "thought 1" in detail and "Step 3" in detail


@needs_chromium
def test_pra_page_has_the_reward_legend_and_readouts(tmp_path):
    page = write_page(load_trees(scripted_run(tmp_path)), tmp_path / "pra.html")
    dom = chromium(page, tmp_path, "--dump-dom", fragment="#q=1").stdout
    assert 'data-ready="1"' in dom
    legend, detail = _part(dom, "legend", "div"), _part(dom, "detail", "section")
    assert palette.REWARD in legend and "scale" in legend and palette.PRUNED.name in legend
    assert "gold answer" in legend and "the prediction" in legend
    assert f"{palette.REWARD} 0.900" in detail and palette.ACTION in detail
    assert "Step 1: 4 candidates, 2 kept, 2 pruned" in detail
