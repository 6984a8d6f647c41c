"""Automatic prefix caching: the cache's bookkeeping on small tensors, then the transformers backend on
the embedded SmolLM2, where reuse must change the cost and not the output."""
import torch

from pra.backends.base import SamplingParams
from pra.backends.prefix_cache import BLOCK, PrefixCache
from pra.prompts import policy_messages, steps_prefix
from pra.benchmarks import load_eval_benchmark
from pra.steps import STEP_STOPS


def kv_for(ids, start=0, layers=2):
    """Fake states whose values are the token ids, so that gathered states can be read back as ids."""
    t = torch.tensor(ids[start:], dtype=torch.float32)[None, :, None].expand(1, -1, 3)
    return [(t, -t) for _ in range(layers)]


def test_lookup_finds_whole_blocks_then_matches_on_and_never_takes_the_last_token():
    cache = PrefixCache()
    a = list(range(100, 140))                       # 40 tokens: two whole blocks
    cache.store(a, None, 0, kv_for(a))
    assert cache.lookup(a[:20] + [7] * 30)[1] == 20             # one whole block, then 4 tokens more
    assert cache.lookup(a)[1] == 39                             # the last token must be run
    assert cache.lookup(a[:10] + [7] * 30)[0] is None           # no whole block shared
    assert cache.lookup([1] + a)[0] is None                     # shifted: nothing shared


def test_children_store_only_their_own_tokens_and_are_read_through_the_parent():
    cache = PrefixCache()
    head = list(range(48))
    parent = cache.store(head, None, 0, kv_for(head))
    entry, n = cache.lookup(head + [900, 901] * 10)
    assert entry is parent and n == 48
    child_ids = head + list(range(500, 530))
    child = cache.store(child_ids, parent, 48, kv_for(child_ids, start=48))
    assert cache.tokens == 48 + 30
    found, n = cache.lookup(child_ids + [1])
    assert found is child and n == 78 == 4 * BLOCK + 14
    pieces = PrefixCache.pieces(found, n)
    assert [offset for offset, _ in pieces] == [0, 48]
    keys = torch.cat([states[1][0] for _, states in pieces], dim=1)
    values = torch.cat([states[1][1] for _, states in pieces], dim=1)
    assert keys[0, :, 0].tolist() == child_ids and values[0, :, 0].tolist() == [-x for x in child_ids]


def test_eviction_is_least_recently_used_and_spares_parents_of_live_entries():
    cache = PrefixCache(max_tokens=100)
    head = list(range(40))
    parent = cache.store(head, None, 0, kv_for(head))
    old = cache.store(head + list(range(1000, 1030)), parent, 40, kv_for(list(range(70)), 40))
    cache.lookup(head + list(range(1000, 1030)) + [5])       # refreshes old, and so its parent
    new = cache.store(list(range(2000, 2040)), None, 0, kv_for(list(range(40))))
    assert cache.tokens <= 100
    kept = set(cache.entries)
    assert id(new) in kept and id(parent) in kept and id(old) not in kept   # the leaf went first
    assert cache.lookup(head + [3] * 20)[0] is parent


def test_cached_generation_equals_uncached_and_costs_fewer_prompt_tokens(smollm2):
    questions = load_eval_benchmark("medmcqa-eval", limit=2).questions
    first = [smollm2.render(policy_messages(q, smollm2.has_chat_template), steps_prefix([], 1)) for q in questions]
    second = [smollm2.render(policy_messages(q, smollm2.has_chat_template),
                             steps_prefix(["The question asks about a mechanism."], 2)) for q in questions]
    params = SamplingParams(max_tokens=16, stop=STEP_STOPS)
    try:
        smollm2.share_prefix = False
        before = smollm2.stats.prompt_tokens
        naive = smollm2.generate(first, params) + smollm2.generate(second, params)
        naive_cost = smollm2.stats.prompt_tokens - before
        smollm2.share_prefix = True
        smollm2.prefix_cache.clear()
        before = smollm2.stats.prompt_tokens
        cached = smollm2.generate(first, params) + smollm2.generate(second, params)
        cached_cost = smollm2.stats.prompt_tokens - before
    finally:
        smollm2.share_prefix = True
    assert [c[0].text for c in cached] == [c[0].text for c in naive]
    assert cached_cost < 0.7 * naive_cost       # the second step reran only its new tokens


def test_decode_loop_matches_transformers_generate(smollm2):
    """Rows that finish leave the batch; the others must go on exactly as generate() would run them."""
    questions = load_eval_benchmark("medmcqa-eval", limit=3).questions
    prompts = [smollm2.render(policy_messages(q, smollm2.has_chat_template), steps_prefix([], 1)) for q in questions]
    ours = smollm2.generate(prompts, SamplingParams(max_tokens=12))
    for prompt, out in zip(prompts, ours):
        enc = smollm2.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
        with torch.inference_mode():
            ref = smollm2.model.generate(**enc, max_new_tokens=12, do_sample=False,
                                         pad_token_id=smollm2.tokenizer.pad_token_id)
        text = smollm2.tokenizer.decode(ref[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        assert out[0].text == text


def test_greedy_copies_are_counted_once(smollm2):
    """n greedy completions of a prompt are one decode: the backend's token count (what tokens/s in
    eval.perf.backends divides by, as vLLM counts) holds it once, each completion still says its length."""
    q = load_eval_benchmark("medmcqa-eval", limit=1).questions[0]
    prompt = smollm2.render(policy_messages(q, smollm2.has_chat_template), steps_prefix([], 1))
    before = smollm2.stats.generated_tokens
    out = smollm2.generate([prompt], SamplingParams(n=4, max_tokens=8))[0]
    assert len(out) == 4 and len({c.text for c in out}) == 1
    assert smollm2.stats.generated_tokens - before == out[0].tokens > 0


def test_sliding_window_model_reuses_prefixes_beyond_its_window():
    """Gemma 3's sliding layers keep every state and take their window from a mask in true positions:
    cached equals naive for prompts longer than the window, decoding across its edge included."""
    from pra.backends.transformers_backend import TransformersBackend

    gemma = TransformersBackend("gemma3-270m", dtype="float32")
    question = load_eval_benchmark("medqa", limit=1).questions[0]
    filler = ["The question asks about a mechanism that the options name in turn."] * 30
    prompts = [gemma.render(policy_messages(question, False), steps_prefix(steps, len(steps) + 1))
               for steps in (filler[:10], filler)]
    assert len(gemma._tokens(prompts[0])) + 40 > gemma.window       # decoding crosses the window's edge
    assert len(gemma._tokens(prompts[1])) > gemma.window + 200
    params = SamplingParams(max_tokens=40)
    gemma.share_prefix = False
    naive = gemma.generate(prompts, params), gemma.choice_logprobs(prompts, [list("ABCD")] * 2)
    gemma.share_prefix = True
    cached = gemma.generate(prompts, params), gemma.choice_logprobs(prompts, [list("ABCD")] * 2)
    assert gemma.stats.extra["cached_prompt_tokens"] > gemma.window
    assert cached[0] == naive[0]
    assert all(abs(a[k] - b[k]) < 1e-4 for a, b in zip(cached[1], naive[1]) for k in "ABCD")
    # ... and both equal the model's own pass, which applies the window itself.
    enc = gemma.tokenizer(prompts[1], return_tensors="pt")
    with torch.inference_mode():
        ref = gemma.model(**enc).logits[0, -1, gemma.token_ids(list("ABCD"))].log_softmax(-1).tolist()
    assert all(abs(ref[j] - cached[1][1][k]) < 1e-4 for j, k in enumerate("ABCD"))
