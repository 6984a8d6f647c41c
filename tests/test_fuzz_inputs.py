"""The error boundary under random input (hypothesis, a bounded number of examples each): random settings
to the config readers and the validator, random records to the record reader, ``pra show`` (trees, the
page, the terminal) and ``pra compare``. Whatever comes in, either it works or a ``UserError`` (one
line per problem) comes out; anything else is a bug the boundary would print with a traceback."""
from __future__ import annotations

import io
import json
from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pra.errors import UserError

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=12), st.sampled_from(["[/bold]", "A", "B", "medqa-0", "0/2", "cot", "pra", ""]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=4)),
                      max_leaves=10)


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _eval_fields():
    from eval.run import EvalConfig
    from search.engine import SearchConfig
    return [f.name for f in fields(EvalConfig)], [f.name for f in fields(SearchConfig)]


@FUZZ
@given(st.data())
def test_random_eval_settings_are_accepted_or_one_user_error(data):
    from eval.checks import check_eval_config
    from eval.run import eval_config

    names, search_names = _eval_fields()
    settings_ = data.draw(st.dictionaries(st.sampled_from(names + ["nonsense"]), values, max_size=4))
    if data.draw(st.booleans()):
        settings_["search"] = data.draw(st.one_of(values, st.dictionaries(st.sampled_from(search_names), values, max_size=3)))
    settings_.pop("recipe", None)
    try:
        cfg = eval_config(settings_, "fuzz.yaml")
        check_eval_config(cfg)
    except UserError as err:
        assert str(err).strip()


@FUZZ
@given(st.sampled_from(["train", "label"]), st.data())
def test_random_training_settings_are_accepted_or_one_user_error(section, data):
    from training.config import LabelConfig, TrainConfig, load_config

    cls = TrainConfig if section == "train" else LabelConfig
    overrides = data.draw(st.dictionaries(st.sampled_from([f.name for f in fields(cls)]), values, max_size=4))
    try:
        load_config(cls, section, None, overrides)
    except UserError as err:
        assert str(err).strip()


steps = st.lists(st.one_of(values, st.fixed_dictionaries({}, optional={
    "text": st.one_of(st.text(max_size=20), values), "reward": values, "action": values,
    "searched": values, "doc_ids": values})), max_size=3)
nodes = st.lists(st.one_of(values, st.fixed_dictionaries({}, optional={
    "step": st.one_of(steps.map(lambda s: s[0] if s else {}), values), "parent": st.one_of(st.none(), st.integers(-2, 4), values),
    "depth": st.one_of(st.integers(0, 4), values), "score": values, "kept": values, "answer": values})), max_size=4)
records = st.lists(st.fixed_dictionaries({}, optional={
    "id": st.one_of(st.sampled_from(["medqa-0", "medqa-1", "medqa-1@r1"]), values), "gold": values,
    "prediction": values, "correct": st.one_of(st.booleans(), values), "forced": values, "steps": st.one_of(steps, values),
    "tree": st.one_of(nodes, values), "final": st.one_of(st.lists(st.integers(-2, 5), max_size=3), values),
    "answers": values, "scores": values, "stats": values, "fingerprint": values}), max_size=4)


def _run(folder: Path, recs: list) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"benchmark": "medqa", "method": "pra", "policy": "p",
                                                    "corpus": "no-such-corpus", "benchmark_hash": "h"}))
    (folder / "records.jsonl").write_text("".join(json.dumps(r, allow_nan=True) + "\n" for r in recs))
    return folder


@FUZZ
@given(records, records)
def test_random_records_are_shown_and_compared_or_one_user_error(tmp_path_factory, a, b):
    from rich.console import Console

    from eval.analysis.compare import compare_runs, markdown
    from eval.analysis.viewer.page import render_page
    from eval.analysis.viewer.terminal import print_trees
    from eval.analysis.viewer.trees import load_trees

    root = tmp_path_factory.mktemp("fuzz")
    run_a, run_b = _run(root / "a", a), _run(root / "b", b)
    try:
        trees = load_trees(run_a)
        render_page(trees)
        print_trees(trees, Console(file=io.StringIO(), width=100))
    except UserError as err:
        assert str(err).strip()
    try:
        markdown(compare_runs([run_a, run_b], seeds=2))
    except UserError as err:
        assert str(err).strip()
