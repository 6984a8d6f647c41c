"""Policy backend on Hugging Face transformers: batched, left-padded generation on CPU or GPU."""
from __future__ import annotations

import time
import zlib
from dataclasses import replace

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from pra.models import load_causal_lm
from pra.backends.base import (BackendStats, Completion, LMBackend, Message, SamplingParams,
                              SlotLogprobs, cut_at_stop, render_chat)


class TransformersBackend(LMBackend):
    def __init__(self, model: str, batch_size: int = 32, dtype: str | None = None, device: str | None = None,
                 adapter: str | None = None, share_prefix: bool = True):
        self.name = model
        self.model, self.tokenizer = load_causal_lm(model, dtype=dtype, device=device, adapter=adapter)
        self.share_prefix = share_prefix
        self.tokenizer.padding_side = "left"
        self.batch_size = batch_size
        self.stats = BackendStats()
        # Tokens that end a sequence: the model's end-of-turn ids, its tokenizer's EOS, and padding.
        model_eos = self.model.generation_config.eos_token_id
        self._ends = {*(model_eos if isinstance(model_eos, list) else [model_eos]),
                      self.tokenizer.eos_token_id, self.tokenizer.pad_token_id}

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def has_chat_template(self) -> bool:
        return bool(self.tokenizer.chat_template)

    def render(self, messages: list[Message], assistant_prefix: str = "") -> str:
        return render_chat(self.tokenizer, messages, assistant_prefix)

    def _encode(self, prompts: list[str]) -> dict[str, torch.Tensor]:
        # Chat templates already carry their special tokens; plain prompts get the tokenizer's BOS.
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True,
                             add_special_tokens=not self.has_chat_template)
        return {k: v.to(self.device) for k, v in enc.items()}

    @torch.inference_mode()
    def generate(self, prompts: list[str], params: SamplingParams) -> list[list[Completion]]:
        start = time.perf_counter()
        sample = params.temperature > 0
        if not sample and params.n > 1:   # greedy samples are all alike: decode once, hand out n copies
            once = self.generate(prompts, replace(params, n=1))
            return [outs * params.n for outs in once]
        flat = [(i, p) for i, p in enumerate(prompts) for _ in range(params.n)]
        # Sort by length so that each batch pads little; results go back to prompt order.
        order = sorted(range(len(flat)), key=lambda j: len(flat[j][1]))
        texts: list[Completion | None] = [None] * len(flat)
        if params.seed is not None:
            # Seeded by the call's content, not a call counter: the same command gives the same samples
            # however often the backend was used before.
            torch.manual_seed(zlib.crc32("\x00".join(prompts).encode(), params.seed))
        for s in range(0, len(order), self.batch_size):
            chunk = order[s:s + self.batch_size]
            enc = self._encode([flat[j][1] for j in chunk])
            out = self.model.generate(
                **enc, max_new_tokens=params.max_tokens, do_sample=sample,
                temperature=params.temperature if sample else None,
                top_p=params.top_p if sample else None, top_k=None,
                stopping_criteria=StoppingCriteriaList([StopOnText(self.tokenizer, params.stop,
                                                                   enc["input_ids"].shape[1])]),
                pad_token_id=self.tokenizer.pad_token_id)
            new = out[:, enc["input_ids"].shape[1]:]
            self.stats.prompt_tokens += int(enc["attention_mask"].sum())
            for j, ids in zip(chunk, new):
                texts[j] = self._completion(ids, params)
        self.stats.calls += 1
        self.stats.seconds += time.perf_counter() - start
        grouped: list[list[Completion]] = [[] for _ in prompts]
        for (i, _), c in zip(flat, texts):
            grouped[i].append(c)
        return grouped

    def _completion(self, ids: torch.Tensor, params: SamplingParams) -> Completion:
        ids = ids.tolist()
        ended = next((k for k, t in enumerate(ids) if t in self._ends), None)
        kept = ids if ended is None else ids[:ended]
        text, hit_stop = cut_at_stop(self.tokenizer.decode(kept, skip_special_tokens=True), params.stop)
        n_tokens = len(kept) + (ended is not None)
        self.stats.generated_tokens += n_tokens
        return Completion(text=text, tokens=n_tokens, stopped=hit_stop or ended is not None)

    def token_ids(self, choices: list[str] | tuple[str, ...]) -> list[int]:
        ids = []
        for c in choices:
            tok = self.tokenizer.encode(c, add_special_tokens=False)
            if len(tok) != 1:
                raise ValueError(f"choice {c!r} is not a single token for {self.name} ({tok})")
            ids.append(tok[0])
        return ids

    @torch.inference_mode()
    def choice_logprobs(self, prompts: list[str], choices: list[list[str]]) -> list[dict[str, float]]:
        start = time.perf_counter()
        out: list[dict[str, float]] = []
        for s in range(0, len(prompts), self.batch_size):
            enc = self._encode(prompts[s:s + self.batch_size])
            logits = self.model(**enc).logits[:, -1, :].float()   # left padding: last column is the next token
            self.stats.prompt_tokens += int(enc["attention_mask"].sum())
            for row, opts in zip(logits, choices[s:s + self.batch_size]):
                lp = torch.log_softmax(row[self.token_ids(opts)], dim=-1)
                out.append(dict(zip(opts, lp.tolist())))
        self.stats.calls += 1
        self.stats.seconds += time.perf_counter() - start
        return out


    @torch.inference_mode()
    def slot_logprobs(self, prompts: list[tuple[str, str]], digits: tuple[str, str] = ("0", "1"),
                      sep: str = ",") -> list[SlotLogprobs]:
        """Prefix KV reuse: each distinct prefix is run once, its cache rows are repeated for the
        suffixes that share it, and only the suffixes (plus the two answer tokens) are computed per row.
        With ``share_prefix=False`` every prompt is its own group: the naive cost, the same numbers."""
        start = time.perf_counter()
        digit_ids, (sep_id,) = self.token_ids(digits), self.token_ids([sep])
        keys = [p if self.share_prefix else (i, p) for i, (p, _) in enumerate(prompts)]
        groups: dict = {}
        for i, k in enumerate(keys):
            groups.setdefault(k, []).append(i)
        out: list[SlotLogprobs | None] = [None] * len(prompts)
        chunk: list[list[int]] = []
        # Whole groups per forward batch, up to batch_size rows, in order of length so that a batch pads
        # little (padding costs full compute on a CPU).
        by_length = sorted(groups.values(), key=lambda g: (len(prompts[g[0]][0]), max(len(prompts[i][1]) for i in g)))
        for members in by_length:
            if chunk and sum(map(len, chunk)) + len(members) > self.batch_size:
                self._slot_chunk(prompts, chunk, digit_ids, sep_id, digits, out)
                chunk = []
            chunk.append(members)
        if chunk:
            self._slot_chunk(prompts, chunk, digit_ids, sep_id, digits, out)
        self.stats.calls += 1
        self.stats.seconds += time.perf_counter() - start
        return out

    def _slot_chunk(self, prompts, groups: list[list[int]], digit_ids, sep_id, digits, out) -> None:
        tok, dev = self.tokenizer, self.device
        special = not self.has_chat_template
        pre = tok([prompts[g[0]][0] for g in groups], return_tensors="pt", padding=True,
                  add_special_tokens=special).to(dev)
        pre_mask = pre["attention_mask"]
        pre_pos = (pre_mask.cumsum(-1) - 1).clamp(min=0)
        cache = self.model(input_ids=pre["input_ids"], attention_mask=pre_mask, position_ids=pre_pos,
                           use_cache=True).past_key_values
        rows = [i for g in groups for i in g]
        owner = torch.tensor([gi for gi, g in enumerate(groups) for _ in g], device=dev)
        cache.batch_select_indices(owner)
        suf_ids = [tok(prompts[i][1], add_special_tokens=False)["input_ids"] for i in rows]
        width = max(map(len, suf_ids))
        pad = tok.pad_token_id
        suf = torch.tensor([ids + [pad] * (width - len(ids)) for ids in suf_ids], device=dev)
        suf_mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids in suf_ids], device=dev)
        lens = torch.tensor([len(ids) for ids in suf_ids], device=dev)
        base = pre_mask.sum(-1)[owner]                          # real prefix tokens per row
        mask = torch.cat([pre_mask[owner], suf_mask], dim=1)
        pos = base[:, None] + torch.arange(width, device=dev)[None, :]
        logits = self.model(input_ids=suf, attention_mask=mask, position_ids=pos, cache=cache,
                            use_cache=True).logits
        first = logits[torch.arange(len(rows), device=dev), lens - 1].float().log_softmax(-1)[:, digit_ids]
        # Slot 2: feed the more likely slot-1 digit and the separator after each row's last real token.
        chosen = torch.tensor(digit_ids, device=dev)[first.argmax(-1)]
        step = torch.stack([chosen, torch.full_like(chosen, sep_id)], dim=1)
        mask2 = torch.cat([mask, torch.ones(len(rows), 2, dtype=mask.dtype, device=dev)], dim=1)
        pos2 = (base + lens)[:, None] + torch.arange(2, device=dev)[None, :]
        logits2 = self.model(input_ids=step, attention_mask=mask2, position_ids=pos2, cache=cache).logits
        second = logits2[:, -1].float().log_softmax(-1)[:, digit_ids]
        self.stats.prompt_tokens += int(pre_mask.sum()) + int(lens.sum()) + 2 * len(rows)
        for r, i in enumerate(rows):
            out[i] = SlotLogprobs(dict(zip(digits, first[r].tolist())), dict(zip(digits, second[r].tolist())))


class StopOnText(StoppingCriteria):
    """Stop a sequence once its newest tokens spell a stop string. Decodes only a short tail per step:
    transformers' own ``stop_strings`` criterion costs more than the forward pass of a small model."""

    def __init__(self, tokenizer, stop: tuple[str, ...], prompt_len: int, window: int = 8):
        self.tokenizer, self.stop, self.prompt_len, self.window = tokenizer, stop, prompt_len, window

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs) -> torch.Tensor:
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        if not self.stop:
            return done
        start = max(self.prompt_len, input_ids.shape[1] - self.window)
        tails = self.tokenizer.batch_decode(input_ids[:, start:], skip_special_tokens=True)
        for i, tail in enumerate(tails):
            done[i] = any(s in tail for s in self.stop)
        return done

