"""The methods ``pra eval`` runs, in one table (as search-and-learn's ``APPROACHES``): for each, what it
is, how it runs, which of the policy's prompts it reads, what it retrieves, and which of the settings
that only some methods read it reads. Everything that depends on the method asks this table: the
config's choices and checks (``eval.checks``), the run folder's fingerprint (``eval.run_folder``), the
runner (``eval.run``), suites, plans, the listing and the report, so that they cannot disagree."""
from __future__ import annotations

from dataclasses import dataclass

# Groups of settings a method reads ("search.x": the field x of the ``search:`` block, SearchConfig).
STEPS = frozenset({"search.max_steps", "search.step_tokens"})          # a trace's length
READOUT = frozenset({"search.readout"})                                # how a letter is read from the logits
SAMPLING = frozenset({"search.temperature", "search.top_p", "search.seed"})
PASSAGES = frozenset({"corpus", "retrieval", "rag_docs"})             # passages put before the question
ALL_SEARCH = "search.*"     # every field of the search block: PRA's beam search reads its whole shape


@dataclass(frozen=True)
class Method:
    """One method. ``runner``: ``letters`` (the answer letter read from the logits), ``engine`` (the
    step engine, ``search.engine``) or ``pulse`` (PULSE decoding's own step loop,
    ``search.pulse_decoding``); ``mode``: how the engine shapes its traces (``greedy``: one trace,
    ``vote``: k samples and a majority vote, ``search``: the config's beam search) or PULSE's mode;
    ``prompt``: the policy's prompt (``pra.prompts.PROMPT_KINDS``; PRA's passages go to the agent, not
    the policy); ``retrieves``: ``nothing``, ``question`` (the top passages before the question, once),
    ``steps`` (BM25 passages at the steps PULSE flags, or at every step) or ``search`` (when its search
    controller searches); ``reads``: the settings, among those only some methods read, that this one
    reads (config field names, ``search.x`` for the search block; every other setting is read by all)."""
    name: str
    about: str
    flags: str                   # the flags that shape it, shown by `pra list methods`
    runner: str
    mode: str
    prompt: str
    retrieves: str
    reads: frozenset[str]


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("direct", "the answer letter read from the logits, no reasoning", "--readout",
           "letters", "letters", "direct", "nothing", READOUT),
    Method("cot", "one greedy step-by-step trace", "--max-steps, --step-tokens",
           "engine", "greedy", "steps", "nothing", STEPS | READOUT),
    Method("sc", "self-consistency: k sampled traces, majority vote", "--samples, --temperature",
           "engine", "vote", "steps", "nothing", STEPS | READOUT | SAMPLING | {"samples"}),
    Method("rag", "CoT with retrieved passages before the question", "--corpus, --retrieval, --rag-docs",
           "engine", "greedy", "docs", "question", STEPS | READOUT | PASSAGES),
    Method("rag-sc", "self-consistency with retrieved passages", "--samples, --corpus, --rag-docs",
           "engine", "vote", "docs", "question", STEPS | READOUT | SAMPLING | PASSAGES | {"samples"}),
    Method("qwc", "CoT after the best and worst scored training traces (MedTraj)", "--qwc-pool, --qwc-k",
           "engine", "greedy", "examples", "nothing", STEPS | READOUT | {"qwc_pool", "qwc_k"}),
    Method("pra", "process reward agent beam search: B x b candidates a step, scored, searched, pruned",
           "--reward-agent, --search, --beam-width, --branching", "engine", "search", "steps", "search",
           frozenset({ALL_SEARCH, "reward_agent", "agent_backend", "agent_dtype", "agent_base_url", "search_controller",
                      "corpus", "retrieval"})),
    # PULSE decoding retrieves with BM25 and forces its own readout.
    Method("pulse-front", "PULSE: a hidden-state probe flags a step; retrieve before it and regenerate",
           "--search pulse:PROBE", "pulse", "front", "docs", "steps",
           STEPS | {"search_controller", "corpus", "rag_docs"}),
    Method("pulse-step", "PULSE: retrieve for the flagged step only and regenerate it", "--search pulse:PROBE",
           "pulse", "step", "docs", "steps", STEPS | {"search_controller", "corpus", "rag_docs"}),
    Method("ircot", "IRCoT: retrieve after every step (BM25)", "--corpus, --rag-docs",
           "pulse", "ircot", "docs", "steps", STEPS | {"corpus", "rag_docs"}),
)}
# The settings only some methods read (those not named here, and not in the search block, all read).
SELECTIVE = frozenset().union(*(m.reads for m in METHODS.values())) - {ALL_SEARCH}


def reads(method: str, field: str) -> bool:
    """Whether ``method`` reads the setting ``field`` (``search.x`` for the search block)."""
    m = METHODS.get(method)
    if m is None:
        return False
    return field in m.reads or (field.startswith("search.") and ALL_SEARCH in m.reads)


def readers(field: str) -> tuple[str, ...] | None:
    """The methods that read ``field``; None for a setting every method reads."""
    if field not in SELECTIVE and not field.startswith("search."):
        return None
    return tuple(name for name in METHODS if reads(name, field))


def prompt_kind(method: str) -> str:
    """Which of the policy's prompts a method reads (``pra.prompts.PROMPT_KINDS``)."""
    m = METHODS.get(method)
    return m.prompt if m is not None else "steps"


def retrieves(method: str, search_controller: str = "never") -> bool:
    """Whether a run of this method reads the corpus (PRA only when its controller may search)."""
    m = METHODS.get(method)
    if m is None:
        return False
    return m.retrieves in ("question", "steps") or (m.retrieves == "search" and search_controller != "never")


def uses_corpus(method: str) -> bool:
    """Whether the method may read the corpus at all (PRA even when its controller never searches: its
    config names one)."""
    m = METHODS.get(method)
    return m is not None and m.retrieves != "nothing"
