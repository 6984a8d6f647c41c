"""Every committed run folder (eval/results/**/config.json) resumes under today's code: its records carry
the fingerprint its config gives (``eval.run_folder.fingerprint``), so ``pra eval`` with its settings
takes the folder rather than refusing it, and ``pra report``/``pra merge`` find no mix; committed label
sets and training runs keep the fingerprint ``pra.resume`` gives their settings."""
import json
from dataclasses import asdict, fields
from pathlib import Path

import pytest

from eval.methods import prompt_kind
from eval.run import EvalConfig, eval_config
from eval.run_folder import fingerprint, refusal, unread
from pra.prompts import policy_prompt_id
from pra.records import read_records
from pra.resume import fingerprint as settings_fingerprint
from training.label import PACING
from training.train import WHERE

RESULTS = Path(__file__).parent.parent / "eval" / "results"
CONFIGS = sorted(RESULTS.glob("**/config.json"))


def run_config(config: dict) -> dict:
    """The config ``pra eval`` builds today from a folder's settings (``eval.run.run_with_parts``): every
    EvalConfig field, today's id of the policy's prompt, the benchmark's hash."""
    cfg = eval_config({f.name: config[f.name] for f in fields(EvalConfig) if f.name in config})
    chat = config["policy_prompt"].startswith("chat-")
    return {**asdict(cfg), "policy_prompt": policy_prompt_id(chat, prompt_kind(cfg.method)),
            **({"benchmark_hash": config["benchmark_hash"]} if "benchmark_hash" in config else {})}


@pytest.mark.parametrize("config_file", CONFIGS, ids=lambda p: str(p.parent.relative_to(RESULTS)))
def test_a_committed_run_folder_resumes_with_its_config(config_file):
    config = json.loads(config_file.read_text())
    stamps = {r.get("fingerprint") for r in read_records(config_file.parent / "records.jsonl")}
    assert config["fingerprint"] == fingerprint(config)
    assert stamps <= {config["fingerprint"]}
    now = run_config(config)
    why = refusal(config, now, unread(now), stamped=config["fingerprint"])
    if config["policy_prompt"] == now["policy_prompt"]:
        assert why == []
    else:           # made with a prompt the code no longer writes (one-example): refused, naming only that
        assert why == [f"policy_prompt ({config['policy_prompt']!r} -> {now['policy_prompt']!r})"]


def test_there_are_committed_run_folders():
    assert len(CONFIGS) >= 90


@pytest.mark.parametrize("name, skip", [("label_config.json", PACING), ("training_args.json", WHERE)])
def test_committed_label_sets_and_training_runs_keep_their_fingerprint(name, skip):
    kept = [json.loads(p.read_text()) for p in RESULTS.glob(f"**/{name}")]
    kept = [k for k in kept if k.get("purpose") != "evidence-check"]    # training/evidence_check.py's own
    assert kept and all(k["fingerprint"] == settings_fingerprint(k, skip) for k in kept)
