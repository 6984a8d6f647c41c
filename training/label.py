"""``pra label``: policy traces on training questions, and teacher labels for every step of them.

Two resumable phases, each an append-only JSON-lines file in ``out``, run a block of questions at a
time (traces, then their labels), so a stopped run keeps the labels of every block it finished:

  traces.jsonl  one record per question: the policy's traces (greedy CoT, or k sampled), as steps
  labels.jsonl  one record per (question, trace, step): the prompt parts, the retrieved documents, the
                judge's log-probs without and with them, m, m_docs, dm, the rollout answers, the
                gold probabilities before and after the step and with documents, the labels

A block's traces are fixed on disk before any of its steps is labelled, so a resumed run labels the
same steps. The search label compares |dm| with the median over the whole labelled set, so it is
applied when the labels are read (``with_search_labels``), never stored: resuming cannot shift it.

Teachers: the judge (the paper's: an LLM shown the question, the gold answer, documents and the trace
up to the step, answering one digit, read as log-probs of ``0``/``1``), Monte-Carlo rollouts
(Math-Shepherd: the share of the policy's completions from the step that reach the gold answer), and
the gold probability (``goldprob``: how much the step raises the policy's permutation-averaged
probability of the gold option's text, ``goldprob_labels``), which no letter preference can move.
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from tqdm import tqdm

from pra.benchmarks import EVAL_BENCHMARKS, load_benchmark, load_eval_benchmark, parse_shard
from pra.backends import load_policy
from pra.backends.base import LMBackend
from pra.prompts import (forced_answer_suffix, format_documents, format_question, policy_messages, policy_prompt_id,
                         steps_prefix)
from pra.readouts import Prompt, read_letters
from pra.records import JsonlWriter, read_records
from pra.redact import redact_config
from pra.resume import check
from pra.steps import extract_answer
from pra.types import Message, Question, Step
from search.engine import Candidate, Engine, SearchConfig, Trace, search_query
from training.config import TEACHERS, LabelConfig
from pra.errors import UserError

LABEL_KEYS = {"judge": "judge_label", "rollout": "rollout_label", "goldprob": "goldprob_label"}
SHIFTS = {"judge": "dm", "goldprob": "goldprob_dm"}     # each teacher's margin shift, for search labels
JUDGE_SYSTEM = "You are a medical expert who grades students' reasoning strictly."
JUDGE_INSTRUCTIONS = (
    "Below are a medical multiple-choice question, its correct answer, {docs}and a student's step-by-step "
    "solution up to its latest step. Judge the latest step only: is it medically accurate and a sound step "
    "towards the correct answer? Reply with one digit: 1 if the latest step is correct, 0 if it is incorrect."
)


# -- the label maths -------------------------------------------------------------------------------

def margin(logprobs: dict[str, float]) -> float:
    """m = log p(1) - log p(0); renormalising the two log-probs (adding one constant) leaves it as is."""
    return logprobs["1"] - logprobs["0"]


def judge_fields(logp: dict[str, float], logp_docs: dict[str, float]) -> dict[str, Any]:
    """The judge's reading of one step: margins without and with documents, their shift dm = m - m_docs,
    and the reasoning label, which is the judgement with documents."""
    m, m_docs = margin(logp), margin(logp_docs)
    return {"logp": logp, "logp_docs": logp_docs, "m": m, "m_docs": m_docs, "dm": m - m_docs,
            "judge_label": int(m_docs > 0)}


def search_labels(dms: Sequence[float]) -> tuple[list[int], float]:
    """1 where |dm| exceeds the median |dm| of the set (the documents moved the judge more than usual;
    about half the steps), and that median."""
    threshold = statistics.median(abs(d) for d in dms)
    return [int(abs(d) > threshold) for d in dms], threshold


def with_search_labels(records: Iterable[dict[str, Any]], teacher: str = "judge") -> list[dict[str, Any]]:
    """The records with ``search_label`` set wherever ``teacher`` (judge or goldprob) gave a margin shift."""
    if teacher not in SHIFTS:
        raise UserError(f"margin shifts come from {' or '.join(SHIFTS)}, got {teacher!r}")
    records = [dict(r) for r in records]
    shifted = [r for r in records if r.get(SHIFTS[teacher]) is not None]
    if shifted:
        for r, s in zip(shifted, search_labels([r[SHIFTS[teacher]] for r in shifted])[0]):
            r["search_label"] = s
    return records


def log_odds(p: float, eps: float = 1e-6) -> float:
    p = min(max(p, eps), 1 - eps)
    return math.log(p) - math.log(1 - p)


def goldprob_fields(p_before: float, p: float, p_docs: float) -> dict[str, Any]:
    """The gold-probability reading of one step from p_{k-1} (before it), p_k (after it) and p_k with
    the step's documents in the policy's context.

    The reward is the rise dp = p_k - p_{k-1}, not the level p_k: a policy near chance on these
    questions gives every state of a question about the same p, so the level mostly says how easy
    the question is; the rise is what the step itself adds (a step's progress, as in Setlur et al.,
    "Rewarding Progress", 2024). The binary label is ``dp > 0``: the step moved the policy towards the
    gold text. Zero is the one threshold that needs no tuning and means the same on every question
    whatever its number of options or difficulty; a step that changes nothing (dp = 0) did not help.
    The soft label (1 + dp) / 2 is dp mapped onto [0, 1] (0.5: no change), order kept.
    The margin is the log-odds of the gold text, as the judge's m is the log-odds of "correct"; the
    search label thresholds dm = m - m_docs as the judge's (``search_labels``)."""
    dp = p - p_before
    return {"p_gold_before": p_before, "p_gold": p, "p_gold_docs": p_docs, "goldprob_dp": dp,
            "goldprob_soft": (1 + dp) / 2, "goldprob_label": int(dp > 0),
            "goldprob_dm": log_odds(p) - log_odds(p_docs)}


def label_stats(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """What the issue asks to report: per teacher the share of positive steps and of search labels
    (goldprob: also its mean rise and level), steps per trace, and how often each two teachers agree."""
    recs = list(records)
    if not recs:
        return {"steps": 0}
    traces = {(r["question_id"], r["trace"]) for r in recs}
    mean = lambda key, rs: round(statistics.fmean(r[key] for r in rs), 4)
    stats: dict[str, Any] = {"questions": len({r["question_id"] for r in recs}), "traces": len(traces),
                             "steps": len(recs), "steps_per_trace": round(len(recs) / len(traces), 3)}
    judged = [r for r in recs if r.get("dm") is not None]
    if judged:
        labels, threshold = search_labels([r["dm"] for r in judged])
        stats.update(judge_positive=mean("judge_label", judged), search_share=round(statistics.fmean(labels), 4),
                     median_abs_dm=round(threshold, 4))
    rolled = [r for r in recs if r.get("soft_label") is not None]
    if rolled:
        stats.update(rollout_positive=mean("rollout_label", rolled), soft_mean=mean("soft_label", rolled))
    gold = [r for r in recs if r.get("goldprob_dp") is not None]
    if gold:
        labels, threshold = search_labels([r["goldprob_dm"] for r in gold])
        stats.update(goldprob_positive=mean("goldprob_label", gold), goldprob_mean_dp=mean("goldprob_dp", gold),
                     goldprob_mean_p=mean("p_gold", gold), goldprob_search_share=round(statistics.fmean(labels), 4),
                     median_abs_goldprob_dm=round(threshold, 4))
    for k, a in enumerate(TEACHERS):
        for b in TEACHERS[k + 1:]:
            both = [r for r in recs if r.get(LABEL_KEYS[a]) is not None and r.get(LABEL_KEYS[b]) is not None]
            if both:
                stats[f"{a}_{b}_agreement"] = round(statistics.fmean(
                    r[LABEL_KEYS[a]] == r[LABEL_KEYS[b]] for r in both), 4)
    return stats


# -- phase 1: traces -------------------------------------------------------------------------------

def generate_traces(cfg: LabelConfig, policy: LMBackend, questions: list[Question], path: Path) -> None:
    """One record per question with its distinct traces, each a list of non-empty steps and its answer."""
    k = cfg.traces
    engine = Engine(policy, SearchConfig(
        beam_width=k, branching=1, max_steps=cfg.max_steps, step_tokens=cfg.step_tokens,
        temperature=cfg.temperature if k > 1 else 0.0, top_p=cfg.top_p, seed=cfg.seed, aggregate="vote"))
    with JsonlWriter(path) as writer:
        todo = [q for q in questions if q.id not in writer.done]
        for t in tqdm(engine.run([Trace(q) for q in todo], cfg.max_active), total=len(todo), desc="traces",
                      leave=False):
            distinct = {tuple(s.text for s in c.steps if s.text): c for c in t.beam}
            writer.write({"id": t.question.id, "traces": [
                {"steps": list(steps), "answer": c.answer, "forced": c.forced}
                for steps, c in distinct.items() if steps]})


# -- phase 2: labels -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Item:
    """One step to label: the partial trace up to and including it."""
    id: str
    question: Question
    trace: int
    steps: tuple[str, ...]

    @property
    def answer(self) -> str | None:
        """The step's own answer, when it gives one (the last step of an answered trace)."""
        return extract_answer(self.steps[-1], self.question.letters)


def step_items(questions: dict[str, Question], trace_records: Iterable[dict[str, Any]]) -> list[Item]:
    return [Item(f"{r['id']}/t{ti}/s{si}", questions[r["id"]], ti, tuple(tr["steps"][:si]))
            for r in trace_records if r["id"] in questions
            for ti, tr in enumerate(r["traces"]) for si in range(1, len(tr["steps"]) + 1)]


def judge_prompt(judge: LMBackend, item: Item, docs: Sequence[tuple[str, str]] = (),
                 max_doc_chars: int = 600) -> str:
    q = item.question
    parts = [JUDGE_INSTRUCTIONS.format(docs="reference documents " if docs else ""), format_question(q),
             f"Correct answer: ({q.answer}) {q.options[q.answer]}"]
    if docs:
        parts.append("Reference documents:\n" + format_documents([(t, x[:max_doc_chars]) for t, x in docs]))
    parts.append("Student's solution so far:\n" + steps_prefix(item.steps, None))
    parts.append(f"Is Step {len(item.steps)} correct? Reply 1 (correct) or 0 (incorrect).")
    return judge.render([Message("system", JUDGE_SYSTEM), Message("user", "\n\n".join(parts))])


def judge_labels(cfg: LabelConfig, judge: LMBackend, items: list[Item],
                 docs: list[list[tuple[str, str]]]) -> list[dict[str, Any]]:
    """Both readings of every step in one batched call: without documents, then with them."""
    prompts = [judge_prompt(judge, i) for i in items] + \
              [judge_prompt(judge, i, d, cfg.max_doc_chars) for i, d in zip(items, docs)]
    lps = judge.choice_logprobs(prompts, [["0", "1"]] * len(prompts))
    return [judge_fields(a, b) for a, b in zip(lps[:len(items)], lps[len(items):])]


def continuations(cfg: LabelConfig, policy: LMBackend, starts: list[tuple[Question, tuple[str, ...]]],
                  n: int) -> list[list[str | None]]:
    """The answers of ``n`` continuations of each start (the question as asked, the steps so far) by the
    policy on the engine: sampled, at most ``rollout_steps`` more steps, then a forced answer."""
    engine = Engine(policy, SearchConfig(
        beam_width=n, branching=1, max_steps=cfg.rollout_steps, step_tokens=cfg.step_tokens,
        temperature=cfg.temperature, top_p=cfg.top_p, seed=cfg.seed, aggregate="vote"))
    # The root proposes beam_width x branching = n continuations of the one prefix, then each goes on alone.
    traces = [Trace(q, beam=[Candidate([Step(s) for s in steps])]) for q, steps in starts]
    for _ in engine.run(traces, cfg.max_active):
        pass
    return [[c.answer for c in t.beam] for t in traces]


def rollout_labels(cfg: LabelConfig, policy: LMBackend, items: list[Item]) -> list[dict[str, Any]]:
    """Each partial trace continued ``rollouts`` times (``continuations``). A step that answers is its
    own outcome."""
    open_items = [i for i in items if i.answer is None]
    rolled = dict(zip((i.id for i in open_items),
                      continuations(cfg, policy, [(i.question, i.steps) for i in open_items], cfg.rollouts)))
    out = []
    for i in items:
        answers = [i.answer] * cfg.rollouts if i.answer else rolled[i.id]
        soft = sum(a == i.question.answer for a in answers) / len(answers)
        out.append({"rollout_answers": answers, "soft_label": soft,
                    "rollout_label": int(soft >= cfg.rollout_threshold)})
    return out


def forced_answer(policy: LMBackend, steps: Sequence[str], docs: Sequence[tuple[str, str]] = ()) -> Prompt:
    """The prompt on which the engine forces an answer after ``steps`` (``Engine._finish``), with
    ``docs`` in the policy's context as RAG puts them; a function of the question, so that
    ``read_letters`` can ask it under every rotation of the options."""
    suffix = steps_prefix(steps, None) + forced_answer_suffix(steps)
    return lambda q: policy.render(policy_messages(q, policy.has_chat_template, docs), suffix)


def gold_probabilities(policy: LMBackend, states: Sequence[tuple[Question, tuple[str, ...], tuple]]) -> list[float]:
    """For each (question, steps, documents): the permutation-averaged probability (``permavg``) of
    the gold option's text when the policy is forced to answer there, all in one batched call."""
    lps = read_letters(policy, [(q, forced_answer(policy, steps, docs)) for q, steps, docs in states], "permavg")
    return [math.exp(lp[q.answer]) for (q, _, _), lp in zip(states, lps)]


def goldprob_labels(cfg: LabelConfig, policy: LMBackend, items: list[Item],
                    docs: list[list[tuple[str, str]]]) -> list[dict[str, Any]]:
    """``goldprob_fields`` of every step from one ``gold_probabilities`` call over the distinct states:
    p_{k-1} of a step is the state its predecessor was read at (and the question's empty prefix is
    shared by its traces), so each is read once. A step that answers is its own outcome (p_k = 1 if
    its answer is gold, else 0, documents or not): forcing an answer after it would read back the
    letter it wrote, which the rotations then spread over the texts.

    Steps that name a letter ("option B is wrong") keep their letters under rotation, so there they
    point at another text; this adds noise to p, not a preference for any letter."""
    state = lambda i, k, d=(): (i.question.id, i.steps[:k], d)
    shown = [tuple((t, x[:cfg.max_doc_chars]) for t, x in d) for d in docs]
    needed: dict[tuple, tuple] = {}
    for i, d in zip(items, shown):
        needed.setdefault(state(i, len(i.steps) - 1), (i.question, i.steps[:-1], ()))
        if i.answer is None:
            needed.setdefault(state(i, len(i.steps)), (i.question, i.steps, ()))
            needed.setdefault(state(i, len(i.steps), d), (i.question, i.steps, d))
    p = dict(zip(needed, gold_probabilities(policy, list(needed.values()))))
    out = []
    for i, d in zip(items, shown):
        k = len(i.steps)
        after = [float(i.answer == i.question.answer)] * 2 if i.answer else [p[state(i, k)], p[state(i, k, d)]]
        out.append(goldprob_fields(p[state(i, k - 1)], *after))
    return out


def label_chunk(cfg: LabelConfig, items: list[Item], policy: LMBackend, judge: LMBackend | None,
                retriever, reader: LMBackend | None = None) -> list[dict[str, Any]]:
    """Label records for ``items``: documents for every step (query: the question and its last two
    steps, as at inference), then each teacher in one batched pass. ``reader``: the policy as the
    gold-probability reads load it (``goldprob_reader``; default the policy itself)."""
    hits = retriever.retrieve([search_query(i.question, i.steps) for i in items], cfg.docs)
    docs = [[(h.passage.title, h.passage.text) for h in hs] for hs in hits]
    teacher: dict[str, Any] = {}
    if "judge" in cfg.teachers:
        teacher["judge"] = judge.name
    if "rollout" in cfg.teachers:
        teacher.update(rollout=policy.name, rollouts=cfg.rollouts)
    if "goldprob" in cfg.teachers:
        teacher["goldprob"] = policy.name
    records = []
    for i, d, hs in zip(items, docs, hits):
        q = i.question
        records.append({"id": i.id, "question_id": q.id, "trace": i.trace, "step_index": len(i.steps),
                        "question": q.question, "options": q.options, "gold": q.answer,
                        "steps": list(i.steps[:-1]), "step": i.steps[-1],
                        "doc_ids": [h.passage.id for h in hs], "docs": d, "teacher": teacher})
    if "judge" in cfg.teachers:
        for r, f in zip(records, judge_labels(cfg, judge, items, docs)):
            r.update(f)
    if "rollout" in cfg.teachers:
        for r, f in zip(records, rollout_labels(cfg, policy, items)):
            r.update(f)
    if "goldprob" in cfg.teachers:
        for r, f in zip(records, goldprob_labels(cfg, reader or policy, items, docs)):
            r.update(f)
    return records


def _backend(model: str, backend: str, base_url: str | None, batch_size: int, dtype: str | None = None) -> LMBackend:
    """Only the transformers backend batches itself (and takes a dtype); vLLM schedules its own
    batches, a server needs a URL."""
    extra = {"transformers": {"batch_size": batch_size, "dtype": dtype}, "openai": {"base_url": base_url}}.get(backend, {})
    return load_policy(model, backend=backend, **extra)


def goldprob_reader(cfg: LabelConfig, policy: LMBackend) -> LMBackend:
    """The policy for the gold-probability reads: itself, or (transformers backend) the same model in
    ``goldprob_dtype`` when it was loaded in another."""
    loaded = getattr(getattr(policy, "model", None), "dtype", None)
    if cfg.backend != "transformers" or not cfg.goldprob_dtype or loaded is None or str(loaded) == f"torch.{cfg.goldprob_dtype}":
        return policy
    return _backend(cfg.policy, cfg.backend, cfg.base_url, cfg.batch_size, cfg.goldprob_dtype)


# Settings that choose the questions, pace the work or say where it goes; a resumed run may change them,
# not the others (they are left out of the label set's fingerprint).
PACING = {"out", "limit", "shard", "batch_size", "max_active", "chunk", "block"}
# What label_config.json holds beside the LabelConfig fields.
RECORDED = ("purpose", "policy_prompt", "fingerprint")
# The policy's prompts a label set's teachers read: its traces' steps, and the steps after passages.
LABEL_PROMPT_KINDS = ("steps", "docs")


def _check_settings(path: Path, cfg: LabelConfig, purpose: str, chat: bool) -> None:
    """Refuse to resume with other labelling settings or another policy prompt (``chat``: whether the
    policy has a chat template): the file would mix two kinds of label (``pra.resume.check``, the rule of
    run folders and training runs). label_config.json keeps the settings and their fingerprint. Labels of
    evaluation sets carry ``purpose: detection``, which probe training refuses."""
    prompts = {kind: policy_prompt_id(chat, kind) for kind in LABEL_PROMPT_KINDS}
    now = redact_config({**({"purpose": purpose} if purpose == "detection" else {}), **json.loads(json.dumps(asdict(cfg))),
                         "policy_prompt": prompts})     # server URLs stored without credentials
    old = json.loads(path.read_text()) if path.exists() else None
    fp = check(path.parent, "labels", old, now, skip=PACING)
    path.write_text(json.dumps({**now, "fingerprint": fp}, indent=2))


def run_label(cfg: LabelConfig, policy: LMBackend | None = None, judge: LMBackend | None = None,
              retriever=None, purpose: str = "training") -> dict[str, Any]:
    """Generate (or resume) the traces, label (or resume labelling) their steps, return the statistics
    (also written to ``out/label_stats.json``). ``purpose``: "training" takes training questions only;
    "detection" (``pra probe label``) takes evaluation sets only, for detection metrics, never training."""
    if purpose not in ("training", "detection"):
        raise UserError(f"purpose must be training or detection, got {purpose!r}")
    if purpose == "training" and cfg.benchmark in EVAL_BENCHMARKS:
        raise UserError(f"{cfg.benchmark!r} is an evaluation set; label training questions (medmcqa-train)")
    if purpose == "detection" and cfg.benchmark not in EVAL_BENCHMARKS:
        raise UserError(f"{cfg.benchmark!r} is not an evaluation set; label training questions with `pra label`")
    unknown = set(cfg.teachers) - set(TEACHERS)
    if unknown or not cfg.teachers:
        raise UserError(f"teachers must be one or more of {', '.join(TEACHERS)}, got {cfg.teachers}")
    shard = parse_shard(cfg.shard) if cfg.shard else None
    load = load_benchmark if purpose == "training" else load_eval_benchmark
    questions = {q.id: q for q in load(cfg.benchmark, limit=cfg.limit, shard=shard).questions}
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    policy = policy or _backend(cfg.policy, cfg.backend, cfg.base_url, cfg.batch_size)
    _check_settings(out / "label_config.json", cfg, purpose, policy.has_chat_template)
    if "judge" in cfg.teachers and judge is None:
        same = (cfg.judge, cfg.judge_backend, cfg.judge_base_url) == (cfg.policy, cfg.backend, cfg.base_url)
        judge = policy if same else _backend(cfg.judge, cfg.judge_backend, cfg.judge_base_url, cfg.batch_size)
    reader = goldprob_reader(cfg, policy) if "goldprob" in cfg.teachers else None
    if retriever is None:
        from corpora.retrieval import load_retriever
        retriever = load_retriever(cfg.corpus, mode=cfg.retrieval)
    traces, asked = out / "traces.jsonl", list(questions.values())
    with JsonlWriter(out / "labels.jsonl") as writer, tqdm(total=len(asked), unit="question", desc="labels") as bar:
        for start in range(0, len(asked), cfg.block):
            block = asked[start:start + cfg.block]
            generate_traces(cfg, policy, block, traces)
            by_question: dict[str, list[Item]] = {q.id: [] for q in block}
            for i in step_items({q.id: q for q in block}, read_records(traces)):
                if i.id not in writer.done:
                    by_question[i.question.id].append(i)
            groups = [g for g in by_question.values() if g]
            bar.update(len(block) - len(groups))
            for s in range(0, len(groups), cfg.chunk):
                chunk = [i for g in groups[s:s + cfg.chunk] for i in g]
                for record in label_chunk(cfg, chunk, policy, judge, retriever, reader):
                    writer.write(record)
                bar.update(len(groups[s:s + cfg.chunk]))
    ids = set(questions)
    stats = label_stats(r for r in read_records(out / "labels.jsonl") if r["question_id"] in ids)
    (out / "label_stats.json").write_text(json.dumps(stats, indent=2))
    return stats
