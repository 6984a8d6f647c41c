"""The search trees of a run: recorded by the engine, printed in the terminal, drawn in the HTML page, and
that page rendered by a real headless Chromium."""
from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from rich.console import Console

from eval.analysis import palette
from eval.run import EvalConfig, run_eval
from eval.analysis.viewer.page import render_page, write_page
from eval.analysis.viewer.terminal import print_trees
from eval.analysis.viewer.trees import load_trees
from search.engine import SearchConfig
from tests.fakes import ScriptedPolicy, TableRewardAgent

# A real run: `pra eval --recipe demo --limit 2 --out tests/data/demo-run` (SmolLM2 policy, shipped agent).
DEMO_RUN = Path(__file__).parent / "data" / "demo-run"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Headless as root in a container: no sandbox, no GPU, nothing that reaches the network.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--virtual-time-budget=5000")
needs_chromium = pytest.mark.requires("chromium", CHROMIUM is not None, "headless Chromium not installed "
                                      "(Debian: apt-get install chromium); the page is checked in a real browser")


def scripted_run(tmp_path: Path) -> Path:
    """A PRA run on two benchmark questions with a scripted policy and table rewards: B=2, b=2, two
    steps, the second step never answers, so every answer is forced."""
    policy = ScriptedPolicy(lambda qt, step, i: f"step {step} idea {i}", force="C")
    agent = TableRewardAgent({"step 1 idea 0": 0.1, "step 1 idea 1": 0.9, "step 1 idea 2": 0.5, "step 1 idea 3": 0.7,
                              "step 2 idea 0": 0.2, "step 2 idea 1": 0.6})
    cfg = EvalConfig(method="pra", limit=2, out=str(tmp_path / "run"), search_controller="never",
                     search=SearchConfig(beam_width=2, branching=2, max_steps=2))
    run_eval(cfg, policy=policy, reward_agent=agent)
    return tmp_path / "run"


def test_every_ranked_candidate_is_recorded_with_its_parent_and_the_prune(tmp_path):
    trees = load_trees(scripted_run(tmp_path))
    for q in trees.questions:
        first = [n for n in q.nodes if n.depth == 1]
        second = [n for n in q.nodes if n.depth == 2]
        assert [n.text for n in first] == [f"step 1 idea {i}" for i in range(4)]        # B x b at the root
        assert [n.kept for n in first] == [False, True, False, True]                    # the top 2 rewards
        assert {q.nodes[n.parent].text for n in second} == {"step 1 idea 1", "step 1 idea 3"}
        assert len(second) == 4 and sum(n.kept for n in second) == 2
        final = [n for n in q.nodes if n.final]
        assert len(final) == 2 and all(n.kept and n.forced and n.answer == "C" for n in final)
        (chosen,) = [n for n in q.nodes if n.chosen]
        assert chosen.score == pytest.approx(0.9 + 0.6) and chosen.text == "step 2 idea 1"


def test_terminal_tree_shows_candidates_pruning_and_outcome(tmp_path):
    trees = load_trees(scripted_run(tmp_path))
    out = io.StringIO()
    print_trees(trees, Console(file=out, width=120, color_system=None))
    text = out.getvalue()
    assert text.count("step 1 idea 1") == 2 and "Question 1/2" in text and "Question 2/2" in text
    assert text.count(palette.PRUNED.name) == 2 * 4 and text.count(f"{palette.REWARD} 0.90") == 2
    assert re.search(r"answer C\s+gold \w\s+(correct|incorrect)\s+forced", text)


def test_page_is_self_contained_and_holds_every_question(tmp_path):
    trees = load_trees(scripted_run(tmp_path))
    trees.questions[0].question += " </script><script>alert(1)</script>"   # text that would end the data block
    page = render_page(trees)
    assert not re.search(r"(src|href)=\"?https?:", page) and "@import" not in page
    assert page.count("</script>") == 2          # the data block and the script; the question's is escaped
    data = json.loads(re.search(r'<script id="pra-data" type="application/json">(.*?)</script>', page, re.S).group(1))
    assert [q["id"] for q in data["questions"]] == [q.id for q in trees.questions]
    assert data["questions"][0]["question"].endswith("</script><script>alert(1)</script>")
    node = data["questions"][0]["nodes"][1]
    assert node["color"] == palette.reward_color(0.9) and data["palette"]["searched"] == {
        "name": palette.SEARCHED.name, "color": palette.SEARCHED.color}


def test_reward_colours_run_along_the_shared_scale():
    assert palette.reward_color(0.0) == palette.REWARD_SCALE[0]
    assert palette.reward_color(1.0) == palette.REWARD_SCALE[-1] == palette.reward_color(7.0)
    assert palette.reward_color(0.5) == palette.REWARD_SCALE[len(palette.REWARD_SCALE) // 2]
    assert palette.reward_color(None) == palette.NO_REWARD


def test_a_run_without_trees_shows_its_kept_steps_as_a_chain(tmp_path):
    run = tmp_path / "cot"
    run_eval(EvalConfig(method="cot", limit=1, out=str(run), search=SearchConfig(max_steps=3)),
             policy=ScriptedPolicy(lambda qt, step, i: f"thought {step}", force="B"))
    (q,) = load_trees(run).questions
    assert [(n.parent, n.text, n.kept) for n in q.nodes] == [(None, "thought 1", True), (0, "thought 2", True),
                                                            (1, "thought 3", True)]
    assert q.nodes[-1].final and q.nodes[-1].forced and q.nodes[-1].answer == "B"


def chromium(page: Path, tmp_path: Path, *args: str, fragment: str = "") -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{time.monotonic_ns()}"      # a fresh profile for every start
    return subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args,
                           page.resolve().as_uri() + fragment], capture_output=True, text=True, timeout=120)


@needs_chromium
def test_real_run_page_renders_its_tree_in_chromium(tmp_path):
    trees = load_trees(DEMO_RUN)
    page = write_page(trees, tmp_path / "viewer.html")
    q = trees.questions[1]
    dom = chromium(page, tmp_path, "--dump-dom", fragment="#q=2").stdout
    assert 'data-ready="1"' in dom, "the page's script did not finish"
    svg = re.search(r'<svg class="tree".*?</svg>', dom, re.S).group(0)
    assert len(re.findall(r'class="node"', svg)) == len(q.nodes) > 0
    assert len(re.findall(r"<path ", svg)) == len(q.nodes)                       # one edge per step
    assert f"search tree of {q.id}" in svg
    for n in q.nodes:                                                            # every step's text, escaped
        assert n.text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in dom
    assert dom.count('class="card pruned"') == sum(not n.kept for n in q.nodes)
    assert any(n.doc_ids for n in q.nodes) and trees.title(q.nodes[0].doc_ids[0])[:20] in dom
    shot = tmp_path / "shot.png"
    chromium(page, tmp_path, f"--screenshot={shot}", "--window-size=1400,1000", fragment="#q=2")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


@needs_chromium
def test_a_thousand_questions_load_as_one_list_and_one_tree(tmp_path):
    run = tmp_path / "big"
    run.mkdir()
    shutil.copy(DEMO_RUN / "config.json", run / "config.json")
    records = [json.loads(line) for line in (DEMO_RUN / "records.jsonl").read_text().splitlines()]
    with (run / "records.jsonl").open("w") as fh:
        for i in range(1000):          # ids that are not in the benchmark: the page says so and goes on
            fh.write(json.dumps({**records[i % len(records)], "id": f"copy-{i}"}) + "\n")
    page = write_page(load_trees(run), tmp_path / "big.html")
    started = time.monotonic()
    dom = chromium(page, tmp_path, "--dump-dom", fragment="#q=1000").stdout
    seconds = time.monotonic() - started
    assert 'data-ready="1"' in dom and dom.count("<li data-i=") == 1000
    assert dom.count('<svg class="tree"') == 1 and "1000. copy-999" in dom
    assert seconds < 30, f"1,000 questions took {seconds:.1f} s to load"


@pytest.mark.slow
def test_pra_run_on_smollm2_prints_and_draws_its_tree(smollm2, tmp_path):
    from corpora.retrieval import load_retriever
    from pra.reward_agent import RewardAgent

    cfg = EvalConfig(method="pra", limit=1, out=str(tmp_path), search_controller="always",
                     search=SearchConfig(beam_width=2, branching=2, max_steps=2, step_tokens=12))
    run_eval(cfg, policy=smollm2, reward_agent=RewardAgent(smollm2), retriever=load_retriever("medcorp-mini", mode="bm25"))
    trees = load_trees(tmp_path)
    (q,) = trees.questions
    record = json.loads((tmp_path / "records.jsonl").read_text())
    assert len(q.nodes) == record["stats"]["candidates"]           # every candidate the policy wrote
    assert all(n.searched and n.doc_ids and n.reward is not None for n in q.nodes)
    assert [n.kept for n in q.nodes if n.depth == 1].count(True) == 2
    out = io.StringIO()
    print_trees(trees, Console(file=out, width=200, color_system=None))
    assert all(" ".join(n.text.split())[:40] in out.getvalue() for n in q.nodes)
    assert trees.title(q.nodes[0].doc_ids[0]) in out.getvalue()
