"""The decoding engine: beam search over reasoning steps on one stage-batched global queue.

Every question is a ``Trace`` holding its beam. Each iteration partitions the queue by stage and runs
each partition as ONE batched call, whatever question, beam or depth its traces are at:

  REASON  policy: b next steps for every live beam member (B x b per question; the root gets B x b)
  SEARCH  retriever: evidence for every candidate whose controller asked for it
  REWARD  reward agent: reward + action readouts for every candidate still unscored
  DONE    answered (or out of steps): forced answers where needed, then the trace leaves the queue

Without a reward agent the same loop runs CoT (B=b=1) and self-consistency (B=k, b=1, majority vote).
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from itertools import islice
from typing import Callable, Iterable, Iterator, Sequence

from pra.prompts import forced_answer_suffix, policy_messages, steps_prefix
from pra.reward_agent import Readout, ScoreRequest
from pra.options import option
from pra.readouts import READOUTS, best_letter, check_readout, read_letters
from pra.selection import stable_seed
from pra.steps import STEP_STOPS, extract_answer
from pra.types import Question, ScoredTrace, Step
from pra.backends.base import LMBackend, SamplingParams
from search.aggregation import AGGREGATIONS, aggregate_rewards
from search.controller_base import Proposal, SearchController
from search.controllers import Never
from pra.errors import UserError


class Stage(str, Enum):
    REASON = "reason"
    SEARCH = "search"
    REWARD = "reward"
    DONE = "done"


@dataclass
class SearchConfig:
    """The beam search's settings; each field's help is its ``pra eval`` flag's (``pra.options``)."""
    beam_width: int = option(1, group="search", metavar="B",
                             help="B: traces kept per question after each prune (pra)")
    branching: int = option(1, group="search", metavar="b",
                            help="b: candidate next steps per kept trace (pra; the first step asks B x b)")
    max_steps: int = option(4, group="search", help="reasoning steps at most; then the answer is read from the "
                                                      "logits (a forced answer)")
    step_tokens: int = option(48, group="search", help="new tokens per step at most")
    temperature: float = option(0.0, group="search", help="sampling temperature of the policy's steps (0: greedy; "
                                                           "sc and rag-sc sample at 0.7 when it is 0)")
    top_p: float = option(1.0, group="search", help="nucleus sampling: the smallest set of tokens holding this "
                                                     "share of the probability (sc and rag-sc: 0.95 when sampling by default)")
    seed: int = option(0, flag="", help="of sampled steps and the sample controller (set by --seed)")
    aggregate: str = option("best", flag="", help="best: the highest trace score; vote: majority over the beam "
                                                  "(set by the method)")
    docs_per_search: int = option(2, group="retrieval", help="passages retrieved for a step that searches (pra)")
    reward_aggregation: str = option("sum", group="search", choices=AGGREGATIONS,
                                     help="a trace's score from its step rewards, for pruning and the answer; sum "
                                          "is the paper's (pra)")
    readout: str = option("argmax", group="method", choices=READOUTS,
                          help="how answers are read from the logits (direct, forced answers): argmax | permavg "
                               "(averaged over rotations of the options) | calibrate (contextual calibration)")

    def __post_init__(self):
        check_readout(self.readout)
        if self.reward_aggregation not in AGGREGATIONS:
            raise UserError(f"search.reward_aggregation: unknown {self.reward_aggregation!r}; "
                             f"choose one of {', '.join(AGGREGATIONS)}")


@dataclass
class Candidate:
    """One partial trace of a beam: kept steps plus, while pending, the newest unscored step."""
    steps: list[Step]
    score: float = 0.0            # step rewards aggregated by SearchConfig.reward_aggregation
    answer: str | None = None
    finished: bool = False        # answered, or the policy ended without one
    scored: bool = True           # False while the newest step awaits its reward readout
    wants_search: bool = False    # the controller asked for evidence; SEARCH clears it
    docs: tuple[tuple[str, str], ...] = ()   # evidence for the newest step, shown to the reward agent
    forced: bool = False          # the answer was read from the logits after the step limit
    parent: int | None = None     # the Trace.tree index of the kept candidate this one extends
    node: int | None = None       # its own Trace.tree index, once its step has been ranked

    @property
    def texts(self) -> list[str]:
        return [s.text for s in self.steps]


@dataclass
class Node:
    """One candidate step as the prune ranked it, kept or not: the beam search tree, for viewing."""
    parent: int | None            # index in Trace.tree of the step it extends; None for a first step
    depth: int
    step: Step
    score: float
    answer: str | None
    kept: bool


@dataclass
class Trace:
    """One question in the queue: its beam, the candidates of the current step, and its stage."""
    question: Question
    context: tuple[tuple[str, str], ...] = ()     # documents in the policy prompt (RAG)
    examples: tuple[ScoredTrace, ...] = ()        # scored solved questions in the policy prompt (qwc)
    beam: list[Candidate] = field(default_factory=lambda: [Candidate(steps=[])])
    candidates: list[Candidate] = field(default_factory=list)
    stage: Stage = Stage.REASON
    depth: int = 0
    forced: bool = False
    prediction: str | None = None
    stats: Counter = field(default_factory=Counter)   # candidates, searches, tokens, seconds per stage
    tree: list[Node] = field(default_factory=list)    # every ranked candidate (reward-agent search only)

    @property
    def best(self) -> Candidate:
        return max(self.beam, key=lambda c: c.score)


class Engine:
    def __init__(self, policy: LMBackend, config: SearchConfig, reward_agent=None, retriever=None,
                 controller: SearchController | None = None):
        self.policy = policy
        self.config = config
        self.reward_agent = reward_agent
        self.retriever = retriever
        self.controller = controller or Never()
        if reward_agent is None and not isinstance(self.controller, Never):
            raise ValueError("a search controller needs a reward agent to score the retrieved evidence")

    # -- the queue ---------------------------------------------------------------------------------
    def run(self, traces: Iterable[Trace], max_active: int = 64,
            progress: Callable[[int], None] | None = None) -> Iterator[Trace]:
        """Drive all traces to DONE; yield each as soon as it finishes. At most ``max_active`` traces
        are in the queue: a finished one leaves and the next waiting one takes its place. ``progress``
        is called with the number of reasoning steps done, ``max_steps`` per question in all (a trace
        that finishes early counts its remaining steps then), so that a progress bar moves with the
        batched stages rather than only when whole questions finish."""
        self._progress = progress
        waiting = iter(traces)
        queue: list[Trace] = []
        while True:
            queue += list(islice(waiting, max_active - len(queue)))
            if not queue:
                return
            for stage, step in ((Stage.REASON, self._reason), (Stage.SEARCH, self._search),
                                (Stage.REWARD, self._reward)):
                part = [t for t in queue if t.stage == stage]
                if part:
                    started = time.perf_counter()
                    step(part)
                    share = (time.perf_counter() - started) / len(part)
                    for t in part:
                        t.stats[f"seconds_{stage.value}"] += share
                        self._advance(t)
            done = [t for t in queue if t.stage == Stage.DONE]
            if done:
                started = time.perf_counter()
                self._finish(done)
                for t in done:
                    t.stats["seconds_force"] += (time.perf_counter() - started) / len(done)
                if progress is not None:
                    progress(sum(max(self.config.max_steps - t.depth, 0) for t in done))
                yield from done
                queue = [t for t in queue if t.stage != Stage.DONE]

    def _advance(self, t: Trace) -> None:
        """Set the next stage from what the candidates still need; prune when all are scored."""
        if t.stage == Stage.REASON and self.reward_agent is not None and not self.controller.needs_readout:
            fresh = [c for c in t.candidates if not c.scored]
            started = time.perf_counter()    # a probe controller reads hidden states: its time counts
            for c, wants in zip(fresh, self.controller.decide([None] * len(fresh), _proposals(t, fresh))):
                c.wants_search = wants
            t.stats["seconds_control"] += time.perf_counter() - started
        if any(c.wants_search for c in t.candidates):
            t.stage = Stage.SEARCH
        elif any(not c.scored for c in t.candidates):
            t.stage = Stage.REWARD
        else:
            self._prune(t)

    # -- stages ------------------------------------------------------------------------------------
    def _policy_prompt(self, t: Trace, c: Candidate, next_step: int | None, suffix: str = "",
                       question: Question | None = None) -> str:
        """The policy's prompt for ``c``; ``question`` puts another option order (or content-free
        options) in place of the trace's, for the answer readouts."""
        messages = policy_messages(question or t.question, self.policy.has_chat_template, t.context,
                                   examples=t.examples)
        return self.policy.render(messages, steps_prefix(c.texts, next_step) + suffix)

    def _reason(self, traces: list[Trace]) -> None:
        cfg = self.config
        jobs = [(t, c) for t in traces for c in t.beam if not c.finished]
        n_root = cfg.beam_width * cfg.branching
        # One call per distinct n keeps each call a single batch (the root's first step asks for B x b).
        by_n: dict[int, list[tuple[Trace, Candidate]]] = {}
        for t, c in jobs:
            by_n.setdefault(n_root if t.depth == 0 else cfg.branching, []).append((t, c))
        for t in traces:
            t.candidates = [c for c in t.beam if c.finished]
        for n, group in by_n.items():
            prompts = [self._policy_prompt(t, c, len(c.steps) + 1) for t, c in group]
            params = SamplingParams(n=n, temperature=cfg.temperature, top_p=cfg.top_p,
                                    max_tokens=cfg.step_tokens, seed=cfg.seed,
                                    stop=STEP_STOPS)
            # Each prompt's samples come from (seed, question, rotation, step, beam member) alone, so a
            # question gets the same samples whatever shares its batch, shard, --max-active or resume.
            seeds = [stable_seed(cfg.seed, t.question.id, t.depth, next(i for i, m in enumerate(t.beam) if m is c))
                     for t, c in group]
            for (t, parent), outs in zip(group, self.policy.generate(prompts, params, seeds=seeds)):
                for out in outs:
                    text = out.text.strip()
                    answer = extract_answer(text, t.question.letters)
                    # An empty step means the policy has nothing more to say: the trace ends unanswered.
                    t.candidates.append(Candidate(
                        steps=parent.steps + [Step(text)], score=parent.score, answer=answer, parent=parent.node,
                        finished=answer is not None or not text,
                        scored=self.reward_agent is None))
                    t.stats["candidates"] += 1
                    t.stats["policy_tokens"] += out.tokens
        for t in traces:
            t.depth += 1
        if getattr(self, "_progress", None) is not None:
            self._progress(sum(t.depth <= cfg.max_steps for t in traces))

    def _search(self, traces: list[Trace]) -> None:
        jobs = [(t, c) for t in traces for c in t.candidates if c.wants_search]
        if self.retriever is None:
            raise ValueError("the search controller asked for evidence but no retriever was given")
        queries = [search_query(t.question, c.texts) for t, c in jobs]
        for (t, c), hits in zip(jobs, self.retriever.retrieve(queries, self.config.docs_per_search)):
            step = c.steps[-1]
            step.searched = True
            step.doc_ids = [h.passage.id for h in hits]
            c.wants_search = False
            c.scored = False           # read the reward again, now with the documents
            c.docs = tuple((h.passage.title, h.passage.text) for h in hits)
            t.stats["searches"] += 1

    def _reward(self, traces: list[Trace]) -> None:
        jobs = [(t, c) for t in traces for c in t.candidates if not c.scored]
        requests = [ScoreRequest(
            question=t.question, steps=tuple(c.texts[:-1]),
            rewards=tuple(s.reward for s in c.steps[:-1]), step=c.steps[-1].text,
            docs=c.docs) for t, c in jobs]
        counted = getattr(self.reward_agent, "stats", None)
        before = counted.prompt_tokens if counted else 0
        readouts: list[Readout] = self.reward_agent.score(requests)
        per_request = (counted.prompt_tokens - before) / len(requests) if counted else 0.0
        need = self.controller.needs_readout
        decisions = (self.controller.decide([r.action for r in readouts],
                                            [p for t, c in jobs for p in _proposals(t, [c])])
                     if need else [False] * len(jobs))
        for (t, c), r, d in zip(jobs, readouts, decisions):
            step = c.steps[-1]
            step.reward = r.reward
            # The action kept is the first read: the one a reading controller decided on, before documents
            # (always / never decide without reading; their steps keep the readout with what they got).
            if step.action is None:
                step.action = r.action
            c.scored = True
            # Search once per step: only a candidate not yet given documents may ask for them.
            c.wants_search = d and not step.searched
            if not c.wants_search:
                c.score = aggregate_rewards([s.reward or 0.0 for s in c.steps], self.config.reward_aggregation)
            t.stats["reward_calls"] += 1
            t.stats["reward_tokens"] += per_request

    def _prune(self, t: Trace) -> None:
        """Keep the top B by trace score (finished candidates compete too), then go on or stop."""
        if self.reward_agent is None:
            t.beam = t.candidates     # CoT / self-consistency: nothing to rank by, every sample goes on
        else:
            ranked = sorted(t.candidates, key=lambda c: c.score, reverse=True)  # stable: ties keep order
            t.beam = ranked[: self.config.beam_width]
            kept = {id(c) for c in t.beam}
            for c in t.candidates:
                if c.node is None:    # new at this depth; a finished candidate carried along is already in
                    c.node = len(t.tree)
                    t.tree.append(Node(c.parent, t.depth, c.steps[-1], round(c.score, 4), c.answer, id(c) in kept))
        t.candidates = []
        if all(c.finished for c in t.beam) or t.depth >= self.config.max_steps:
            t.stage = Stage.DONE
        else:
            t.stage = Stage.REASON

    def _finish(self, traces: list[Trace]) -> None:
        """Force an answer where a beam member has none, in one batched call, then predict."""
        jobs = [(t, c) for t in traces for c in t.beam if c.answer is None]
        if jobs:
            force = lambda t, c: lambda q: self._policy_prompt(
                t, c, None, forced_answer_suffix(c.steps), question=q)
            items = [(t.question, force(t, c)) for t, c in jobs]
            for (t, c), lp in zip(jobs, read_letters(self.policy, items, self.config.readout)):
                c.answer = best_letter(lp)
                c.forced = True
        for t in traces:
            if self.config.aggregate == "vote":
                votes = Counter(c.answer for c in t.beam)
                t.prediction = votes.most_common(1)[0][0]
                t.forced = all(c.forced for c in t.beam if c.answer == t.prediction)
            else:
                t.prediction = t.best.answer
                t.forced = t.best.forced


def _proposals(t: Trace, candidates: Sequence[Candidate]) -> list[Proposal]:
    return [Proposal(t.question, t.context, tuple(c.texts)) for c in candidates]


def search_query(question: Question, steps: Sequence[str]) -> str:
    """The paper's retrieval query for a step: the question plus its last two steps."""
    return "\n".join([question.question, *steps[-2:]])
