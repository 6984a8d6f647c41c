"""Token-window chunking with overlap, and exact-duplicate removal."""
from __future__ import annotations

import hashlib
from bisect import bisect_right
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Iterable, Iterator

from corpora.types import Passage
from pra.errors import UserError


@dataclass(frozen=True)
class Chunking:
    """Windows of ``size`` tokens of ``tokenizer``, consecutive windows sharing ``overlap`` tokens.

    MedRAG cuts 1000 characters with 200 overlap, but our default encoder (MiniLM) reads at most 256
    tokens and drops the rest: 192 tokens (about 800 characters of English prose) leave room for the
    title and the special tokens, and 32 tokens of overlap keep MedRAG's ratio of about a fifth.
    """
    tokenizer: str = "minilm-l6-v2"
    size: int = 192
    overlap: int = 32

    def __post_init__(self):
        if not 0 <= self.overlap < self.size:
            raise UserError(f"overlap must be in [0, size): got size={self.size} overlap={self.overlap}")


@lru_cache(maxsize=4)
def _tokenizer(name: str):
    from transformers import AutoTokenizer

    from pra.models import resolve
    tok = AutoTokenizer.from_pretrained(resolve(name)).backend_tokenizer
    tok = type(tok).from_str(tok.to_str())  # a private copy: its saved padding and truncation must go
    tok.no_padding()
    tok.no_truncation()
    return tok


def normalize(text: str) -> str:
    return " ".join(text.split())


def chunk_text(text: str, chunking: Chunking = Chunking()) -> list[str]:
    """Split ``text`` into token windows; a cut falls where a whitespace-separated word begins."""
    offsets = _tokenizer(chunking.tokenizer).encode(text, add_special_tokens=False).offsets
    n = len(offsets)
    if n <= chunking.size:
        return [text] if text else []
    cuts = [i for i, (s, _) in enumerate(offsets) if s == 0 or text[s - 1].isspace()]

    def snap(i: int, lo: int) -> int:
        """The last word start at or before token ``i``; ``i`` itself if no word starts in (lo, i]."""
        j = cuts[bisect_right(cuts, i) - 1] if cuts and cuts[0] <= i else i
        return j if j > lo else i

    chunks, start = [], 0
    while True:
        end = n if start + chunking.size >= n else snap(start + chunking.size, start)
        chunks.append(text[offsets[start][0]:offsets[end - 1][1]])
        if end == n:
            return chunks
        nxt = snap(end - chunking.overlap, start)
        start = nxt if nxt > start else end


def chunk(doc: Passage, chunking: Chunking = Chunking()) -> list[Passage]:
    """The passages of one document, with ids ``<doc id>#<chunk index>``."""
    return [replace(doc, id=f"{doc.id}#{i}", text=t) for i, t in enumerate(chunk_text(normalize(doc.text), chunking))]


def doc_id(passage_id: str) -> str:
    """The id of the document a passage was cut from."""
    return passage_id.rsplit("#", 1)[0]


@dataclass
class Dedup:
    """Drops passages whose text was already seen (exact match after whitespace normalisation)."""
    seen: set[bytes] = field(default_factory=set)
    removed: int = 0

    def __call__(self, passages: Iterable[Passage]) -> Iterator[Passage]:
        for p in passages:
            key = hashlib.sha1(p.text.encode()).digest()
            if key in self.seen:
                self.removed += 1
                continue
            self.seen.add(key)
            yield p
