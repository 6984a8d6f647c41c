"""The report's tables, each from whichever saved runs fit it; what is absent is named, with the
``pra eval`` command that would make it."""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from eval.analysis.compare import compare_records
from eval.analysis.report.markdown import Section, accuracy, eval_command, table
from eval.analysis.report.posthoc import AGGREGATES, has_outcome, has_samples, posthoc_accuracy
from eval.analysis.report.runs import Run
from pra.models import DEFAULT_REWARD_AGENT


def _cell(run: Run) -> str:
    s = run.summary
    return accuracy(s["accuracy"], s["stderr"], s["n"])


def _largest(runs: Iterable[Run]) -> Run | None:
    """Of several runs that fit one cell, the one with most questions (then the first given)."""
    runs = list(runs)
    return max(runs, key=lambda r: (len(r.records), -runs.index(r))) if runs else None


def paired_delta(a: Run, b: Run) -> str:
    """a - b on the records both have (question and rotation), with ``pra compare``'s paired bootstrap
    95% CI and exact McNemar p."""
    if not set(a.correct) & set(b.correct):
        return "—"
    c = compare_records(b.records, a.records)
    return f"{c.difference:+.3f} [{c.ci_low:+.3f}, {c.ci_high:+.3f}] p={c.mcnemar_p:.2g} (n={c.n})"


def methods_by_benchmark(runs: list[Run]) -> Section:
    """Table 1: every method (per policy) on every benchmark it ran on."""
    sec = Section("Table 1: accuracy by method and benchmark")
    if not runs:
        sec.missing.append("no runs given")
        return sec
    benchmarks = sorted({r.benchmark for r in runs})
    cells: dict[tuple[str, str], dict[str, list[Run]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        cells[(r.policy, r.label)][r.benchmark].append(r)
    rows, dropped = [], []
    for (policy, label), by_bench in sorted(cells.items()):
        row = [policy, label]
        for b in benchmarks:
            chosen = _largest(by_bench.get(b, []))
            row.append(_cell(chosen) if chosen else "—")
            dropped += [f"`{r.path}` (n={len(r.records)})" for r in by_bench.get(b, []) if r is not chosen]
        rows.append(row)
    sec.body.append(table(["policy", "method", *benchmarks], rows))
    sec.body.append("Accuracy ± standard error clustered by question (n records: a question under each of its "
                    "rotations counts once per rotation). A dash: that method was not run on that benchmark.")
    if dropped:
        sec.body.append("Runs with fewer questions for the same cell, not shown: " + ", ".join(dropped) + ".")
    return sec


def _with_baselines(runs: list[Run]) -> list[tuple[tuple[str, str], list[Run], Run | None, Run | None]]:
    """The runs grouped by (benchmark, policy), in order, each group with its CoT and SC baselines (the
    largest run of each), which the paired tables compare every method with."""
    groups: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for r in runs:
        groups[(r.benchmark, r.policy)].append(r)
    return [(key, rs, _largest(r for r in rs if r.method == "cot"), _largest(r for r in rs if r.method == "sc"))
            for key, rs in sorted(groups.items())]


def against_baselines(runs: list[Run]) -> Section:
    """Table 1b: every run against CoT and against self-consistency on the same policy and benchmark,
    paired over the records both have, so that a method's gain is read with its CI."""
    sec = Section("Table 1b: each method against CoT and SC (paired)")
    rows = []
    for (bench, policy), rs, cot, sc in _with_baselines(runs):
        if not (cot or sc):
            sec.missing.append(f"cot or sc for {policy} on {bench}: {eval_command(bench, policy, 'cot')}")
            continue
        for r in sorted(rs, key=lambda r: r.label):
            rows.append([bench, policy, r.label, r.config.get("permute", "none"), _cell(r),
                         paired_delta(r, cot) if cot and r is not cot else "—",
                         paired_delta(r, sc) if sc and r is not sc else "—"])
    if rows:
        sec.body.append(table(["benchmark", "policy", "method", "options", "accuracy", "Δ − CoT", "Δ − SC"], rows))
        sec.body.append("Accuracy ± question-clustered standard error (n records). Deltas as in Table 2: paired "
                        "over the records both runs have, bootstrap 95% CI over questions, exact McNemar p; a CI "
                        "that covers 0 is no gain. Under `cyclic` options chance is exactly 1/n; a `balanced` run "
                        "pairs with the cyclic runs' records of its one rotation per question.")
    return sec


def _pra_choice(runs: list[Run]) -> Run | None:
    """The PRA run standing for a policy: a trained agent that always searches, ranks by the sum of
    step rewards and reads the default corpus (the paper's setting), else the closest there is."""
    pra = [r for r in runs if r.method == "pra"]
    ranked = sorted(pra, key=lambda r: (not r.trained, not r.searches, r.controller != "always",
                                        bool(r.variant), -len(r.records)))
    return ranked[0] if ranked else None


def backbone_swap(runs: list[Run]) -> Section:
    """Table 2: each policy with CoT, self-consistency and PRA, and PRA's gain over both."""
    sec = Section("Table 2: backbone swap (policy x CoT / SC / PRA)")
    rows = []
    for (bench, policy), rs, cot, sc in _with_baselines(runs):
        pra = _pra_choice(rs)
        if not (cot or sc or pra):
            continue
        for name, run, extra in (("cot", cot, ""), ("sc", sc, "--samples 4"),
                                 ("pra", pra, "--recipe pra-cpu --search always")):
            if run is None:
                sec.missing.append(f"{name} for {policy} on {bench}: {eval_command(bench, policy, name, extra)}")
        rows.append([bench, policy, _cell(cot) if cot else "—",
                     f"{_cell(sc)} k={sc.width}" if sc else "—",
                     f"{_cell(pra)} [{pra.label}]" if pra else "—",
                     paired_delta(pra, cot) if pra and cot else "—",
                     paired_delta(pra, sc) if pra and sc else "—"])
    if not rows:
        sec.missing.append("no cot, sc or pra runs")
        return sec
    sec.body.append(table(["benchmark", "policy", "CoT", "SC", "PRA", "Δ PRA − CoT", "Δ PRA − SC"], rows))
    sec.body.append("Deltas are paired over the records both runs have (question and option rotation), with "
                    "the paired bootstrap 95% CI and the exact McNemar p of `pra compare`; a CI that covers 0 is "
                    "no gain. The PRA column prefers a trained agent that searches.")
    return sec


def agent_by_search(runs: list[Run]) -> Section:
    """Table 3: reward agent trained or not x search or not (the paper's ablation)."""
    sec = Section("Table 3: reward agent (trained / untrained) x search (yes / no)")
    groups: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for r in runs:
        if r.method == "pra":
            groups[(r.benchmark, r.policy)].append(r)
    if not groups:
        sec.missing.append("no pra runs: e.g. " + eval_command("medmcqa-eval", "smollm2-135m-instruct", "pra",
                                                               "--recipe pra-cpu --search always", "pra-always"))
        return sec
    rows = []
    for (bench, policy), rs in sorted(groups.items()):
        row = [bench, policy]
        for trained in (True, False):
            for search in (True, False):
                fit = [r for r in rs if r.trained == trained and r.searches == search]
                run = _largest(sorted(fit, key=lambda r: (r.controller != "always", bool(r.variant))))
                if run:
                    row.append(f"{_cell(run)} ({run.reward_agent}, {run.controller})")
                else:
                    row.append("—")
                    agent = DEFAULT_REWARD_AGENT if trained else "smollm2-135m-instruct"
                    how = "always" if search else "never"
                    sec.missing.append(f"{'trained' if trained else 'untrained'} agent, search {how}, {policy} on {bench}: "
                                       + eval_command(bench, policy, "pra", f"--recipe pra-cpu --reward-agent {agent} "
                                                      f"--search {how}", f"pra-{'trained' if trained else 'untrained'}-{how}"))
        rows.append(row)
    sec.body.append(table(["benchmark", "policy", "trained, search", "trained, no search",
                           "untrained, search", "untrained, no search"], rows))
    return sec


def reward_level(runs: list[Run]) -> Section:
    """Table 4: online PRA against post-hoc re-ranking of sampled traces by outcome or process rewards."""
    sec = Section("Table 4: reward level and timing (post-hoc re-ranking vs online PRA)")
    sampled = [r for r in runs if r.records and all(has_samples(x) for x in r.records)]
    online = [r for r in runs if r.method == "pra"]
    if not sampled:
        sec.missing.append(
            "no run keeps every sampled trace with per-step rewards (records need a `samples` list of "
            "`{answer, rewards, outcome}`, see `eval/analysis/report/posthoc.py`); saved SC records keep only the "
            "answers, PRA records only the final beam's cumulative scores, so post-hoc re-ranking cannot "
            "be recomputed from them")
    rows = []
    for r in sampled:
        for how in ("vote", "outcome", *AGGREGATES):
            if how == "outcome" and not all(has_outcome(x) for x in r.records):
                rows.append([r.benchmark, r.policy, "post hoc: outcome", "no outcome rewards in records", f"`{r.path}`"])
                continue
            acc, se, n = posthoc_accuracy(r.records, how)
            name = "majority vote (no reward)" if how == "vote" else f"post hoc: {how if how == 'outcome' else 'process, ' + how}"
            rows.append([r.benchmark, r.policy, name, accuracy(acc, se, n), f"`{r.path}`"])
    for r in online:
        rows.append([r.benchmark, r.policy, f"online {r.label}", _cell(r), f"`{r.path}`"])
    if not online:
        sec.missing.append("no online pra run to compare with")
    if rows:
        sec.body.append(table(["benchmark", "policy", "ranking", "accuracy", "run"], sorted(rows, key=lambda x: x[:2])))
    return sec
