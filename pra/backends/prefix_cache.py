"""Automatic prefix caching for the transformers backend, after vLLM's: the key/value states of every
prompt the backend ran, found again by the longest run of whole 16-token blocks a new prompt shares
with one of them. A beam's next step, its siblings, the forced answer and the reward agent's prompts
about the same question then pay only for their new tokens. Cached states hold only while the weights
stay as they are (training clears the cache before each validation).

Entries form a tree (as in SGLang's radix cache): an entry holds the states of its own tokens only and
points at the entry it extended, so a question's head is stored once however many prompts grow from
it. Eviction is least-recently-used by tokens; using an entry also refreshes its ancestors, so a parent
is never evicted before its children.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

BLOCK = 16

LayerKV = tuple[torch.Tensor, torch.Tensor]     # keys, values: [kv_heads, tokens, head_dim]


@dataclass(eq=False)
class Entry:
    ids: tuple[int, ...]             # the whole prompt
    parent: "Entry | None"           # supplies tokens [0, start)
    start: int
    kv: list[LayerKV]                # per layer, tokens [start, len(ids))


def block_hashes(ids: list[int] | tuple[int, ...]) -> list[int]:
    """One hash per whole block, chained through the blocks before it: equal hashes, equal prefixes."""
    hashes, h = [], 0
    for s in range(0, len(ids) - BLOCK + 1, BLOCK):
        h = hash((h, tuple(ids[s:s + BLOCK])))
        hashes.append(h)
    return hashes


class PrefixCache:
    def __init__(self, max_tokens: int = 100_000):
        self.max_tokens = max_tokens
        self.clear()

    def clear(self) -> None:
        self.entries: OrderedDict[int, Entry] = OrderedDict()    # id(entry) -> entry, least recent first
        self.blocks: dict[int, Entry] = {}                       # block hash -> an entry holding that block
        self.tokens = 0

    def lookup(self, ids: list[int]) -> tuple[Entry | None, int]:
        """The entry sharing the most whole blocks with ``ids`` and how many tokens it supplies (its
        match may run on past the last whole block): never all of ``ids``, since the last token must be
        run to give the next token's logits."""
        best, n = None, 0
        for k, h in enumerate(block_hashes(ids[:len(ids) - 1])):
            entry = self.blocks.get(h)
            if entry is None or entry.ids[k * BLOCK:(k + 1) * BLOCK] != tuple(ids[k * BLOCK:(k + 1) * BLOCK]):
                break
            best, n = entry, (k + 1) * BLOCK
        if best is not None:
            # Past the last whole block, the entry may match further, token by token.
            limit = min(len(ids) - 1, len(best.ids))
            while n < limit and best.ids[n] == ids[n]:
                n += 1
            self._touch(best)
        return best, n

    @staticmethod
    def pieces(entry: Entry, n: int) -> list[tuple[int, list[LayerKV]]]:
        """The states of the first ``n`` tokens of ``entry``'s prompt as (offset, per-layer states) pieces
        from its ancestors, first to last: the caller writes each into place, nothing is joined."""
        out: list[tuple[int, list[LayerKV]]] = []
        while n > 0:
            if n > entry.start:
                out.append((entry.start, [(k[:, :n - entry.start], v[:, :n - entry.start]) for k, v in entry.kv]))
                n = entry.start
            entry = entry.parent
        return out[::-1]

    def store(self, ids: list[int], parent: Entry | None, start: int, kv: list[LayerKV]) -> Entry:
        """Keep the states of ``ids[start:]`` (``kv``, copied out of the batch) as a child of ``parent``."""
        entry = Entry(tuple(ids), parent, start, [(k.clone(), v.clone()) for k, v in kv])
        for h in block_hashes(ids):
            self.blocks.setdefault(h, entry)
        self.entries[id(entry)] = entry
        self.tokens += len(ids) - start
        self._touch(entry)
        while self.tokens > self.max_tokens and len(self.entries) > 1:
            self._evict(next(iter(self.entries.values())))
        return entry

    def _touch(self, entry: Entry | None) -> None:
        while entry is not None:
            if id(entry) in self.entries:
                self.entries.move_to_end(id(entry))
            entry = entry.parent

    def _evict(self, entry: Entry) -> None:
        del self.entries[id(entry)]
        self.tokens -= len(entry.ids) - entry.start
        for h in block_hashes(entry.ids):
            if self.blocks.get(h) is entry:
                del self.blocks[h]
