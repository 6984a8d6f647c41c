"""``pra eval --suite``: grid files are checked before anything runs, and runs share loaded models."""
import json
import subprocess
import sys
from contextlib import contextmanager
from typing import Iterator

import pytest

from eval.run import EvalConfig, eval_config
from eval.suite import LoadedParts, claim, load_suite, run_suite


def write(tmp_path, text):
    path = tmp_path / "grid.yaml"
    path.write_text(text)
    return str(path)


def test_runs_take_recipe_then_defaults_then_their_own_fields(tmp_path):
    configs = load_suite(write(tmp_path, """
defaults: {benchmark: medqa, limit: 7, search: {max_steps: 2}}
runs:
  - {out: a, method: cot}
  - {out: b, recipe: pra-cpu, search_controller: "threshold:0.3", search: {branching: 4}}
"""))
    a, b = configs
    assert (a.method, a.benchmark, a.limit, a.search.max_steps) == ("cot", "medqa", 7, 2)
    assert (b.method, b.reward_agent, b.search_controller) == ("pra", "pra-smollm2-goldprob", "threshold:0.3")
    assert (b.search.beam_width, b.search.branching, b.search.max_steps, b.benchmark) == (2, 4, 2, "medqa")


@pytest.mark.parametrize("text, message", [
    ("runs:\n  - {out: a, methd: cot}\n", "run 1: unknown field(s) methd"),
    ("runs:\n  - {out: a}\n  - {out: b, search: {beam: 2}}\n", "run 2: unknown search field(s) beam"),
    ("runs:\n  - {method: cot}\n", "run 1: each run is a mapping with at least `out:`"),
    ("runs:\n  - {out: a}\n  - {out: a, method: sc}\n", "two runs write to the same out folder"),
    ("defaults: {limit: 3}\n", "needs a non-empty `runs:` list"),
    ("runs:\n  - {out: a, recipe: no-such-recipe}\n", "no recipe file 'no-such-recipe'"),
])
def test_bad_suites_are_refused_naming_file_and_run(tmp_path, text, message):
    with pytest.raises((ValueError, FileNotFoundError)) as err:
        load_suite(write(tmp_path, text))
    assert message in str(err.value) and ("grid.yaml" in str(err.value) or "recipe" in message)


def test_command_line_config_is_the_recipe_with_overrides():
    cfg = eval_config({"recipe": "pra-cpu", "limit": 5, "search": {"beam_width": 1}}, "command line")
    assert (cfg.method, cfg.limit, cfg.search.beam_width, cfg.search.branching) == ("pra", 5, 1, 2)


def test_a_suite_runs_on_smollm2_loading_the_policy_once(tmp_path, monkeypatch):
    path = write(tmp_path, f"""
defaults: {{limit: 2, method: direct}}
runs:
  - {{out: {tmp_path / 'medmcqa'}, benchmark: medmcqa-eval}}
  - {{out: {tmp_path / 'medqa'}, benchmark: medqa}}
""")
    import pra.backends
    loads = []
    original = pra.backends.load_policy

    def counting(name, **kwargs):
        loads.append(name)
        return original(name, **kwargs)

    monkeypatch.setattr(pra.backends, "load_policy", counting)
    summaries = run_suite(path)
    assert [s["benchmark"] for s in summaries] == ["medmcqa-eval", "medqa"] and loads == ["smollm2-135m-instruct"]
    for name in ("medmcqa", "medqa"):
        records = [json.loads(line) for line in open(tmp_path / name / "records.jsonl")]
        assert len(records) == 2 and all(r["prediction"] in "ABCD" for r in records)
    assert run_suite(path)[1]["n"] == 2         # a second call resumes: nothing new to run,
    assert len(loads) == 1                      # and nothing loaded for it


def test_a_suite_keeps_one_policy_agent_and_retriever_at_a_time():
    loaded = LoadedParts()
    smollm2 = EvalConfig(policy="smollm2-135m-instruct", method="rag")
    gemma = EvalConfig(policy="gemma3-270m", method="rag")
    parts = loaded.parts(smollm2)
    assert parts.policy is None
    parts.policy, parts.retriever = "a policy", "a retriever"
    loaded.keep(smollm2, parts)
    assert loaded.parts(smollm2).policy == "a policy"
    assert loaded.parts(gemma).policy is None and loaded.parts(gemma).retriever == "a retriever"
    assert loaded.parts(smollm2).policy is None     # let go when gemma's run came: not two policies at once


def test_a_run_is_handed_only_the_parts_its_method_uses():
    """An agent kept from a PRA run reached the next CoT / SC run, whose engine then ranked its samples by
    reward (and SC broke vote ties by it): handed only what it uses, a later PRA run still gets it."""
    loaded = LoadedParts()
    pra = EvalConfig(method="pra", search_controller="always")
    parts = loaded.parts(pra)
    parts.policy, parts.reward_agent, parts.retriever = "a policy", "an agent", "a retriever"
    loaded.keep(pra, parts)
    for method in ("cot", "sc", "rag-sc", "qwc"):
        handed = loaded.parts(EvalConfig(method=method))
        assert handed.policy == "a policy" and handed.reward_agent is None
        assert handed.retriever == ("a retriever" if method == "rag-sc" else None)
    never = loaded.parts(EvalConfig(method="pra", search_controller="never"))
    assert (never.reward_agent, never.retriever) == ("an agent", None)
    assert loaded.parts(pra).retriever == "a retriever"


@contextmanager
def held_elsewhere(code: str, ready: str) -> Iterator[None]:
    """For the block, a child process runs ``code``, which prints ``ready`` once it holds the folder."""
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == ready
        yield
    finally:
        child.kill()
        child.wait()


def test_a_run_held_by_another_worker_is_skipped_and_free_again_when_it_exits(tmp_path):
    out = tmp_path / "run"
    with held_elsewhere(f"""
import time
from pathlib import Path
from eval.suite import claim
with claim(Path({str(out)!r})) as mine:
    print(mine, flush=True)
    time.sleep(30)
""", "True"):
        with claim(out) as mine:
            assert not mine
    with claim(out) as mine:        # killed, not cleaned up: the lock went with the process
        assert mine


def test_a_run_that_a_hand_started_eval_writes_is_skipped(tmp_path):
    out = tmp_path / "run"
    with held_elsewhere(f"""
import time
from pathlib import Path
from eval.run_folder import open_run_folder
with open_run_folder(Path({str(out)!r}), {{"method": "cot"}}):
    print("writing", flush=True)
    time.sleep(30)
""", "writing"):
        with claim(out) as mine:
            assert not mine
    with claim(out) as mine:
        assert mine
