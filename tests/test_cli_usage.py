"""The command line as a newcomer meets it: a bare `pra eval` plans and stops rather than running for
hours, `pra list` says what exists, help shows groups, defaults and enforced choices generated from the
config fields, engine options reach the backend and the run's fingerprint, a broken environment is
named as such, and nothing writes over shipped files unasked."""
from __future__ import annotations

import argparse
import io
import json
from dataclasses import fields
from pathlib import Path

import pytest
from rich.console import Console

from pra import cli
from tests.fakes import ScriptedPolicy, TableRewardAgent


@pytest.fixture
def no_models(monkeypatch):
    """Any model load fails the test; the hub counts as unreachable."""
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr("pra.backends.load_policy", lambda *a, **k: pytest.fail("a model was loaded"))
    monkeypatch.setattr("pra.backends.transformers_backend.TransformersBackend.__init__",
                        lambda *a, **k: pytest.fail("a model was loaded"))


def run_cli(argv: list[str]) -> int:
    try:
        cli.main(argv)
    except SystemExit as stop:
        return stop.code
    return 0


# (argv, what the one error line names, what it must not name); {tmp} is the test's folder.
BARE = [
    (["eval"], ["--sample N", "--all", "--out DIR"], []),
    (["eval", "--method", "direct", "--sample", "5"], ["--out DIR"], ["--sample N"]),
    (["eval", "--method", "cot", "--out", "{tmp}/run"], ["--sample N, --limit N, --shard i/n, or --all"], ["--out DIR"]),
    (["eval", "--recipe", "pra-cpu", "--limit", "20"], ["--out DIR"], ["--sample N"]),
    (["eval", "--recipe", "pra-cpu", "--search", "threshold:0.5", "--out", "{tmp}/run"], ["--all"], ["--out DIR"]),
]


@pytest.mark.parametrize("argv, named, not_named", BARE, ids=[" ".join(a) for a, _, _ in BARE])
def test_a_bare_eval_prints_its_plan_and_stops(argv, named, not_named, tmp_path, capsys, no_models):
    code = run_cli([a.replace("{tmp}", str(tmp_path)) for a in argv])
    out, err = capsys.readouterr()
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pra eval: error: nothing was run: choose "), lines
    assert all(n in lines[0] for n in named) and not any(n in lines[0] for n in not_named), lines[0]
    assert out.startswith("plan: ") and "records: " in out and "estimated time: " in out
    assert not (tmp_path / "run").exists()


def test_the_plan_counts_the_questions_and_estimates_from_measured_runs(capsys, no_models):
    assert run_cli(["eval", "--recipe", "pra-cpu"]) == 2
    out = capsys.readouterr().out
    assert "plan: pra on medmcqa-eval: 1,183 of its 1,183 questions, all of them" in out
    assert "reward agent pra-smollm2-goldprob, search always, B=2 b=2, 3 steps" in out
    assert "(no --out given)" in out and ("estimated time: about" in out or "estimated time: unknown" in out)


def test_plan_counts_each_runs_records_and_the_time_left_and_runs_nothing(tmp_path, monkeypatch, capsys):
    """`--plan` on a suite: a line a run (records there of those asked, time left from the run's own
    records) and a one-line total; on one run the same, and neither loads a model or writes a record."""
    import shutil

    from eval.plan import _duration
    from eval.suite import run_suite

    finished, half, new = tmp_path / "finished", tmp_path / "half", tmp_path / "new"
    (tmp_path / "one.yaml").write_text(f"runs:\n  - {{out: {finished}, method: direct, benchmark: medqa, limit: 2}}\n")
    run_suite(str(tmp_path / "one.yaml"))           # real records of SmolLM2's direct answers
    per = sum(json.loads(line)["seconds"] for line in open(finished / "records.jsonl")) / 2
    with open(finished / "records.jsonl", "a") as f:  # a question nobody asks and a torn write: neither counts
        f.write('{"id": "not-asked", "seconds": 500.0}\n{"id": "torn')
    shutil.copytree(finished, half)
    monkeypatch.setattr("pra.backends.load_policy", lambda *a, **k: pytest.fail("a model was loaded"))
    grid = tmp_path / "grid.yaml"
    grid.write_text(f"""defaults: {{method: direct, benchmark: medqa}}
runs:
  - {{out: {finished}, limit: 2}}
  - {{out: {half}, limit: 4}}
  - {{out: {new}, limit: 3}}
""")
    before = (half / "records.jsonl").read_bytes()
    capsys.readouterr()
    assert run_cli(["eval", "--suite", str(grid), "--plan"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("[1/3]     2 of 2     direct medqa smollm2-135m-instruct: finished"), lines[0]
    assert lines[1].startswith(f"[2/3]     2 of 4     direct medqa smollm2-135m-instruct: about {_duration(2 * per)} left")
    assert lines[2].startswith("[3/3]     0 of 3 ") and f"({new})" in lines[2]
    assert lines[3].startswith("3 runs: 1 finished, 1 started, 1 not started; 5 records left, about "), lines[3]
    assert run_cli(["eval", "--method", "direct", "--benchmark", "medqa", "--limit", "4", "--out", str(half),
                    "--plan"]) == 0
    out = capsys.readouterr().out
    assert "2 of 4 there (the run resumes after them)" in out, out
    assert f"estimated time: about {_duration(2 * per)} ({per:.1f} s a record, this run's own so far)" in out
    assert (half / "records.jsonl").read_bytes() == before and not new.exists()
    assert run_cli(["eval", "--suite", str(grid), "--plan", "--limit", "9"]) == 2    # the suite sets the runs
    assert "drop --limit" in capsys.readouterr().err


def test_a_recipe_that_sets_sample_and_out_runs(monkeypatch, capsys, no_models):
    """The demo recipe chooses its questions and folder itself: it passes the gate to run_eval."""
    from pra.errors import UserError

    class Reached(UserError):
        pass

    def reached(cfg, **kwargs):
        raise Reached(f"run_eval reached: sample {cfg.sample}, out {cfg.out}")
    monkeypatch.setattr("eval.run.run_eval", reached)
    assert run_cli(["eval", "--recipe", "demo"]) == 2
    assert "run_eval reached: sample 3, out runs/demo" in capsys.readouterr().err
    assert run_cli(["eval", "--method", "cot", "--all", "--out", "x"]) == 2
    assert "run_eval reached: sample None, out x" in capsys.readouterr().err
    assert run_cli(["eval", "--method", "cot", "--all", "--limit", "3", "--out", "x"]) == 2
    assert "--all asks every question, but --limit" in capsys.readouterr().err


LISTS = [("benchmarks", ["medmcqa-eval", "1,183 questions", "MIT", "training only"]),
         ("methods", ["pra", "self-consistency", "--reward-agent"]),
         ("recipes", ["demo", "pra-cpu", "report-cpu", "pra eval --suite", "pra label/train --recipe",
                      "pra train --recipe", "pra label --recipe"]),     # each training recipe: the blocks it has
         ("agents", ["pra-smollm2-goldprob (default)", "LoRA on smollm2-135m-instruct", "Apache-2.0"]),
         ("corpora", ["medcorp-mini", "10,000 passages", "CC BY 4.0", "minilm-l6-v2-flat"]),
         ("models", ["smollm2-135m-instruct", "minilm-l6-v2", "Apache-2.0"])]


@pytest.mark.parametrize("kind, shown", LISTS, ids=[k for k, _ in LISTS])
def test_list_prints_names_sizes_licences_and_state(kind, shown, capsys, monkeypatch, no_models):
    monkeypatch.setenv("COLUMNS", "240")
    assert run_cli(["list", kind]) == 0
    out = capsys.readouterr().out
    assert all(s in out for s in shown), out


def test_list_covers_every_method_and_recipe_and_eval_tasks_list(capsys, monkeypatch, no_models):
    from eval.listing import listing
    from eval.run import METHODS

    _, rows = listing("methods")
    assert [r[0] for r in rows] == list(METHODS) and all(r[1] for r in rows)
    monkeypatch.setenv("COLUMNS", "240")
    assert run_cli(["eval", "--tasks", "list"]) == 0
    assert "medmcqa-eval" in capsys.readouterr().out


def test_models_says_prepared_when_the_cache_holds_the_model(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PRA_CACHE", str(tmp_path))
    assert run_cli(["models"]) == 0
    assert "not prepared (`pra models --prepare`" in capsys.readouterr().out
    from pra.models import EMBEDDED
    for m in EMBEDDED.values():
        if m.gguf:
            (tmp_path / "models" / m.name).mkdir(parents=True)
            (tmp_path / "models" / m.name / "model.safetensors").write_bytes(b"x" * 1000)
    assert run_cli(["models"]) == 0
    out = capsys.readouterr().out
    assert "not prepared" not in out and "--prepare" not in out and "prepared (" in out


# ---- help ------------------------------------------------------------------------------------------------

def _actions(parser: argparse.ArgumentParser, path: str = ""):
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from _actions(sub, f"{path} {name}".strip())
        else:
            yield path, a


def test_help_shows_groups_defaults_and_choices(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert run_cli(["eval", "--help"]) == 0
    text = capsys.readouterr().out
    for group in ("data: which questions", "method:", "policy: the model that reasons", "reward agent (pra)",
                  "search: the beam and its steps", "retrieval (", "engine: how the models run", "output:"):
        assert f"\n{group}" in text, group
    assert "(default: cot)" in text and "(default: medmcqa-eval)" in text and "(default: 48)" in text
    assert "--dtype {float32,bfloat16,float16,int8}" in text and "--retrieval {dense,bm25,hybrid}" in text
    assert "--method {direct,cot," in text and "--permute {none,balanced,cyclic}" in text
    assert "examples:\n  pra eval --recipe demo" in text


def test_every_eval_flag_comes_from_the_config_and_has_help():
    from eval.run import EvalConfig
    from pra.options import flag_name
    from search.engine import SearchConfig

    parser = cli.build_parser()
    eval_actions = {a.dest: a for path, a in _actions(parser) if path == "eval"}
    for cls in (EvalConfig, SearchConfig):
        for f in fields(cls):
            if flag_name(f):
                action = eval_actions[f.name]
                assert action.help and f.metadata["help"][:30].replace("%", "%%") in action.help
    assert all(a.help for path, a in _actions(parser) if a.dest != "help"), \
        [(path, a.option_strings or a.dest) for path, a in _actions(parser) if not a.help]


def test_every_verb_has_a_description_and_two_examples(capsys):
    parser = cli.build_parser()
    verbs = parser._subparsers._group_actions[0].choices
    for name in verbs:
        about, examples = cli.VERB_DOCS[name]
        assert about and len(examples) >= 2, name
        assert verbs[name].description and verbs[name].epilog.count("\n  pra ") >= 2
    assert run_cli(["--version"]) == 0 and capsys.readouterr().out.startswith("pra ")
    assert run_cli(["--help"]) == 0
    top = capsys.readouterr().out
    assert "process reward agents" in top and "The ``pra`` command line" not in top and "pra list" in top


BAD_CHOICES = [(["eval", "--backend", "tgi"], "--backend: unknown backend 'tgi'; choose one of transformers"),
               (["eval", "--retrieval", "splade"], "--retrieval: unknown retrieval 'splade'; choose one of dense"),
               (["eval", "--dtype", "float8"], "--dtype: unknown dtype 'float8'"),
               (["eval", "--permute", "random"], "--permute: unknown permute 'random'"),
               (["eval", "--reward-aggregation", "median"], "unknown reward aggregation 'median'"),
               (["eval", "--search", "sometimes"], "unknown search controller 'sometimes'"),
               (["eval", "--engine-arg", "novalue"], "--engine-arg: takes KEY=VALUE"),
               (["list", "datasets"], "unknown kind 'datasets'")]


@pytest.mark.parametrize("argv, message", BAD_CHOICES, ids=[" ".join(a) for a, _ in BAD_CHOICES])
def test_choices_are_enforced_in_one_line(argv, message, capsys):
    assert run_cli(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"pra {argv[0]}: error: ") and message in err[0], err


def test_backend_choices_are_read_from_the_backend_table(monkeypatch):
    monkeypatch.setattr("pra.backends.BACKENDS", ("transformers", "vllm", "openai", "llamacpp"))
    args = cli.build_parser().parse_args(["eval", "--backend", "llamacpp"])
    assert args.backend == "llamacpp"


# ---- engine options ----------------------------------------------------------------------------------------

def test_dtype_and_engine_args_reach_the_backend_and_the_fingerprint(tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    loaded = []

    def load_policy(model, backend="transformers", **kwargs):
        loaded.append((model, backend, kwargs))
        return ScriptedPolicy(lambda qt, step, i: f"step {step}", force="A")
    monkeypatch.setattr("pra.backends.load_policy", load_policy)
    monkeypatch.setattr("pra.models.has_chat_template", lambda name: False)
    common = ["eval", "--method", "cot", "--sample", "2", "--max-steps", "2"]
    assert run_cli([*common, "--dtype", "bfloat16", "--engine-arg", "attn_implementation=sdpa",
                    "--engine-arg", "low_cpu_mem_usage=true", "--out", str(tmp_path / "bf16")]) == 0
    assert loaded[-1][2]["dtype"] == "bfloat16"
    assert loaded[-1][2]["model_kwargs"] == {"attn_implementation": "sdpa", "low_cpu_mem_usage": True}
    assert run_cli([*common, "--out", str(tmp_path / "plain")]) == 0
    assert "dtype" not in loaded[-1][2] and "model_kwargs" not in loaded[-1][2]
    bf16 = json.loads((tmp_path / "bf16" / "config.json").read_text())
    plain = json.loads((tmp_path / "plain" / "config.json").read_text())
    assert bf16["dtype"] == "bfloat16" and bf16["engine_args"]["attn_implementation"] == "sdpa"
    fp = lambda run: {json.loads(line)["fingerprint"] for line in (tmp_path / run / "records.jsonl").read_text().splitlines()}
    assert fp("bf16") != fp("plain") and len(fp("bf16")) == 1
    # Engine options left unset add nothing to the fingerprint (pra.resume.flat); set, they are in it.
    from eval.run_folder import settings
    assert not {"dtype", "device"} & set(settings(plain)) and not any(k.startswith("engine_args") for k in settings(plain))
    assert {"dtype", "engine_args.attn_implementation"} <= set(settings(bf16))
    # Resuming the bf16 folder without --dtype is refused, naming the field.
    assert run_cli([*common, "--out", str(tmp_path / "bf16")]) == 2
    assert "dtype ('bfloat16' -> 'not set')" in capsys.readouterr().err


def test_vllm_gets_dtype_and_engine_args_and_lm_eval_spellings_work(monkeypatch):
    from eval.run import EvalConfig, engine_options

    monkeypatch.setattr("pra.models.model_problem", lambda name, flag: None)     # any hub id will do

    cfg = EvalConfig(backend="vllm", dtype="bfloat16", engine_args={"gpu_memory_utilization": 0.8})
    assert engine_options(cfg, "vllm") == {"dtype": "bfloat16", "gpu_memory_utilization": 0.8}
    args = cli.build_parser().parse_args(
        ["eval", "--model", "vllm", "--model_args", "pretrained=Qwen/Qwen3-4B-Instruct-2507,dtype=bfloat16,"
         "gpu_memory_utilization=0.8,max_model_len=8192", "--method", "cot"])
    cfg = cli._eval_config(args)
    assert (cfg.policy, cfg.backend, cfg.dtype) == ("Qwen/Qwen3-4B-Instruct-2507", "vllm", "bfloat16")
    assert cfg.engine_args == {"gpu_memory_utilization": 0.8, "max_model_len": 8192}


def test_device_with_a_server_backend_is_refused(capsys, no_models):
    assert run_cli(["eval", "--backend", "openai", "--base-url", "http://x", "--device", "cuda", "--sample", "1"]) == 2
    assert "--device (device) applies to --backend transformers, not openai" in capsys.readouterr().err


# ---- errors, shipped files -------------------------------------------------------------------------------

ENVIRONMENT = [(ModuleNotFoundError("No module named 'torchvision'", name="torchvision"), 1, "environment problem"),
               (ImportError("cannot import name 'x' from 'transformers'", name="transformers"), 1, "environment problem"),
               (OSError("libcudart.so.12: cannot open shared object file: No such file or directory"), 1,
                "environment problem"),
               (ModuleNotFoundError("No module named 'pra.gone'", name="pra.gone"), 1, "this is a bug in pra")]


@pytest.mark.parametrize("error, code, said", ENVIRONMENT, ids=[str(e)[:30] for e, _, _ in ENVIRONMENT])
def test_a_broken_environment_is_not_called_a_bug(error, code, said, monkeypatch, capsys):
    def broken(args):
        raise error
    monkeypatch.setattr(cli, "cmd_retrieve", broken)
    assert run_cli(["retrieve", "scurvy"]) == code
    err = capsys.readouterr().err
    assert said in err
    if said == "environment problem":
        assert "make setup" in err and "bug in pra" not in err and "Traceback" not in err


def test_index_build_does_not_overwrite_a_shipped_index(capsys, no_models):
    assert run_cli(["index", "build", "--corpus", "medcorp-mini", "--kind", "flat"]) == 2
    err = capsys.readouterr().err
    assert "ships with the project" in err and "--out DIR" in err and "--overwrite" in err


def test_report_needs_out(capsys):
    assert run_cli(["report", "runs"]) == 2
    assert "--out" in capsys.readouterr().err


# ---- the demo's output and progress ---------------------------------------------------------------------

def test_batched_progress_counts_steps_not_questions():
    from eval.run import EvalConfig
    from pra.benchmarks import load_benchmark
    from search.engine import Engine, SearchConfig, Trace

    questions = load_benchmark("medqa", limit=3).questions
    policy = ScriptedPolicy(lambda qt, step, i: f"step {step} idea {i}", force="B")
    engine = Engine(policy, SearchConfig(beam_width=2, branching=2, max_steps=3), reward_agent=TableRewardAgent({}))
    ticks = []
    done = list(engine.run([Trace(q) for q in questions], max_active=3, progress=ticks.append))
    assert len(done) == 3 and sum(ticks) == 3 * 3
    assert len([t for t in ticks if t]) >= 3          # it moves at every stage step, not once at the end
    assert EvalConfig().search.max_steps == 4


def test_demo_output_explains_itself(tmp_path):
    from eval.run import EvalConfig, eval_config, run_eval
    from eval.analysis.viewer.terminal import print_trees
    from eval.analysis.viewer.trees import load_trees
    from search.engine import SearchConfig

    demo = eval_config({"recipe": "demo"})
    text = cli._what_next(demo)
    assert "near chance" in text and "shows the mechanics" in text
    assert [line.split("#")[0].split()[:2] for line in text.splitlines() if line.startswith("  pra ")] == \
        [["pra", "eval"], ["pra", "eval"], ["pra", "compare"]]
    policy = ScriptedPolicy(lambda qt, step, i: f"step {step} idea {i}", force="C")
    run_eval(EvalConfig(method="pra", limit=1, out=str(tmp_path / "pra"), search_controller="never",
                        search=SearchConfig(beam_width=2, branching=2, max_steps=2)),
             policy=policy, reward_agent=TableRewardAgent({"step 1 idea 1": 0.9}))
    run_eval(EvalConfig(method="cot", limit=1, out=str(tmp_path / "cot"), search=SearchConfig(max_steps=2)),
             policy=ScriptedPolicy(lambda qt, step, i: f"thought {step}", force="B"))
    printed = {}
    for run in ("pra", "cot"):
        out = io.StringIO()
        print_trees(load_trees(tmp_path / run), Console(file=out, width=400, color_system=None))
        printed[run] = out.getvalue()
    legend = lambda text: text[text.index("legend:"):]
    assert "step reward" in legend(printed["pra"]) and "p(search)" in legend(printed["pra"])
    assert "forced" in legend(printed["pra"]) and "options none" in legend(printed["pra"])
    assert "step reward" not in legend(printed["cot"]) and "forced" in legend(printed["cot"])


def test_the_time_estimate_prefers_runs_on_the_same_benchmark(tmp_path):
    """A benchmark's question length sets its rate: MedQA is estimated from MedQA runs where there
    are any, and only otherwise from the same method and policy on other benchmarks."""
    from eval.plan import measured_seconds
    from eval.run import EvalConfig

    def measured(name: str, benchmark: str, seconds: float, policy: str = "p") -> None:
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps(
            {"method": "rag", "policy": policy, "benchmark": benchmark, "seconds_per_question": seconds}))
        (tmp_path / name / "config.json").write_text(json.dumps({"backend": "transformers"}))
    measured("a", "medmcqa-eval", 5.0)
    measured("b", "mmlu-med", 7.0)
    measured("c", "medqa", 13.0)
    measured("d", "medqa", 20.0, policy="other")
    assert measured_seconds(EvalConfig(method="rag", policy="p", benchmark="medqa"), tmp_path) == (13.0, 1, True)
    assert measured_seconds(EvalConfig(method="rag", policy="p", benchmark="pubmedqa"), tmp_path) == (7.0, 3, False)
    assert measured_seconds(EvalConfig(method="cot", policy="p", benchmark="medqa"), tmp_path) is None
