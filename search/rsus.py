"""RSUS, the retrieval-need score of ReaLM-Retrieve, as a search controller: search for a candidate step
when a weighted sum of three uncertainty signals passes a threshold. All three come from the policy and
a BM25 index, so RSUS works where hidden states (PULSE) or a trained reward agent are missing:

  0.40 x verbalized uncertainty     1 - the policy's stated confidence (0-9) that the step is right,
                                     read as the expectation over the ten digit tokens
  0.35 x entity retrieval entropy   normalised entropy of the BM25 scores that the step's content words
                                     get: flat scores mean the corpus has no clear answer for them
  0.25 x continuation disagreement  1 - mean pairwise word overlap of k sampled next steps
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from typing import Sequence

from pra.backends.base import LMBackend, SamplingParams
from pra.prompts import policy_messages, steps_prefix
from pra.steps import STEP_STOPS, content_words
from pra.types import Message
from search.controller_base import Proposal, score_steps

CONFIDENCE_QUESTION = ("How confident are you that your last step is correct? Answer with one digit from "
                       "0 (surely wrong) to 9 (surely right).")
DIGITS = [str(d) for d in range(10)]


@dataclass
class RSUSConfig:
    w_confidence: float = 0.40
    w_entropy: float = 0.35
    w_disagreement: float = 0.25
    threshold: float = 0.65
    samples: int = 3            # sampled continuations for the disagreement signal
    top_k: int = 10             # BM25 hits whose scores make the entropy
    step_tokens: int = 48
    temperature: float = 0.7
    seed: int = 0


def expected_confidence(logprobs: dict[str, float]) -> float:
    """The mean stated confidence in [0, 1] from log-probs over the digits 0-9 (renormalised)."""
    weights = {d: math.exp(lp) for d, lp in logprobs.items()}
    return sum(int(d) * w for d, w in weights.items()) / (9 * sum(weights.values()))


def normalised_entropy(scores: Sequence[float]) -> float:
    """Entropy of the scores taken as a distribution, over its maximum: 1 = flat (or nothing found)."""
    positive = [s for s in scores if s > 0]
    if len(positive) < 2:
        return 1.0 if not positive else 0.0
    total = sum(positive)
    return -sum(s / total * math.log(s / total) for s in positive) / math.log(len(positive))


def disagreement(texts: Sequence[str]) -> float:
    """1 - mean pairwise Jaccard overlap of the texts' content words (0 when all say the same)."""
    bags = [set(content_words(t).lower().split()) for t in texts]
    pairs = [len(a & b) / len(a | b) if a | b else 1.0 for a, b in combinations(bags, 2)]
    return 1.0 - sum(pairs) / len(pairs) if pairs else 0.0


@dataclass
class RSUS:
    policy: LMBackend
    retriever: object              # BM25: corpora.retrieval.load_retriever(corpus, mode="bm25")
    config: RSUSConfig
    needs_readout: bool = False

    def scores(self, proposals: Sequence[Proposal]) -> list[float]:
        """The weighted score of each proposal's newest step, every signal in one batched call."""
        cfg, chat = self.config, self.policy.has_chat_template
        asked = [self.policy.render(policy_messages(p.question, chat, p.context) + [
            Message("assistant", steps_prefix(p.steps, None)), Message("user", CONFIDENCE_QUESTION)],
            "Confidence: ") for p in proposals]
        confidence = [expected_confidence(lp) for lp in self.policy.choice_logprobs(asked, [DIGITS] * len(asked))]
        queries = [content_words(p.steps[-1]) or p.question.question for p in proposals]
        entropy = [normalised_entropy([h.score for h in hits]) for hits in self.retriever.retrieve(queries, cfg.top_k)]
        onward = [self.policy.render(policy_messages(p.question, chat, p.context),
                                     steps_prefix(p.steps, len(p.steps) + 1)) for p in proposals]
        params = SamplingParams(n=cfg.samples, temperature=cfg.temperature, top_p=0.95,
                                max_tokens=cfg.step_tokens, stop=STEP_STOPS, seed=cfg.seed)
        spread = [disagreement([c.text for c in outs]) for outs in self.policy.generate(onward, params)]
        return [cfg.w_confidence * (1 - c) + cfg.w_entropy * e + cfg.w_disagreement * d
                for c, e, d in zip(confidence, entropy, spread)]

    def decide(self, actions: Sequence[float | None], proposals: Sequence[Proposal] = ()) -> list[bool]:
        scores = score_steps("RSUS", actions, proposals, self.scores)
        return [s is not None and s > self.config.threshold for s in scores]
