"""Config plumbing of `pra eval`: recipes, flags, and which options reach which backend."""
import pytest

from eval.run import EvalConfig, Parts, engine_config, run_eval
from pra.cli import build_parser, _eval_config
from search.engine import SearchConfig


def test_recipe_then_flags(tmp_path):
    args = build_parser().parse_args(["eval", "--recipe", "pra-cpu", "--beam-width", "3", "--search", "never",
                                      "--limit", "7"])
    cfg = _eval_config(args)
    assert cfg.method == "pra" and cfg.limit == 7 and cfg.search_controller == "never"
    assert cfg.search.beam_width == 3 and cfg.search.branching == 2      # flag over recipe, recipe kept


def test_unknown_recipe_field_names_the_file(tmp_path):
    bad = tmp_path / "r.yaml"
    bad.write_text("method: cot\nbeam: 3\n")
    with pytest.raises(ValueError, match=r"r.yaml: unknown field\(s\) beam"):
        _eval_config(build_parser().parse_args(["eval", "--recipe", str(bad)]))


def test_methods_fix_their_search_shape():
    user = SearchConfig(beam_width=4, branching=8, temperature=0.0)
    assert (engine_config(EvalConfig(method="cot", search=user)).beam_width,
            engine_config(EvalConfig(method="cot", search=user)).branching) == (1, 1)
    sc = engine_config(EvalConfig(method="sc", samples=5, search=user))
    assert (sc.beam_width, sc.branching, sc.aggregate) == (5, 1, "vote") and sc.temperature > 0
    assert engine_config(EvalConfig(method="pra", search=user)) == user


def test_openai_backend_gets_no_transformers_options(monkeypatch):
    seen = {}
    monkeypatch.setattr("pra.backends.load_policy", lambda model, backend, **kw: seen.update(kw) or object())
    Parts().complete(EvalConfig(method="cot", backend="openai", base_url="http://127.0.0.1:1"))
    assert seen == {"base_url": "http://127.0.0.1:1"}


def test_unknown_method_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="unknown method 'beam'"):
        run_eval(EvalConfig(method="beam", out=str(tmp_path)))


def test_the_method_table_names_real_settings_and_prompts():
    """Every setting a method declares it reads is a config field (or a field of the search block), every
    prompt one of the policy's, and the config's --method choices are the table's."""
    from dataclasses import fields

    from eval.methods import ALL_SEARCH, METHODS, readers
    from pra.prompts import PROMPT_KINDS

    names = {f.name for f in fields(EvalConfig)} | {f"search.{f.name}" for f in fields(SearchConfig)} | {ALL_SEARCH}
    for m in METHODS.values():
        assert m.reads <= names, (m.name, m.reads - names)
        assert m.prompt in PROMPT_KINDS and m.runner in ("letters", "engine", "pulse")
        assert m.retrieves in ("nothing", "question", "steps", "search")
    assert next(f for f in fields(EvalConfig) if f.name == "method").metadata["choices"] == tuple(METHODS)
    assert readers("search.beam_width") == ("pra",) and readers("policy") is None
    assert set(readers("search.max_steps")) == set(METHODS) - {"direct"}
