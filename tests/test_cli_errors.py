"""The command line's error boundary: every subcommand, given bad input, exits 2 with one line naming
the culprit (flag, field or file:line) and loads no model; an unexpected exception is shown with its
traceback as a bug (exit 1)."""
import json
from pathlib import Path

import pytest

from pra import cli
from pra.models import AGENTS_DIR

SHIPPED = ", ".join(sorted(p.name for p in AGENTS_DIR.iterdir() if p.is_dir()))   # every one is named

ROW = '{"id": "%s", "question": "q?", "options": ["x", "y"], "answer": "%s"}\n'
BAD_JSON = '{"id": "a", "question": "q?", "options": ["x", "y"], "answer": "A"}\n' \
           '{"id": "b", "question": "q?", "options": ["x", "y"], "answer": B}\n'
NOT_UTF8 = b'{"id": "a", "question": "q?", "options": ["x", "y"], "answer": "A"}\n' \
           b'{"id": "b", "question": "q\xff?", "options": ["x", "y"], "answer": "B"}\n'
FILES = {
    "empty.jsonl": b"",
    "bad.jsonl": BAD_JSON.encode(),
    "latin1.jsonl": NOT_UTF8,
    "notyaml.yaml": b"method: cot\nlimit: 3: 4\n",
    "badsearch.yaml": b"method: pra\nsearch:\n  beams: 3\n",
    "features.jsonl": b"",
    "badsuite.yaml": b"defaults: {benchmark: medqa}\nruns:\n  - {out: a, method: direct}\n"
                     b"  - {out: b, method: pra, search: {beam_width: 0}}\n",
    # issue 37: ids, rows and types that used to slip through or end in a traceback
    "rotid.jsonl": (ROW % ("q", "A") + ROW % ("q@r1", "A")).encode(),
    "dup.jsonl": (ROW % ("a", "A") + ROW % ("b", "A") + ROW % ("a", "B")).encode(),
    "listanswer.jsonl": (ROW % ("a", "A")).replace('"answer": "A"', '"answer": ["A"]').encode(),
    "nooptions.jsonl": b'{"id": "a", "question": "q?", "answer": "A"}\n',
    "shard1.yaml": b"method: direct\nshard: 1\n",
    "policy5.yaml": b"method: direct\npolicy: 5\n",
    "controller.yaml": b"method: pra\nsearch_controller: 0.5\n",
    "seedlist.yaml": b"method: direct\nseed: [1]\n",
    "nanrecipe.yaml": b"method: pra\nsearch:\n  temperature: .nan\n",
    "trainbad.yaml": b"train:\n  lr: fast\n",
    "labels-noopt.jsonl": b'{"id": "s1", "question_id": "q", "question": "q?", "gold": "A", "steps": [], "step": "x", '
                          b'"step_index": 0, "docs": [], "trace": 0, "judge_label": 1.0}\n',
    # runs for show / compare / merge
    **{f"{run}/config.json": json.dumps({"benchmark": "medqa", "method": "direct", "policy": "p", "limit": 2,
                                         "benchmark_hash": digest}).encode()
       for run, digest in (("runa", "1111"), ("runb", "2222"), ("nocorrect", "1111"), ("strreward", "1111"),
                           ("badfinal", "1111"), ("markup", "1111"))},
    "runa/records.jsonl": b'{"id": "medqa-0", "correct": true}\n{"id": "medqa-1", "correct": false}\n',
    "runb/records.jsonl": b'{"id": "medqa-0", "correct": true}\n{"id": "medqa-1", "correct": true}\n',
    "nocorrect/records.jsonl": b'{"id": "medqa-0", "correct": true}\n{"id": "medqa-1"}\n',
    "strreward/records.jsonl": b'{"id": "medqa-0", "gold": "A", "prediction": "A", "correct": true, "steps": [{"text": "s", "reward": "high"}]}\n',
    "badfinal/records.jsonl": json.dumps({"id": "medqa-0", "gold": "A", "prediction": "A", "correct": True, "answers": ["A"], "scores": [1.0],
                                          "final": [7], "tree": [{"step": {"text": "s"}, "parent": None, "depth": 1,
                                                                  "score": 1.0, "kept": True, "answer": "A"}]}).encode() + b"\n",
    "markup/records.jsonl": b'{"id": "medqa-0", "correct": true}\n{"id": "medqa-1", "correct": "[/bold]"}\n',
    "stale/config.json": json.dumps({"benchmark": "medqa", "method": "direct", "policy": "p", "limit": 2, "shard": "0/1",
                                     "benchmark_hash": "0" * 16}).encode(),
    "stale/records.jsonl": b'{"id": "medqa-0", "correct": true}\n',
    "halfagent/adapter_config.json": b'{"base_model_name_or_path": "smollm2-135m-instruct"}',
}

# (argv, what the one error line must contain); {tmp} is the test's folder.
CASES = [
    (["eval", "--policy", "no-such-model", "--method", "direct", "--out", "{tmp}/run"], "--policy no-such-model: not an embedded model or a folder, and not in the hub cache while the hub is "
     "unreachable (embedded models: smollm2-135m-instruct"),
    (["eval", "--recipe", "pra-cpu", "--reward-agent", "/nonexistent", "--out", "{tmp}/run"], "--reward-agent /nonexistent: no such model folder"),
    (["eval", "--recipe", "pra-cpu", "--reward-agent", "/nonexistent"], "; shipped agents: " + SHIPPED),
    (["eval", "--recipe", "{tmp}/notyaml.yaml"], "notyaml.yaml:2:"),
    (["eval", "--recipe", "{tmp}/badsearch.yaml"], "badsearch.yaml: unknown search field(s) beams"),
    (["eval", "--recipe", "pra-cpu", "--beam-width", "0"], "--beam-width (search.beam_width) must be at least 1"),
    (["eval", "--recipe", "pra-cpu", "--search", "threshold:1.5"], "θ must be between 0 and 1"),
    (["eval", "--method", "direct", "--search", "threshold:abc"], "--search (search_controller) is ignored by --method direct"),
    (["eval", "--method", "cot", "--samples", "8"], "--samples (samples) is ignored by --method cot"),
    (["eval", "--method", "beam"], "--method: unknown method 'beam'"),
    (["eval", "--limit", "0"], "--limit (limit) must be at least 1"),
    (["eval", "--method", "rag", "--corpus", "no-such-corpus"], "--corpus no-such-corpus: no built corpus"),
    (["eval", "--method", "direct", "--benchmark", "{tmp}/empty.jsonl", "--out", "{tmp}/run"], "empty.jsonl: no questions"),
    (["eval", "--method", "direct", "--benchmark", "{tmp}/bad.jsonl", "--out", "{tmp}/run"],
     "bad.jsonl:2: invalid JSON: Expecting value (column 64)"),
    (["eval", "--method", "direct", "--benchmark", "{tmp}/latin1.jsonl", "--out", "{tmp}/run"],
     "latin1.jsonl:2: not UTF-8: byte 0xff at column 27"),
    (["eval", "--benchmark", "medmcqa-train", "--method", "direct"], "'medmcqa-train' is training data"),
    (["eval", "--suite", "report-cpu", "--method", "cot"], "--suite: runs take their settings from the suite file"),
    (["eval", "--suite", "no-such-suite"], "no suite file 'no-such-suite'"),
    (["eval", "--suite", "{tmp}/badsuite.yaml"], "badsuite.yaml, run 2: --beam-width (search.beam_width) must be at least 1"),
    (["search", "--question", "q?", "--option", "only one"], "--option: give at least two"),
    (["retrieve", "scurvy", "--k", "0"], "--k must be at least 1, got 0"),
    (["retrieve", ""], "TEXT: the query is empty"),
    (["label", "--recipe", "no-such-recipe"], "no recipe file 'no-such-recipe'"),
    (["train", "--labels", "{tmp}/missing.jsonl"], "missing.jsonl: no labelled steps"),
    (["probe", "train", "--features", "{tmp}/features.jsonl", "--out", "{tmp}/p.pt"], "features.jsonl: no step features"),
    (["probe", "eval", "--probe", "p.pt", "--train-features", "f.jsonl", "--test", "nameless"], "--test takes NAME=FEATURES.jsonl"),
    (["probe", "table", "{tmp}/missing.jsonl"], "missing.jsonl: no results file"),
    (["index", "build", "--kind", "annoy"], "unknown index kind 'annoy'"),
    (["index", "build", "--corpus", "no-such-corpus"], "no built corpus at"),
    (["show", "{tmp}/no-run"], "no-run/config.json: cannot read"),
    (["list", "datasets"], "unknown kind 'datasets'"),
    (["compare", "{tmp}/one-run"], "pra compare needs at least two run folders"),
    (["report", "{tmp}/no-runs", "--out", "{tmp}/report"], "no-runs: no such run folder"),
    (["merge", "{tmp}/merged", "{tmp}/no-shard"], "no-shard/config.json: cannot read the run's config"),
    # issue 37, item by item
    (["eval", "--method", "direct", "--permute", "cyclic", "--benchmark", "{tmp}/rotid.jsonl", "--out", "{tmp}/run"],
     "rotid.jsonl:2: field 'id' 'q@r1' ends like a rotated question's id"),
    (["eval", "--method", "direct", "--benchmark", "{tmp}/dup.jsonl", "--out", "{tmp}/run"],
     "dup.jsonl:3: field 'id' duplicate 'a', already at {tmp}/dup.jsonl:1"),
    (["compare", "{tmp}/runa", "{tmp}/runb"], "(questions hash 2222): different question sets"),
    (["merge", "{tmp}/merged", "{tmp}/stale"], "medqa now holds other questions"),
    (["search", "--question", "q?", *[a for i in range(27) for a in ("--option", f"o{i}")]], "--option: at most 26 (A to Z), got 27"),
    (["eval", "--method", "direct", "--backend", "llamacpp", "--engine-arg", "n_ctxx=5", "--sample", "2", "--out", "{tmp}/run"],
     "--engine-arg n_ctxx: the llamacpp backend takes n_ctx, max_seqs, n_batch, threads"),
    (["eval", "--method", "direct", "--backend", "vllm", "--dtype", "int8", "--sample", "2", "--out", "{tmp}/run"],
     "--dtype int8 (torch dynamic quantization) is for --backend transformers"),
    (["eval", "--method", "pra", "--agent-backend", "llamacpp", "--agent-dtype", "int8", "--sample", "2", "--out", "{tmp}/run"],
     "--agent-dtype applies to --agent-backend transformers, not llamacpp"),
    (["perf", "backends", "--paths", "nonsense"], "unknown path nonsense"),
    (["perf", "label", "--labels", "{tmp}"], "no label_config.json (is it a `pra label` folder?)"),
    (["agent", "evaluate", "--no-such-flag"], "the following arguments are required: agent"),
    (["runs", "quality", "x"], "the following arguments are required: --judge, --out"),
    (["runs", "selection", "{tmp}/runa"], "runa: its records keep no search tree (PRA runs keep one"),
    (["runs", "theta", "{tmp}/runa"], "runa/config.json: no search_controller (is {tmp}/runa a PRA run?)"),
    (["corpus", "build", "medcorp-huge"], "invalid choice: 'medcorp-huge'"),
    (["eval", "--method", "direct", "--backend", "openai", "--base-url", "http://u:SECRET@h:1?api_key=TOKEN",
      "--read-timeout", "0"], "--read-timeout must be a finite number of seconds above 0"),
    (["eval", "--method", "direct", "--backend", "openai", "--api-key-env", "PRA_NO_SUCH_VARIABLE"],
     "--api-key-env PRA_NO_SUCH_VARIABLE: no such environment variable is set"),
    (["eval", "--method", "direct", "--backend", "openai", "--out", "{tmp}/run"], "--backend openai needs --base-url"),
    (["eval", "--recipe", "pra-cpu", "--temperature", "nan"], "--temperature (search.temperature) must be a finite number"),
    (["eval", "--recipe", "pra-cpu", "--temperature", "inf"], "--temperature (search.temperature) must be a finite number"),
    (["eval", "--recipe", "{tmp}/nanrecipe.yaml"], "--temperature (search.temperature) must be a finite number"),
    (["eval", "--recipe", "{tmp}/shard1.yaml"], "shard1.yaml: field shard must be text or null, got 1"),
    (["eval", "--recipe", "{tmp}/policy5.yaml"], "policy5.yaml: field policy must be text, got 5"),
    (["eval", "--recipe", "{tmp}/controller.yaml"], "controller.yaml: field search_controller must be text, got 0.5"),
    (["eval", "--recipe", "{tmp}/seedlist.yaml"], "seedlist.yaml: field seed must be an integer, got [1]"),
    (["train", "--batch-size", "0"], "--batch-size (batch_size) must be at least 1, got 0"),
    (["train", "--lr", "-1"], "--lr (lr) must be above 0, got -1.0"),
    (["train", "--lr", "nan"], "--lr (lr) must be a finite number above 0, got nan"),
    (["train", "--recipe", "{tmp}/trainbad.yaml"], "trainbad.yaml: train: field lr must be a number, got 'fast'"),
    (["train", "--labels", "{tmp}/labels-noopt.jsonl"], "labels-noopt.jsonl: record 1 (id 's1'): field 'options' missing"),
    (["label", "--batch-size", "0"], "--batch-size (batch_size) must be at least 1, got 0"),
    (["probe", "features", "--labels", "l.jsonl", "--out", "f.jsonl", "--dtype", "float33"], "--dtype: unknown dtype 'float33'"),
    (["probe", "features", "--labels", "l.jsonl", "--out", "f.jsonl", "--batch-size", "0"], "--batch-size (batch_size) must be"),
    (["probe", "train", "--features", "f.jsonl", "--out", "p.pt", "--val-fraction", "nan"], "--val-fraction (val_fraction) must be"),
    (["eval", "--method", "direct", "--benchmark", "{tmp}/listanswer.jsonl", "--out", "{tmp}/run"],
     "listanswer.jsonl:1: field 'answer' must be one of A, B, got ['A']"),
    (["eval", "--method", "direct", "--benchmark", "{tmp}/nooptions.jsonl", "--out", "{tmp}/run"],
     "nooptions.jsonl:1: field 'options' is missing"),
    (["show", "{tmp}/strreward"], "record 1 (id 'medqa-0') cannot be drawn: a step's reward must be a number, got 'high'"),
    (["show", "{tmp}/badfinal"], "record 1 (id 'medqa-0') cannot be drawn: final must be a node index from 0 to 0, got 7"),
    (["compare", "{tmp}/runa", "{tmp}/nocorrect"], "nocorrect: record 2 (id 'medqa-1') has no 'correct' field"),
    (["compare", "{tmp}/runa", "{tmp}/markup"], "has 'correct' '[/bold]' (expected true or false)"),
    (["eval", "--recipe", "pra-cpu", "--reward-agent", "{tmp}/halfagent", "--limit", "1", "--out", "{tmp}/run"],
     "halfagent has adapter_config.json but not its weights (adapter_model.safetensors): an export cut short?"),
]


@pytest.fixture
def offline(monkeypatch):
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


@pytest.mark.parametrize("argv, culprit", CASES, ids=[" ".join(a[:3]) + f" [{i}]" for i, (a, _) in enumerate(CASES)])
def test_bad_input_is_one_line_and_exit_2(argv, culprit, tmp_path, capsys, offline, monkeypatch):
    for name, data in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    monkeypatch.setattr("pra.backends.transformers_backend.TransformersBackend.__init__",
                        lambda *a, **k: pytest.fail("a model was loaded for bad input"))
    with pytest.raises(SystemExit) as stop:
        cli.main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2, err
    verb = " ".join(argv[:2]) if argv[0] in cli.TOOLS else argv[0]    # a tool's errors name it: pra perf backends
    assert len(err) == 1 and err[0].startswith(f"pra {verb}: error: "), err
    assert culprit.replace("{tmp}", str(tmp_path)) in err[0]
    assert not (tmp_path / "run").exists()          # nothing written for a run that never started


def test_every_subcommand_has_a_bad_input_case():
    commands = set(cli.build_parser()._subparsers._group_actions[0].choices) - {"models"}   # models takes no input
    assert commands <= {argv[0] for argv, _ in CASES}


def test_an_unexpected_error_is_a_bug_with_its_traceback(monkeypatch, capsys):
    def broken(args):
        return {}["missing"]
    monkeypatch.setattr(cli, "cmd_retrieve", broken)
    with pytest.raises(SystemExit) as stop:
        cli.main(["retrieve", "scurvy"])
    err = capsys.readouterr().err
    assert stop.value.code == 1
    assert "Traceback" in err and "KeyError: 'missing'" in err and "this is a bug in pra" in err


def test_skip_bad_says_how_many_rows_and_which(smollm2, tmp_path, capsys):
    from eval.run import EvalConfig, run_eval

    bench = tmp_path / "bad.jsonl"
    bench.write_text(BAD_JSON)
    summary = run_eval(EvalConfig(benchmark=str(bench), method="direct", limit=None, skip_bad=True,
                                  out=str(tmp_path / "run")), policy=smollm2)
    assert summary["n"] == 1 and summary["skipped_bad_rows"] == 1
    assert f"--skip-bad: skipped 1 bad row(s): {bench}:2: invalid JSON: Expecting value (column 64)" in capsys.readouterr().err


def test_rich_markup_in_names_is_printed_as_text(tmp_path, capsys):
    """Names a user chooses (a corpus, a policy folder, a step's text) reach the terminal through rich:
    brackets in them are shown as written, never read as markup (a stray ``[/bold]`` used to raise)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"benchmark": "medqa", "method": "cot", "policy": "p[/bold]",
                                                 "corpus": "no-such[/corpus]"}))
    (run / "records.jsonl").write_text(json.dumps(
        {"id": "medqa-0", "gold": "A", "prediction": "B", "correct": False, "forced": False,
         "steps": [{"text": "Step 1: [/red] [bold]x", "searched": True, "doc_ids": ["d1"]}]}) + "\n")
    cli.main(["show", str(run), "--print"])
    out = capsys.readouterr().out
    assert "[/red] [bold]x" in out and "no-such[/corpus]" in out
    cli._table("cot on x[/y] (p[/bold])", {"n": "[/oops]", "accuracy": 0.5}, {"n": "n", "accuracy": "accuracy"})
    assert "[/oops]" in capsys.readouterr().out


def test_search_takes_eleven_options_and_can_answer_the_last(monkeypatch, capsys, offline):
    """`pra search` letters every option (A to Z): the 11th, K, is asked and can be the answer (it used to
    be dropped by a zip with "ABCDEFGHIJ")."""
    from search.engine import Engine, SearchConfig, Trace
    from tests.fakes import ScriptedPolicy

    asked = []

    def run_question(q, cfg):
        asked.append(q)
        policy = ScriptedPolicy(lambda question, step, i: "Step 1: the last option fits; the answer is (K)")
        (trace,) = Engine(policy, SearchConfig(max_steps=2, step_tokens=16)).run([Trace(q)])
        return trace

    monkeypatch.setattr("eval.run.run_question", run_question)
    cli.main(["search", "--method", "cot", "--question", "Which one?", *[a for i in range(11) for a in ("--option", f"o{i}")]])
    (q,) = asked
    assert list(q.options) == list("ABCDEFGHIJK") and q.options["K"] == "o10"
    assert "answer: (K) o10" in capsys.readouterr().out
