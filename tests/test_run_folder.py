"""A run folder knows what it holds: records carry their settings' fingerprint, a rerun with other
settings is refused (``--force-new`` sets the old records aside), one process writes at a time, the
summary counts unique ids, and merge and report refuse a folder whose records mix settings."""
import json
import os
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from eval.merge import merge_shards
from eval.analysis.report.runs import load_run
from eval.run import EvalConfig, run_eval
from eval.run_folder import differences, fingerprint
from pra.errors import UserError
from pra.folder_lock import exclusive
from pra.records import read_records

PRA = [sys.executable, "-m", "pra.cli"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


def direct(out: Path, **kw) -> EvalConfig:
    return EvalConfig(**{"benchmark": "medqa", "method": "direct", "limit": 2, "out": str(out), **kw})


def test_fingerprint_covers_settings_not_places():
    a = {"method": "cot", "policy": "p", "out": "x", "limit": 5, "search": {"beam_width": 1}}
    assert fingerprint(a) == fingerprint({**a, "out": "y", "limit": 50, "shard": "0/2", "max_active": 3})
    b = {**a, "policy": "q", "search": {"beam_width": 2}}
    assert fingerprint(a) != fingerprint(b)
    assert differences(a, b) == ["policy ('p' -> 'q')", "search.beam_width (1 -> 2)"]


def test_fingerprint_leaves_out_what_the_method_never_reads():
    cot = {"method": "cot", "policy": "p", "reward_agent": "a", "corpus": "c", "samples": 4, "search": {}}
    assert fingerprint(cot) == fingerprint({**cot, "reward_agent": "b", "corpus": "d", "samples": 8})
    assert differences(cot, {**cot, "reward_agent": "b"}) == []
    pra = {**cot, "method": "pra"}
    assert fingerprint(pra) != fingerprint({**pra, "reward_agent": "b"})
    assert fingerprint(pra) == fingerprint({**pra, "samples": 8})
    assert fingerprint({**cot, "method": "sc"}) != fingerprint({**cot, "method": "sc", "samples": 8})


def test_a_folder_made_with_another_policy_prompt_is_refused_naming_it(smollm2, tmp_path):
    """Configs name the policy prompt's id (``pra.prompts.policy_prompt_id``); it is not hashed into the
    fingerprint (``pra.resume.DERIVED``) but a folder whose config names another prompt is refused."""
    out = tmp_path / "run"
    run_eval(direct(out), policy=smollm2)
    config = json.loads((out / "config.json").read_text())
    assert config["policy_prompt"].startswith("chat-")
    (out / "config.json").write_text(json.dumps({**config, "policy_prompt": "chat-an0ld0ne0000"}))
    with pytest.raises(UserError, match=r"differ in policy_prompt \('chat-an0ld0ne0000' -> 'chat-"):
        run_eval(direct(out, limit=3), policy=smollm2)
    (out / "config.json").write_text(json.dumps(config))
    assert run_eval(direct(out, limit=3), policy=smollm2)["fingerprint"] == config["fingerprint"]


def test_rerun_with_other_settings_is_refused_and_force_new_sets_aside(smollm2, tmp_path):
    out = tmp_path / "run"
    first = run_eval(direct(out), policy=smollm2)
    records = list(read_records(out / "records.jsonl"))
    assert len(records) == 2 and {r["fingerprint"] for r in records} == {first["fingerprint"]}
    # Other settings: refused before anything loads (gemma3-270m is never loaded here), naming the field.
    with pytest.raises(UserError, match=r"differ in policy \('smollm2-135m-instruct' -> 'gemma3-270m'\).*--force-new"):
        run_eval(replace(direct(out), policy="gemma3-270m", limit=3))
    with pytest.raises(UserError, match=r"differ in method \('direct' -> 'cot'\)"):
        run_eval(replace(direct(out), method="cot"))
    assert json.loads((out / "config.json").read_text())["policy"] == "smollm2-135m-instruct"   # not overwritten
    # The same settings with a larger limit resume.
    assert run_eval(direct(out, limit=3), policy=smollm2)["n"] == 3
    # --force-new: the old records are set aside and the folder starts afresh.
    other = direct(out)
    other.search.seed = 1
    summary = run_eval(other, policy=smollm2, force_new=True)
    assert summary["n"] == 2 and summary["fingerprint"] != first["fingerprint"]
    assert len(list(out.glob("records.jsonl.replaced-*"))) == 1


def test_summary_counts_unique_ids(smollm2, tmp_path):
    out = tmp_path / "run"
    run_eval(direct(out), policy=smollm2)
    lines = (out / "records.jsonl").read_text().splitlines()
    (out / "records.jsonl").write_text("\n".join(lines + lines) + "\n")     # a doubled folder (old two-writer bug)
    assert run_eval(direct(out), policy=smollm2)["n"] == 2


def test_a_held_folder_refuses_a_second_writer_at_once_naming_the_pid(tmp_path):
    out = tmp_path / "run"
    with exclusive(out / ".lock") as holder:
        assert holder is None
        done = subprocess.run([*PRA, "eval", "--benchmark", "medqa", "--method", "direct", "--limit", "2",
                               "--out", str(out)], capture_output=True, text=True, env=ENV, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"pra eval: error: {out}: another pra process (PID {os.getpid()}) is writing this "
                                   "run folder; wait for it to finish or use another --out")
    assert not (out / "records.jsonl").exists()


@pytest.mark.slow
def test_two_writers_started_at_once_never_double(tmp_path):
    out = tmp_path / "run"
    cmd = [*PRA, "eval", "--benchmark", "medqa", "--method", "direct", "--limit", "2", "--out", str(out)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV) for _ in range(2)]
    results = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes in ([0, 0], [0, 2])       # 0, 0 only if one finished before the other reached the folder
    for code, err in results:
        if code == 2:
            assert "another pra process (PID" in err and err.count("pra eval: error:") == 1
    ids = [r["id"] for r in read_records(out / "records.jsonl")]
    assert len(ids) == len(set(ids)) == 2
    assert json.loads((out / "summary.json").read_text())["n"] == 2


def _records(folder: Path, fps: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"benchmark": "medqa", "method": "cot", "policy": "p",
                                                    "limit": 4, "shard": None, "out": str(folder)}))
    from pra.benchmarks import load_eval_benchmark
    qs = load_eval_benchmark("medqa", limit=len(fps)).questions
    (folder / "records.jsonl").write_text("".join(json.dumps(
        {"id": q.id, "correct": True, "forced": False, "fingerprint": fp}) + "\n" for q, fp in zip(qs, fps)))


def test_merge_and_report_refuse_records_of_mixed_settings(tmp_path):
    mixed = tmp_path / "mixed"
    _records(mixed, ["aaaa", "aaaa", "bbbb"])
    with pytest.raises(UserError, match=r"mixed/records.jsonl: records made with 2 different settings \(aaaa: 2 records, bbbb: 1 records\)"):
        load_run(mixed)
    with pytest.raises(UserError, match="the folder mixes runs"):
        merge_shards(tmp_path / "out", [mixed])
    clean = tmp_path / "clean"
    _records(clean, ["aaaa", "aaaa"])
    assert len(load_run(clean).records) == 2


def test_the_fingerprint_leaves_out_the_settings_the_method_table_says_a_method_does_not_read():
    """``READ_BY`` comes from ``eval.methods``; pinned here, because a change to it changes the
    fingerprints of committed run folders (agent_base_url is never in one: NO_EFFECT)."""
    from eval.run_folder import NO_EFFECT, READ_BY

    pulse = {"pulse-front", "pulse-step", "ircot"}
    assert {k: set(v) for k, v in READ_BY.items() if k not in NO_EFFECT} == {
        "reward_agent": {"pra"}, "agent_backend": {"pra"}, "agent_dtype": {"pra"}, "search_controller": {"pra", "pulse-front", "pulse-step"},
        "samples": {"sc", "rag-sc"}, "corpus": {"rag", "rag-sc", "pra", *pulse},
        "retrieval": {"rag", "rag-sc", "pra"}, "rag_docs": {"rag", "rag-sc", *pulse},
        "qwc_pool": {"qwc"}, "qwc_k": {"qwc"}}


def test_one_refusal_for_run_folders_label_sets_and_training_runs(tmp_path):
    """pra.resume: the settings compared flat (a block's fields one by one), pacing fields skipped, a
    field missing on one side equal to None on the other; the message names each difference."""
    from pra.resume import check, fingerprint

    old = {"policy": "p", "limit": 5, "policy_prompt": {"steps": "a", "docs": "b"}, "goldprob_dtype": None}
    old["fingerprint"] = fingerprint(old, {"limit"})
    assert check(tmp_path, "labels", old, {**old, "limit": 9}, skip={"limit"}) == old["fingerprint"]
    check(tmp_path, "labels", {k: v for k, v in old.items() if k != "goldprob_dtype"}, old, skip={"limit"})
    with pytest.raises(UserError, match=r"holds labels made with other settings: they differ in "
                                        r"policy_prompt\.docs \('b' -> 'c'\); resume with the same settings"):
        check(tmp_path, "labels", old, {**old, "policy_prompt": {"steps": "a", "docs": "c"}}, skip={"limit"})


def test_a_changed_setting_is_refused_alike_in_run_folders_label_sets_and_training_runs(tmp_path):
    """Run folders, label sets and training runs keep their settings' fingerprint beside them and refuse
    other settings with the one message of ``pra.resume.refuse``, naming the setting."""
    from eval.run_folder import open_run_folder
    from training.config import LabelConfig, TrainConfig
    from training.label import _check_settings
    from training.train import check_run

    shape = (r"^{folder} holds {holds} made with other settings: they differ in {name} \({old} -> {new}\); "
             r"resume with the same settings, use another --out")
    run = {"method": "cot", "policy": "p", "out": str(tmp_path / "run"), "search": {"beam_width": 1}}
    with open_run_folder(tmp_path / "run", run) as fp:
        (tmp_path / "run" / "records.jsonl").write_text(json.dumps({"id": "q1", "fingerprint": fp}) + "\n")
    with pytest.raises(UserError, match=shape.format(folder=tmp_path / "run", holds="records", name="policy",
                                                    old="'p'", new="'q'") + ", or --force-new"):
        with open_run_folder(tmp_path / "run", {**run, "policy": "q"}):
            pass

    labels = tmp_path / "labels"
    labels.mkdir()
    _check_settings(labels / "label_config.json", LabelConfig(out=str(labels)), "training", chat=True)
    kept = json.loads((labels / "label_config.json").read_text())
    assert kept["fingerprint"] and kept["policy_prompt"]
    _check_settings(labels / "label_config.json", LabelConfig(out=str(labels), limit=5), "training", chat=True)
    with pytest.raises(UserError, match=shape.format(folder=labels, holds="labels", name="rollouts", old="4", new="3")):
        _check_settings(labels / "label_config.json", LabelConfig(out=str(labels), rollouts=3), "training", chat=True)

    agent = tmp_path / "agent"
    record = {**asdict(TrainConfig(out=str(agent))), "train_examples": 10}
    check_run(agent, record)
    assert json.loads((agent / "training_args.json").read_text())["fingerprint"]
    check_run(agent, record)
    with pytest.raises(UserError, match=shape.format(folder=agent, holds="a training run", name="lr",
                                                    old="3e-05", new="0.001")):
        check_run(agent, {**record, "lr": 1e-3})
