"""Held-out metrics of a reward agent: ``pra agent evaluate AGENT --recipe cpu``.

One code path for ``pra train``'s validation (step 0 is the untrained backbone, then every
``eval_every`` steps and the end) and for an agent trained before (a shipped one): the held-out steps
are the validation questions of ``split_by_question``, read through ``RewardAgent.score`` as the engine
reads them. Per evaluation: reward AUROC and PR-AUC against the teacher's label (>= 0.5), the spread
of the action readout p(s=1) (a constant readout cannot steer a threshold controller) and search
accuracy against the search label. The steps of one question share its trace, so they are not
independent draws: the AUROC's 95% interval comes from a bootstrap that resamples questions, and the
trained-minus-untrained gain from the same resamples (paired); ``--versus AGENT`` reads a second agent
on the same steps and gives the paired difference between the two. The summary also gives the AUROCs
per subgroup of the held-out prompts (``SUBGROUPS``): with and without documents, steps that answer and
steps that do not, and prompts whose documents include the question's own explanation, where what
the teacher rewards can be read from the prompt itself.

Each metric stands next to its baseline: the reward AUROC's interval against chance (0.5,
``reward_auroc_excludes_chance``) as well as against the backbone, and the search accuracy next to the
share of positive search labels (``search_positive_share``), which is what the constant "always
search" readout scores (``always_search_accuracy``; the better constant is ``constant_search_accuracy``),
and the reward AUROC next to a string rule that ranks every step that states an answer below every
step that does not (``answer_rule_reward_auroc``, and the agent's paired difference from it): where the
policy's answers are mostly wrong, a teacher that rewards correct answers makes that rule beat chance,
and an agent that learned only it has learned nothing about the question.
The prompts with documents exist only for steps whose search label is 1, so that share is often high,
and a readout can score there by noticing the documents: the search accuracy that tells whether the
readout can steer a threshold controller is the one on the prompts without documents, where it decides
(``search_accuracy_without_docs``, against always-searching on the same prompts with a paired interval).
``--baselines`` adds, for the planted-signal sets, the AUROC of the substring, BM25 and length rules on
the same held-out steps (training.evidence_check.rule_baselines) and the agent's paired difference
from each.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from pra.errors import UserError
from pra.reward_agent import Readout, RewardAgent
from pra.steps import extract_answer
from training.bootstrap import _auroc, question_bootstrap
from training.dataset import Example, load_examples, split_by_question

SEARCH_WHERE_DECIDED = ("prompts_without_docs", "search_accuracy_without_docs", "always_search_accuracy_without_docs",
                        "search_minus_always_without_docs", "search_minus_always_without_docs_ci",
                        "action_median_without_docs")
READOUTS = "reward_readouts"     # an evaluation's per-example rewards, kept in log.jsonl for the paired gain


def _answers(e: Example) -> bool:
    return extract_answer(e.request.step, e.request.question.letters) is not None


SUBGROUPS: dict[str, Callable[[Example], bool]] = {
    "with_docs": lambda e: bool(e.request.docs),
    "without_docs": lambda e: not e.request.docs,
    "answering": _answers,
    "open": lambda e: not _answers(e),
    "own_evidence": lambda e: e.own_evidence,
}


def agent_readouts(agent: RewardAgent, examples: list[Example]) -> list[Readout]:
    """The agent's readouts of ``examples``. An agent whose prompt shows earlier rewards sees, as at
    inference, its own readouts of the trace's earlier steps: those read the same way (with documents
    or without, what always-search and never-search give it) where the labels hold that prompt, else
    the other one. Steps are therefore read in order of their position."""
    if not agent.earlier_rewards:
        return agent.score([e.request for e in examples])
    own: dict[tuple[str, int, bool], float] = {}
    readouts: dict[int, Readout] = {}
    for position in sorted({e.step_index for e in examples}):
        batch = [(i, e) for i, e in enumerate(examples) if e.step_index == position]
        requests = []
        for _, e in batch:
            docs = bool(e.request.docs)
            earlier = tuple(own.get((e.trace, j, docs), own.get((e.trace, j, not docs)))
                            for j in range(1, len(e.request.steps) + 1))
            requests.append(replace(e.request, rewards=earlier))
        for (i, e), r in zip(batch, agent.score(requests)):
            readouts[i] = r
            own[(e.trace, e.step_index, bool(e.request.docs))] = r.reward
    return [readouts[i] for i in range(len(examples))]


def excludes_chance(ci: list[float] | None) -> bool | None:
    """Whether an AUROC's interval lies wholly on one side of 0.5 (None without an interval)."""
    return None if ci is None else bool(ci[0] > 0.5 or ci[1] < 0.5)


def search_baselines(examples: list[Example]) -> dict[str, float | None]:
    """The constant readouts' search accuracy: the share of positive search labels is what "always
    search" scores, its complement "never search"; ``constant_search_accuracy`` is the better one."""
    if not examples:
        return {"search_positive_share": None, "always_search_accuracy": None, "constant_search_accuracy": None}
    share = float(np.mean([bool(e.search) for e in examples]))
    return {"search_positive_share": share, "always_search_accuracy": share,
            "constant_search_accuracy": max(share, 1.0 - share)}


def search_where_decided(examples: list[Example], action: np.ndarray) -> dict[str, Any]:
    """Search accuracy on the prompts without documents, the only ones a threshold controller reads
    p(search) from: a prompt with documents exists only for a step whose search label is 1, so a readout
    that learned "documents are shown" scores there for free. Next to always-searching on the same
    prompts, with the paired difference's question-bootstrap interval, and the median p(search) there:
    the θ that would search about half of these steps."""
    kept = [k for k, e in enumerate(examples) if not e.request.docs]
    if not kept:
        return {**dict.fromkeys(SEARCH_WHERE_DECIDED), "prompts_without_docs": 0}
    steps = [examples[k] for k in kept]
    label = np.array([bool(e.search) for e in steps])
    right = (action[kept] >= 0.5) == label
    return {"prompts_without_docs": len(kept), "search_accuracy_without_docs": float(right.mean()),
            "always_search_accuracy_without_docs": float(label.mean()),
            "search_minus_always_without_docs": float(right.mean() - label.mean()),
            "search_minus_always_without_docs_ci": question_bootstrap(steps, lambda i: float(right[i].mean() - label[i].mean())),
            "action_median_without_docs": float(np.median(action[kept]))}


def answer_rule(examples: list[Example]) -> np.ndarray:
    """The string rule's rewards: 0 for a step that states an answer, 1 for one that does not."""
    return np.array([0.0 if _answers(e) else 1.0 for e in examples])


def step_metrics(examples: list[Example], readouts: list[Readout]) -> dict[str, Any]:
    """One evaluation's metrics (module docstring), with the per-example rewards under ``READOUTS``."""
    from sklearn.metrics import average_precision_score

    if not examples:
        return {"examples": 0}
    y = np.array([int(e.reward >= 0.5) for e in examples])
    p = np.array([r.reward for r in readouts])
    action = np.array([r.action for r in readouts])
    auroc = _auroc(y, p)
    ci = question_bootstrap(examples, lambda i: _auroc(y[i], p[i])) if auroc is not None else None
    return {"examples": len(examples), "questions": len({e.question_id for e in examples}),
            "positive_share": float(y.mean()),
            "reward_auroc": auroc, "reward_auroc_ci": ci, "reward_auroc_excludes_chance": excludes_chance(ci),
            "reward_pr_auc": float(average_precision_score(y, p)) if auroc is not None else None,
            "action_mean": float(action.mean()), "action_std": float(action.std()),
            "search_accuracy": float(np.mean([(r.action >= 0.5) == bool(e.search) for r, e in zip(readouts, examples)])),
            **search_baselines(examples), **search_where_decided(examples, action), READOUTS: p.tolist()}


def validate(agent: RewardAgent, examples: list[Example]) -> dict[str, Any]:
    """``step_metrics`` of the agent's readouts, in eval mode with a fresh prefix cache (states cached
    at an earlier validation came from older weights)."""
    model = agent.backend.model
    training = model.training
    model.eval()
    agent.backend.clear_prefix_cache()
    readouts = agent_readouts(agent, examples)
    model.train(training)
    return step_metrics(examples, readouts)


def _paired_gain(examples: list[Example], y: np.ndarray, before: np.ndarray, after: np.ndarray
                 ) -> tuple[float, list[float] | None]:
    """Trained-minus-untrained AUROC and its interval over the same question resamples."""
    def paired(i: np.ndarray) -> float | None:
        after_i, before_i = _auroc(y[i], after[i]), _auroc(y[i], before[i])
        return None if after_i is None else after_i - before_i

    return _auroc(y, after) - _auroc(y, before), question_bootstrap(examples, paired)


def auroc_comparison(examples: list[Example], before: list[float], after: list[float]) -> dict[str, Any]:
    """Trained (``after``) against untrained (``before``) readouts of the same examples: both AUROCs
    with their question-bootstrap intervals, and the paired gain with its interval."""
    y = np.array([int(e.reward >= 0.5) for e in examples])
    b, a = np.array(before), np.array(after)
    trained, untrained = _auroc(y, a), _auroc(y, b)
    if trained is None or untrained is None:
        return {"examples": len(examples), "positive_share": float(y.mean()) if len(y) else None,
                "reward_auroc": None, "untrained_reward_auroc": None, "reward_auroc_gain": None}
    gain, gain_ci = _paired_gain(examples, y, b, a)
    ci = question_bootstrap(examples, lambda i: _auroc(y[i], a[i]))
    return {"examples": len(examples), "positive_share": float(y.mean()),
            "reward_auroc": trained, "reward_auroc_ci": ci, "reward_auroc_excludes_chance": excludes_chance(ci),
            "untrained_reward_auroc": untrained,
            "untrained_reward_auroc_ci": question_bootstrap(examples, lambda i: _auroc(y[i], b[i])),
            "reward_auroc_gain": gain, "reward_auroc_gain_ci": gain_ci}


def held_out_summary(examples: list[Example], untrained: dict[str, Any], trained: dict[str, Any]) -> dict[str, Any]:
    """The top-level keys of ``metrics.json``: the trained agent's metrics, the untrained backbone's
    AUROC on the same steps, the paired gain with its question-bootstrap interval, the answering-step
    rule's AUROC (``answer_rule``) and the agent's paired difference from it, and the same comparison
    per subgroup (``SUBGROUPS``). The overall AUROCs and their intervals are the validations' own
    (``step_metrics``); the gains and the rule are computed here."""
    gain = gain_ci = rule_auroc = rule_ci = over_rule = over_rule_ci = None
    subgroups: dict[str, Any] = {}
    if trained.get("reward_auroc") is not None and untrained.get("reward_auroc") is not None:
        before, after = untrained[READOUTS], trained[READOUTS]
        y = np.array([int(e.reward >= 0.5) for e in examples])
        gain, gain_ci = _paired_gain(examples, y, np.array(before), np.array(after))
        rule = answer_rule(examples)
        rule_auroc = _auroc(y, rule)
        rule_ci = question_bootstrap(examples, lambda i: _auroc(y[i], rule[i]))
        over_rule, over_rule_ci = _paired_gain(examples, y, rule, np.array(after))
        for name, member in SUBGROUPS.items():
            kept = [k for k, e in enumerate(examples) if member(e)]
            if kept:
                subgroups[name] = auroc_comparison([examples[k] for k in kept], [before[k] for k in kept],
                                                   [after[k] for k in kept])
    return {"examples": trained.get("examples", 0), "questions": trained.get("questions", 0),
            "reward_auroc": trained.get("reward_auroc"), "reward_auroc_ci": trained.get("reward_auroc_ci"),
            "reward_auroc_excludes_chance": excludes_chance(trained.get("reward_auroc_ci")),
            "reward_pr_auc": trained.get("reward_pr_auc"),
            "untrained_reward_auroc": untrained.get("reward_auroc"),
            "untrained_reward_auroc_ci": untrained.get("reward_auroc_ci"),
            "untrained_reward_pr_auc": untrained.get("reward_pr_auc"),
            "reward_auroc_gain": gain, "reward_auroc_gain_ci": gain_ci,
            "answer_rule_reward_auroc": rule_auroc, "answer_rule_reward_auroc_ci": rule_ci,
            "reward_auroc_minus_answer_rule": over_rule, "reward_auroc_minus_answer_rule_ci": over_rule_ci,
            "action_std": trained.get("action_std"), "untrained_action_std": untrained.get("action_std"),
            "search_accuracy": trained.get("search_accuracy"),
            "untrained_search_accuracy": untrained.get("search_accuracy"),
            **search_baselines(examples),
            **{key: trained.get(key) for key in SEARCH_WHERE_DECIDED},
            "untrained_search_accuracy_without_docs": untrained.get("search_accuracy_without_docs"),
            "untrained_action_median_without_docs": untrained.get("action_median_without_docs"),
            "subgroups": subgroups}


def versus_rules(examples: list[Example], agent_rewards: list[float], max_doc_chars: int = 400) -> dict[str, Any]:
    """The substring, BM25 and length rules (training.evidence_check) on the prompts with documents
    among ``examples``, each with the agent's paired AUROC difference from it read in its better
    direction (``agent_minus_rule``)
    and whether the agent beats every rule with its interval (``beats_all_rules``)."""
    from training.evidence_check import oriented, rule_baselines, rule_scores

    kept = [k for k, e in enumerate(examples) if e.request.docs]
    steps = [examples[k] for k in kept]
    if not steps:
        return {"examples": 0}
    y = np.array([int(e.reward >= 0.5) for e in steps])
    agent = np.array([agent_rewards[k] for k in kept])
    out = rule_baselines(steps, max_doc_chars)
    out["agent"] = {"reward_auroc": _auroc(y, agent),
                    "reward_auroc_ci": question_bootstrap(steps, lambda i: _auroc(y[i], agent[i]))}
    for name, scores in rule_scores(steps, max_doc_chars).items():
        rule = np.array(oriented(scores, y.tolist()))        # the rule read in its better direction
        diff, ci = _paired_gain(steps, y, rule, agent) if _auroc(y, agent) is not None else (None, None)
        out[name]["agent_minus_rule"], out[name]["agent_minus_rule_ci"] = diff, ci
    out["beats_all_rules"] = all(out[n]["agent_minus_rule_ci"] is not None and out[n]["agent_minus_rule_ci"][0] > 0
                                 for n in ("substring", "bm25", "length"))
    return out


def without_readouts(evaluation: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in evaluation.items() if k != READOUTS}


def versus_agent(examples: list[Example], agent_rewards: list[float], other: RewardAgent, name: str
                 ) -> dict[str, Any]:
    """Another agent (``other``, read with its own prompt) on the same held-out steps: its AUROC with its
    interval and this agent's paired difference from it (``reward_auroc_minus_versus``, the same question
    resamples), overall and per subgroup (``SUBGROUPS``)."""
    theirs = validate(other, examples)

    def compared(kept: list[int]) -> dict[str, Any]:
        c = auroc_comparison([examples[k] for k in kept], [theirs[READOUTS][k] for k in kept],
                             [agent_rewards[k] for k in kept])
        return {"examples": c["examples"], "reward_auroc": c["reward_auroc"], "reward_auroc_ci": c.get("reward_auroc_ci"),
                "versus_reward_auroc": c["untrained_reward_auroc"],
                "versus_reward_auroc_ci": c.get("untrained_reward_auroc_ci"),
                "reward_auroc_minus_versus": c["reward_auroc_gain"],
                "reward_auroc_minus_versus_ci": c.get("reward_auroc_gain_ci")}
    subgroups = {group: compared(kept) for group, member in SUBGROUPS.items()
                 if (kept := [k for k, e in enumerate(examples) if member(e)])}
    return {"agent": name, **compared(list(range(len(examples)))),
            "versus_search_accuracy": theirs["search_accuracy"], "versus_action_std": theirs["action_std"],
            "subgroups": subgroups}


def evaluate_agent(agent_name: str, labels: str, reward_label: str, search_label: str, val_fraction: float,
                   seed: int, always_without_docs: bool = True, max_doc_chars: int = 400,
                   backbone: str | None = None, baselines: bool = False, versus: str | None = None
                   ) -> dict[str, Any]:
    """``metrics.json``'s held-out keys for an agent folder on a labels file's validation questions:
    the agent, then its backbone (the adapter's base unless ``backbone`` is given) with the same prompt;
    with ``baselines``, the rule baselines on the prompts with documents (``versus_rules``); with
    ``versus`` (another agent's name or folder), that agent and the paired difference (``versus_agent``)."""
    from pra.backends.transformers_backend import TransformersBackend
    from pra.models import resolve_reward_agent
    from pra.reward_agent import load_reward_agent

    base, adapter = resolve_reward_agent(agent_name)
    backbone = backbone or (base if adapter else None)
    if backbone is None:
        raise UserError(f"{agent_name}: not an adapter folder; name its untrained backbone with --backbone")
    _, val_set = split_by_question(load_examples(labels, reward_label, search_label, always_without_docs),
                                   val_fraction, seed)
    if not val_set:
        raise UserError(f"{labels}: val_fraction {val_fraction} leaves no validation question")
    agent = load_reward_agent(agent_name, max_doc_chars=max_doc_chars)
    trained, shown = validate(agent, val_set), agent.earlier_rewards
    del agent                                      # one model in memory at a time
    untrained = validate(RewardAgent(TransformersBackend(backbone, dtype="float32"), max_doc_chars, shown), val_set)
    rules = {"rule_baselines": versus_rules(val_set, trained[READOUTS], max_doc_chars)} if baselines else {}
    if versus:
        rules["versus"] = versus_agent(val_set, trained[READOUTS], load_reward_agent(versus, max_doc_chars=max_doc_chars),
                                       versus)
    return {**held_out_summary(val_set, untrained, trained), **rules, "agent": agent_name, "backbone": backbone,
            "labels": labels, "reward_label": reward_label, "search_label": search_label,
            "val_fraction": val_fraction, "seed": seed, "always_without_docs": always_without_docs,
            "earlier_rewards_shown": shown,
            "initial": without_readouts(untrained), "final": without_readouts(trained)}


def main() -> None:
    from training.config import TrainConfig, load_config

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("agent", help="an agent folder or a pra/agents name")
    ap.add_argument("--recipe", help="the training recipe (its `train:` block) that made the agent: labels and split")
    ap.add_argument("--labels", help="labels.jsonl (default: the recipe's)")
    ap.add_argument("--reward-label", dest="reward_label")
    ap.add_argument("--search-label", dest="search_label")
    ap.add_argument("--val-fraction", dest="val_fraction", type=float)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--always-without-docs", dest="always_without_docs", action=argparse.BooleanOptionalAction,
                    help="always search labels: also read each step without its documents (default: the recipe's)")
    ap.add_argument("--backbone", help="the untrained model to compare with (default: the adapter's base)")
    ap.add_argument("--baselines", action="store_true", help="planted-signal sets: the substring, BM25 and length "
                    "rules' AUROC on the same held-out steps, and the agent's paired difference from each")
    ap.add_argument("--versus", metavar="AGENT", help="another agent (a pra/agents name or an adapter folder) read "
                    "on the same held-out steps with its own prompt: its AUROC and the paired difference")
    ap.add_argument("--out", dest="metrics_out", type=Path,  # not `out`: that is the recipe's run folder
                    help="write the metrics here as JSON (default: print only)")
    a = ap.parse_args()
    cfg = load_config(TrainConfig, "train", a.recipe, vars(a))
    if not Path(cfg.labels).is_file():
        raise SystemExit(f"no labels file {cfg.labels}: run `pra label` for it, or pass --labels")
    metrics = evaluate_agent(a.agent, cfg.labels, cfg.reward_label, cfg.search_label, cfg.val_fraction, cfg.seed,
                             cfg.always_without_docs, cfg.max_doc_chars, a.backbone, a.baselines, a.versus)
    text = json.dumps(metrics, indent=2)
    if a.metrics_out:
        a.metrics_out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
