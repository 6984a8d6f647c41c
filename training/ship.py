"""Ship a trained reward agent with the project: ``pra agent ship RUN NAME [--recipe cpu]``.

Copies the adapter of a finished ``pra train`` run into ``pra/agents/NAME`` (what ``--reward-agent NAME``
resolves), with its metrics, the labelling statistics and a model card written from them, so that the
card's numbers are the run's numbers.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

from pra.models import AGENTS_DIR, DEFAULT_REWARD_AGENT, EMBEDDED
from pra.options import flags_for
from pra.reward_agent import PROMPT_RECORD, shows_earlier_rewards
from pra.errors import MissingFile
from training.config import TrainConfig, load_config
from training.evaluate_agent import SEARCH_WHERE_DECIDED
from training.evidence_check import EVIDENCE_CHECK

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
HELD_OUT_KEYS = ("examples", "questions", "reward_auroc", "reward_auroc_ci", "reward_pr_auc", "untrained_reward_auroc",
                 "untrained_reward_auroc_ci", "untrained_reward_pr_auc", "reward_auroc_gain", "reward_auroc_gain_ci",
                 "answer_rule_reward_auroc", "answer_rule_reward_auroc_ci", "reward_auroc_minus_answer_rule",
                 "reward_auroc_minus_answer_rule_ci", "action_std", "untrained_action_std", "search_accuracy",
                 "untrained_search_accuracy", *SEARCH_WHERE_DECIDED, "untrained_search_accuracy_without_docs",
                 "untrained_action_median_without_docs")


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def _with_ci(value, ci) -> str:
    return _fmt(value) + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def teachers_line(label_cfg: dict) -> str:
    """What each teacher of the labels file did (label configs before ``teachers`` existed used both the
    judge and rollouts)."""
    said = {
        "judge": f"the judge `{label_cfg.get('judge')}` (the paper's teacher prompt with {label_cfg['docs']} retrieved "
                 f"`{label_cfg['corpus']}` passages and without them; margin shift for search labels)",
        "rollout": f"{label_cfg.get('rollouts')} Monte-Carlo rollouts per step by the policy (the share reaching the "
                   f"gold answer)",
        "goldprob": f"the gold probability: whether the step raises `{label_cfg['policy']}`'s permutation-averaged "
                    f"probability of the gold option's text (read in {label_cfg.get('goldprob_dtype') or 'the policy dtype'}); "
                    f"the same read with the step's {label_cfg['docs']} retrieved `{label_cfg['corpus']}` passages in "
                    f"the policy's context gives the margin shift for search labels",
    }
    return "; ".join(said[t] for t in label_cfg.get("teachers", ["judge", "rollout"]))


def search_line(metrics: dict) -> str:
    """The search readout where a threshold controller decides (prompts without documents) against
    always-searching there; a prompt with documents is labelled search by construction."""
    if metrics.get("search_accuracy_without_docs") is None:
        return ""
    diff = _with_ci(metrics.get("search_minus_always_without_docs"), metrics.get("search_minus_always_without_docs_ci"))
    return (f"\nSearch accuracy on the {metrics['prompts_without_docs']} prompts without documents, where a threshold"
            f" controller decides (a prompt with documents is labelled search by construction): "
            f"{_fmt(metrics['search_accuracy_without_docs'])} against always-searching's "
            f"{_fmt(metrics.get('always_search_accuracy_without_docs'))}, a difference of {diff}.")


def rule_line(metrics: dict) -> str:
    """The string-rule baseline's sentence: a step that states an answer ranked below one that does not."""
    if metrics.get("answer_rule_reward_auroc") is None:
        return ""
    rule = _with_ci(metrics["answer_rule_reward_auroc"], metrics.get("answer_rule_reward_auroc_ci"))
    over = _with_ci(metrics.get("reward_auroc_minus_answer_rule"), metrics.get("reward_auroc_minus_answer_rule_ci"))
    return (f"\nThe string rule that ranks every step stating an answer below every step that does not: reward AUROC"
            f" {rule}; trained minus the rule (paired): {over}.")


def subgroup_rows(metrics: dict) -> str:
    """One table row per held-out subgroup (``training.evaluate_agent.SUBGROUPS``) that has an AUROC."""
    rows = [f"| {name} | {group['examples']} | {_with_ci(group.get('untrained_reward_auroc'), group.get('untrained_reward_auroc_ci'))} | "
            f"{_with_ci(group.get('reward_auroc'), group.get('reward_auroc_ci'))} | "
            f"{_with_ci(group.get('reward_auroc_gain'), group.get('reward_auroc_gain_ci'))} |"
            for name, group in metrics.get("subgroups", {}).items() if group.get("reward_auroc") is not None]
    if not rows:
        return ""
    return ("\n\nBy subgroup of the held-out prompts (reward AUROC [95% CI]):\n\n"
            "| prompts | n | untrained | trained | gain |\n|---|---|---|---|---|\n" + "\n".join(rows))


def data_section(label_cfg: dict, label_stats: dict) -> str:
    """Where the labelled steps came from: policy traces labelled by teachers (``pra label``), or the
    planted-signal set (``training.evidence_check``)."""
    if label_cfg.get("purpose") == EVIDENCE_CHECK:
        return f"""- Questions: {label_stats['questions']} `medmcqa-train` questions (MedMCQA, MIT license; rows disjoint
  from every evaluation set) whose own explanation, as far as the agent reads it ({label_cfg['max_doc_chars']}
  characters), names the gold option's text; seed {label_cfg['seed']}.
- Steps: {label_stats['steps']}, two per question: `The correct choice is <option>.` with the gold option (label 1)
  and with a wrong option neither document names (label 0); documents: the question's own explanation and
  an unrelated one from `{label_cfg['corpus']}`, in a seeded order. The label can be read from the
  documents and from nothing else in the prompt (`training/evidence_check.py`)."""
    return f"""- Questions: the first {labelled(label_cfg, label_stats)} of `medmcqa-train` (MedMCQA, MIT license; rows disjoint
  from every evaluation set), {label_stats.get('steps', 'n/a')} steps
  ({_fmt(label_stats.get('steps_per_trace'))} per trace).
- Traces: `{label_cfg['policy']}` (greedy step-by-step CoT, at most {label_cfg['max_steps']} steps of
  {label_cfg['step_tokens']} tokens).
- Teachers: {teachers_line(label_cfg)}.
- Label statistics: {json.dumps({k: v for k, v in label_stats.items() if k not in ('questions', 'steps', 'steps_per_trace')})}."""


def labelled(label_cfg: dict, label_stats: dict) -> int:
    """How many questions the labels hold: the first ones of ``limit`` (a run that grows across sessions
    labels its questions in the benchmark's order, so a shorter ``--limit`` labels the same questions)."""
    return label_stats.get("questions", label_cfg["limit"])


def training_extent(args: dict) -> str:
    """How much of the data the run saw: its epochs, or, where ``max_steps`` stopped it first, the share
    of an epoch its optimizer steps covered (a capped run's steps would otherwise read as a whole epoch)."""
    steps, examples = args["optimizer_steps"], args["train_examples"]
    seen = steps * args["effective_batch"]
    if args.get("max_steps") and seen < examples * args["epochs"]:
        return (f"{steps} optimizer steps (stopped by max_steps: {seen} examples seen, {seen / examples:.2f} of an "
                f"epoch of {examples} examples)")
    return f"{args['epochs']} epoch(s), {steps} optimizer steps on {examples} examples"


def label_command(label_cfg: dict, label_stats: dict, recipe: str, args: dict) -> str:
    if label_cfg.get("purpose") == EVIDENCE_CHECK:
        return (f"pra agent evidence-check --out {Path(args['labels']).parent} "
                f"--questions {label_cfg['questions']} --seed {label_cfg['seed']}")
    return f"pra label --recipe {recipe} --limit {labelled(label_cfg, label_stats)}"


def train_command(recipe: str, args: dict) -> str:
    """`pra train --recipe RECIPE` with the flags that made this run differ from the recipe."""
    flags = flags_for(TrainConfig, args, load_config(TrainConfig, "train", recipe, {}))
    return " ".join(["pra train --recipe", recipe, *flags])


def licenses_line(base: str, corpus: str | None) -> str:
    """The sources behind the agent: its backbone, the questions, the passages its labels read."""
    model = EMBEDDED.get(base)
    backbone = f"{model.source} ({model.license})" if model else f"`{base}` (its own licence)"
    passages = f"; the `{corpus}` passages: corpora/data/{corpus}/README.md" if corpus else ""
    return f"Licenses: {backbone}; MedMCQA (MIT){passages}."


def model_card(name: str, recipe: str, args: dict, metrics: dict, label_cfg: dict, label_stats: dict,
               earlier_rewards: bool) -> str:
    first, last = metrics["initial"], metrics["final"]
    rows = "\n".join(f"| {label} | {_with_ci(first.get(key), first.get(key + '_ci'))} | "
                     f"{_with_ci(last.get(key), last.get(key + '_ci'))} |"
                     for label, key in (("reward AUROC [95% CI]", "reward_auroc"), ("reward PR-AUC", "reward_pr_auc"),
                                        ("action readout p(s=1): std", "action_std"),
                                        ("action readout p(s=1): mean", "action_mean"),
                                        ("search accuracy", "search_accuracy"),
                                        ("search accuracy without documents (where θ decides)", "search_accuracy_without_docs"),
                                        ("always-search there", "always_search_accuracy_without_docs"),
                                        ("p(search) median there", "action_median_without_docs"),
                                        ("positive share", "positive_share"),
                                        ("steps", "examples"), ("questions", "questions")))
    losses = metrics["train_loss"]
    gain = _with_ci(metrics.get("reward_auroc_gain"), metrics.get("reward_auroc_gain_ci"))
    prompt = ("each earlier step with the teacher's target as its reward (at inference: the agent's own readout)"
              if earlier_rewards else "earlier steps without rewards, in training as at inference")
    docs = (" and, for each step, the same prompt without documents (what never-search and threshold controllers"
            " read)" if args["search_label"] == "always" and args.get("always_without_docs") else "")
    judge = label_stats.get("judge_positive")
    judge_note = (f" The judge rated {judge:.0%} of steps correct, so its reasoning label carries no signal here;"
                  f" the rollout share does." if judge is not None and judge >= 0.95 else "")
    default = " (the default)" if name == DEFAULT_REWARD_AGENT else ""
    autocast = (" under bf16 autocast, as trained (`pra agent evaluate` reads in float32, which can move them)"
                if args.get("bf16") else "")
    return f"""# Reward agent `{name}`

A LoRA adapter on `{args['base']}` that reads a PRA prompt (question, options, the reasoning so far,
documents when a search happened, the last step) and answers `r,s`: the step's reward
and whether to search. Use it with `pra eval --method pra --reward-agent {name}`{default} and any
policy: it never sees the policy's weights, only its text.

## Data
{data_section(label_cfg, label_stats)}{judge_note}

## Training
`{args['reward_label']}` reward targets, `{args['search_label']}` search labels{docs}; prompts show
{prompt}. LoRA r={args['lora_r']}
alpha={args['lora_alpha']} on {', '.join(args['lora_targets'])}, lr {args['lr']} ({args['scheduler']},
{args['warmup_steps']} warm-up steps), effective batch {args['effective_batch']}, {training_extent(args)}
({args['dropped_too_long']} dropped as longer than {args['max_tokens']} tokens). Training loss
{_fmt(losses[0]) if losses else 'n/a'} at the first step, {_fmt(losses[-1]) if losses else 'n/a'} at the last.

## Validation (held-out questions, {last.get('examples')} steps of {last.get('questions')} questions)
Reward AUROC / PR-AUC against the teacher's reward label (>= 0.5), the spread of the action readout
p(s=1), and search-action accuracy against the search label, read through the inference code path
(`RewardAgent.score`){autocast}. The untrained backbone is the same model without the adapter, read with the
same prompt on the same steps. Intervals: 95%, bootstrap over questions (a question's steps share a
trace).

| metric | untrained backbone | trained |
|---|---|---|
{rows}

Trained minus untrained reward AUROC (paired, same resamples): {gain}.{search_line(metrics)}{rule_line(metrics)}{subgroup_rows(metrics)}

## Reproduce
```
{label_command(label_cfg, label_stats, recipe, args)}
{train_command(recipe, args)}
pra agent ship {args['out']} {name} --recipe {recipe}
```
{licenses_line(args['base'], label_cfg.get('corpus'))}
"""


def ship(run: Path, name: str, recipe: str) -> Path:
    missing = [f for f in ADAPTER_FILES + ("metrics.json", "training_args.json") if not (run / f).exists()]
    if missing:
        raise MissingFile(f"{run}: no {', '.join(missing)}; is it a finished LoRA `pra train` run?")
    args = json.loads((run / "training_args.json").read_text())
    metrics = json.loads((run / "metrics.json").read_text())
    labels = Path(args["labels"]).parent
    label_cfg = json.loads((labels / "label_config.json").read_text())
    label_stats = json.loads((labels / "label_stats.json").read_text())
    final = AGENTS_DIR / name
    # Written beside its place and renamed into it at the end: a ship cut short leaves no folder that
    # --reward-agent NAME would load (and no earlier agent of that name half replaced).
    folder = final.with_name(f".{name}.tmp-{os.getpid()}")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    try:
        for f in ADAPTER_FILES:
            shutil.copy2(run / f, folder / f)
        if (run / PROMPT_RECORD).exists():                # a run without one was trained on the older prompt
            shutil.copy2(run / PROMPT_RECORD, folder / PROMPT_RECORD)
        summary = ({k: metrics.get(k) for k in HELD_OUT_KEYS} | {k: metrics[k] for k in ("initial", "final")}
                   | {"subgroups": metrics.get("subgroups", {}), "train_loss": metrics["train_loss"]})
        (folder / "metrics.json").write_text(json.dumps(summary, indent=2))
        (folder / "label_stats.json").write_text(json.dumps(label_stats, indent=2))
        (folder / "README.md").write_text(model_card(name, recipe, args, metrics, label_cfg, label_stats,
                                                     shows_earlier_rewards(str(run))))
        old = final.with_name(f".{name}.old-{os.getpid()}")
        if final.exists():
            final.rename(old)
        folder.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return final


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a finished `pra train` output folder")
    ap.add_argument("name", help="the agent's name under pra/agents")
    ap.add_argument("--recipe", default="cpu", help="the training recipe that made it (for the card)")
    a = ap.parse_args()
    print(ship(a.run, a.name, a.recipe))


if __name__ == "__main__":
    main()
