"""The command line's error boundary: every subcommand, given bad input, exits 2 with one line naming
the culprit (flag, field or file:line) and loads no model; an unexpected exception is shown with its
traceback as a bug (exit 1)."""
from pathlib import Path

import pytest

from pra import cli

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
}

# (argv, what the one error line must contain); {tmp} is the test's folder.
CASES = [
    (["eval", "--policy", "no-such-model", "--method", "direct", "--out", "{tmp}/run"], "--policy no-such-model: not an embedded model or a folder, and not in the hub cache while the hub is "
     "unreachable (embedded models: smollm2-135m-instruct"),
    (["eval", "--recipe", "pra-cpu", "--reward-agent", "/nonexistent", "--out", "{tmp}/run"], "--reward-agent /nonexistent: no such model folder"),
    (["eval", "--recipe", "pra-cpu", "--reward-agent", "/nonexistent"], "; shipped agents: pra-smollm2-cpu"),
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
    (["compare", "{tmp}/one-run"], "pra compare needs at least two run folders"),
    (["report", "{tmp}/no-runs", "--out", "{tmp}/report"], "no-runs: no such run folder"),
    (["merge", "{tmp}/merged", "{tmp}/no-shard"], "no-shard/config.json: cannot read the run's config"),
]


@pytest.fixture
def offline(monkeypatch):
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


@pytest.mark.parametrize("argv, culprit", CASES, ids=[" ".join(a[:3]) + f" [{i}]" for i, (a, _) in enumerate(CASES)])
def test_bad_input_is_one_line_and_exit_2(argv, culprit, tmp_path, capsys, offline, monkeypatch):
    for name, data in FILES.items():
        (tmp_path / name).write_bytes(data)
    monkeypatch.setattr("pra.backends.transformers_backend.TransformersBackend.__init__",
                        lambda *a, **k: pytest.fail("a model was loaded for bad input"))
    with pytest.raises(SystemExit) as stop:
        cli.main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2, err
    assert len(err) == 1 and err[0].startswith(f"pra {argv[0]}: error: "), err
    assert culprit.replace("{tmp}", str(tmp_path)) in err[0]
    assert not (tmp_path / "run").exists()          # nothing written for a run that never started


def test_every_subcommand_has_a_bad_input_case():
    commands = set(cli.build_parser()._subparsers._group_actions[0].choices) - {"models"}   # models takes no input
    assert commands <= {argv[0] for argv, _ in CASES}

    (["list", "datasets"], "unknown kind 'datasets'"),

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
