"""PULSE decoding: chain of thought, step by step, retrieving only where the probe flags a step.

After each step the probe scores it from the policy's hidden states. A flagged step triggers one
retrieval (BM25 top ``candidates`` on the step's content words; the first passage not yet used for the
question) and is regenerated with that passage either before the question ("front", the passages of
all earlier regenerations stay there) or just before the step in the trace ("step"); earlier steps
are kept. The IRCoT baseline ("ircot") retrieves the same way at every step without a probe: the
question's content words before the first step, then each new step's, with the passages accumulating
before the question for the steps that follow (no regeneration: one generation per step).

All live questions advance together: one batched policy call per step (and one per regeneration),
one batched probe pass, one batched retrieval.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import numpy as np

from pra.backends.base import LMBackend, SamplingParams
from pra.prompts import FORCE_ANSWER, policy_messages
from pra.pulse.extract import StepReader, step_text
from pra.pulse.features import concat
from pra.steps import STEP_STOPS, content_words, extract_answer
from pra.types import Question, Step
from pra.errors import UserError

MODES = ("front", "step", "ircot")


@dataclass
class PulseConfig:
    mode: str = "front"            # front | step | ircot
    max_steps: int = 4
    step_tokens: int = 48
    candidates: int = 3            # BM25 hits to pick the first unused passage from
    max_doc_chars: int = 600       # per passage in the policy prompt


@dataclass
class PulseTrace:
    """One question: kept steps, the passage line placed before each step ("step"), the passages
    before the question ("front", "ircot"), and which passages it has used."""
    question: Question
    steps: list[Step] = field(default_factory=list)
    notes: list[str | None] = field(default_factory=list)
    front: list[tuple[str, str]] = field(default_factory=list)
    used: set[str] = field(default_factory=set)
    flags: list[dict] = field(default_factory=list)     # per step: probe score, flagged, replaced text
    answer: str | None = None
    done: bool = False
    forced: bool = False
    stats: Counter = field(default_factory=Counter)


class PulseDecoder:
    def __init__(self, policy: LMBackend, retriever, config: PulseConfig, probe=None, threshold: float | None = None):
        if config.mode not in MODES:
            raise UserError(f"PULSE decoding mode must be one of {', '.join(MODES)}, got {config.mode!r}")
        if config.mode != "ircot" and probe is None:
            raise UserError(f"--method pulse-{config.mode} needs a probe: --search pulse:PATH[:threshold]")
        if probe is not None and probe.backbone != policy.name:
            raise UserError(f"the probe reads {probe.backbone}'s states, but the policy is {policy.name}")
        self.policy, self.retriever, self.config = policy, retriever, config
        self.probe = probe
        self.threshold = probe.threshold if threshold is None and probe is not None else threshold
        self.reader = StepReader.from_backend(policy) if probe is not None else None

    # -- prompts ---------------------------------------------------------------------------------------
    def _head(self, t: PulseTrace) -> str:
        docs = [(title, text[:self.config.max_doc_chars]) for title, text in t.front]
        return self.policy.render(policy_messages(t.question, self.policy.has_chat_template, docs), "")

    def _prompt(self, t: PulseTrace, note: str | None = None) -> str:
        """The text that asks for the next step (with ``note`` placed just before it)."""
        texts = [s.text for s in t.steps]
        base = step_text(self._head(t), texts, t.notes).text
        sep = "\n" if texts else ""
        return base + sep + (note + "\n" if note else "") + f"Step {len(texts) + 1}:"

    # -- the loop ----------------------------------------------------------------------------------------
    def run(self, questions: Iterable[Question], batch: int = 16) -> Iterator[PulseTrace]:
        """Decode every question; yield each when it has answered (or been forced to)."""
        pending = list(questions)
        for s in range(0, len(pending), batch):
            traces = [PulseTrace(q) for q in pending[s:s + batch]]
            started = time.perf_counter()
            if self.config.mode == "ircot":
                self._retrieve_front(traces, [t.question.question for t in traces])
            for _ in range(self.config.max_steps):
                live = [t for t in traces if not t.done]
                if not live:
                    break
                texts = self._generate([self._prompt(t) for t in live], live)
                flagged = self._flag(live, texts)
                if self.config.mode == "ircot":    # no query from a step that ends the trace
                    going = [i for i, x in enumerate(texts) if x and extract_answer(x, live[i].question.letters) is None]
                    self._retrieve_front([live[i] for i in going], [texts[i] for i in going])
                elif flagged:
                    self._regenerate(live, texts, flagged)
                for t, text in zip(live, texts):
                    self._commit(t, text)
            self._force([t for t in traces if t.answer is None])
            share = (time.perf_counter() - started) / len(traces)
            for t in traces:
                t.stats["seconds"] += share
            yield from traces

    def _generate(self, prompts: list[str], traces: list[PulseTrace]) -> list[str]:
        params = SamplingParams(n=1, temperature=0.0, max_tokens=self.config.step_tokens, stop=STEP_STOPS)
        outs = self.policy.generate(prompts, params)
        for t, (o,) in zip(traces, outs):
            t.stats["policy_tokens"] += o.tokens
        return [o.text.strip() for (o,) in outs]

    def _flag(self, traces: list[PulseTrace], texts: list[str]) -> list[int]:
        """Probe each new step; the indices of the flagged ones (none for IRCoT, which always retrieves)."""
        if self.probe is None:
            for t in traces:
                t.flags.append({"score": None, "flagged": False})
            return []
        rows = [i for i, x in enumerate(texts) if x]       # an empty step ends the trace: nothing to read
        scores = np.full(len(texts), np.nan)
        if rows:
            items = [step_text(self._head(traces[i]), [s.text for s in traces[i].steps] + [texts[i]],
                               traces[i].notes + [None]) for i in rows]
            readouts = [r[-1] for r in self.reader.read(items, only_last=True)]
            scores[rows] = self.probe.score(concat([r.trajectories[self.probe.pooling] for r in readouts]))
        flagged = []
        for i, (t, sc) in enumerate(zip(traces, scores)):
            hit = bool(not np.isnan(sc) and sc >= self.threshold)
            t.flags.append({"score": None if np.isnan(sc) else round(float(sc), 4), "flagged": hit})
            flagged += [i] * hit
        return flagged

    def _pick(self, traces: list[PulseTrace], queries: list[str]) -> list[tuple | None]:
        """For each query, the first of its top BM25 hits the question has not used yet (or None)."""
        hits = self.retriever.retrieve([content_words(q) or q for q in queries], self.config.candidates)
        picked = []
        for t, hs in zip(traces, hits):
            h = next((h for h in hs if h.passage.id not in t.used), None)
            t.stats["searches"] += 1
            if h is not None:
                t.used.add(h.passage.id)
                picked.append((h.passage.id, h.passage.title, h.passage.text))
            else:
                picked.append(None)
        return picked

    def _retrieve_front(self, traces: list[PulseTrace], queries: list[str]) -> None:
        """IRCoT: a passage for each query, before the question from the next step on; recorded on the
        step whose words were the query."""
        for t, p in zip(traces, self._pick(traces, queries)):
            if p is not None:
                t.front.append(p[1:])
                if t.flags:
                    t.flags[-1]["doc_ids"] = [p[0]]

    def _regenerate(self, traces: list[PulseTrace], texts: list[str], flagged: list[int]) -> None:
        """Retrieve for the flagged steps and write them again with the passage in place; ``texts``
        is updated where a passage was found."""
        picked = self._pick([traces[i] for i in flagged], [texts[i] for i in flagged])
        jobs = [(i, p) for i, p in zip(flagged, picked) if p is not None]
        prompts = []
        for i, (pid, title, text) in jobs:
            t, passage = traces[i], text[:self.config.max_doc_chars]
            note = None
            if self.config.mode == "front":
                t.front.append((title, passage))
            else:
                note = f"Evidence ({title}): {passage}" if title else f"Evidence: {passage}"
            prompts.append(self._prompt(t, note))
            t.flags[-1].update(replaced=texts[i], doc_ids=[pid], note=note)
        new = self._generate(prompts, [traces[i] for i, _ in jobs]) if jobs else []
        for (i, _), text in zip(jobs, new):
            texts[i] = text

    def _commit(self, t: PulseTrace, text: str) -> None:
        flag = t.flags[-1]
        if not text:          # the policy has nothing more to say: the trace ends unanswered
            t.done = True
            t.flags.pop()
            return
        t.steps.append(Step(text, action=flag.get("score"), searched="doc_ids" in flag,
                            doc_ids=list(flag.get("doc_ids", []))))
        t.notes.append(flag.pop("note", None))
        t.answer = extract_answer(text, t.question.letters)
        t.done = t.answer is not None

    def _force(self, traces: list[PulseTrace]) -> None:
        """Read an answer from the logits where the steps gave none, in one call."""
        if not traces:
            return
        prompts = []
        for t in traces:
            texts = [s.text for s in t.steps]
            base = step_text(self._head(t), texts, t.notes).text
            prompts.append(base + ("\n" if texts else "") + FORCE_ANSWER)
        for t, lp in zip(traces, self.policy.choice_logprobs(prompts, [t.question.letters for t in traces])):
            t.answer = max(lp, key=lp.get)
            t.forced = True
