"""Dense text encoders: one model for queries and documents, or an asymmetric pair as in MedCPT."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import cached_property

import numpy as np

from corpora.types import Passage
from pra.errors import UserError

DTYPES = ("float32", "bfloat16")   # what a passage encoder's matmuls run in


@dataclass(frozen=True)
class EncoderConfig:
    name: str
    query_model: str
    doc_model: str | None = None    # None: the query model encodes documents too
    pooling: str = "mean"           # "mean" over tokens, or "cls"
    normalize: bool = True          # unit vectors, so inner product = cosine
    max_length: int = 256
    query_instruction: str = ""     # prefixed to every query (e5/bge-style encoders want one)
    doc_pair: bool = False          # feed documents as (title, text) pairs, as MedCPT's article encoder learnt
    batch_size: int = 32

    def to_dict(self) -> dict:
        return asdict(self)


PRESETS: dict[str, EncoderConfig] = {c.name: c for c in [
    EncoderConfig("minilm-l6-v2", "minilm-l6-v2"),
    # MedCPT (Jin et al. 2023): contrastive query/article encoders, [CLS] vectors compared by raw inner product.
    EncoderConfig("medcpt", "ncbi/MedCPT-Query-Encoder", "ncbi/MedCPT-Article-Encoder", pooling="cls",
                  normalize=False, max_length=512, doc_pair=True),
]}


def encoder_config(encoder: str | EncoderConfig) -> EncoderConfig:
    """A preset by name, or any hub id / local folder as one mean-pooled, normalised encoder."""
    if isinstance(encoder, EncoderConfig):
        return encoder
    return PRESETS.get(encoder) or EncoderConfig(encoder, encoder)


class _Model:
    """A transformers encoder with its tokenizer and pooling."""

    def __init__(self, name: str, config: EncoderConfig, device: str):
        import torch
        from transformers import AutoModel, AutoTokenizer

        from pra.models import resolve
        path = resolve(name)
        self.config, self.device = config, device
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).to(device).eval()
        self.torch = torch

    def embed(self, inputs: list, progress: str | None = None, threads: int | None = None,
              dtype: str = "float32") -> np.ndarray:
        """Embed strings or (title, text) pairs; batches of similar length waste no padding.

        ``dtype`` bfloat16 runs the matmuls under bfloat16 autocast (pooling and the output stay float32).
        """
        from tqdm.auto import tqdm

        cfg, torch = self.config, self.torch
        if dtype not in DTYPES:
            raise UserError(f"unknown embedding dtype {dtype!r}; one of {DTYPES}")
        order = np.argsort([-len(x if isinstance(x, str) else x[0] + x[1]) for x in inputs], kind="stable")
        out = np.zeros((len(inputs), self.model.config.hidden_size), dtype=np.float32)
        starts = range(0, len(inputs), cfg.batch_size)
        autocast = torch.autocast(torch.device(self.device).type, dtype=torch.bfloat16, enabled=dtype == "bfloat16")
        with _torch_threads(torch, threads if self.device == "cpu" else None), autocast:
            for s in tqdm(starts, desc=progress, unit="batch", disable=progress is None):
                self._batch(inputs, order[s:s + cfg.batch_size], out)
        return out

    def _batch(self, inputs: list, idx: np.ndarray, out: np.ndarray) -> None:
        cfg, torch = self.config, self.torch
        batch = [inputs[i] for i in idx]
        pairs = not isinstance(batch[0], str)
        enc = self.tokenizer([b[0] for b in batch] if pairs else batch, [b[1] for b in batch] if pairs else None,
                             padding=True, truncation=True, max_length=cfg.max_length,
                             return_tensors="pt").to(self.device)
        with torch.inference_mode():
            hidden = self.model(**enc).last_hidden_state
            if cfg.pooling == "cls":
                vec = hidden[:, 0]
            else:
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                vec = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
            if cfg.normalize:
                vec = torch.nn.functional.normalize(vec, dim=-1)
        out[idx] = vec.float().cpu().numpy()


@contextmanager
def _torch_threads(torch, n: int | None):
    """Run with ``n`` intra-op threads, then restore the process's setting."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class Encoder:
    """Encodes queries and passages; the document model is loaded only when documents are encoded.

    On CPU, queries are encoded with ``query_threads`` threads (1 by default): a few short queries give
    each thread too little work, and where other processes share the cores, waiting for a descheduled
    sibling thread made a single MiniLM query 50x slower with 2 threads (480 ms) than with 1 (8 ms).
    Passages, in full batches, use all of torch's threads.
    """

    def __init__(self, config: str | EncoderConfig = "minilm-l6-v2", device: str | None = None,
                 query_threads: int | None = 1):
        import torch
        self.config = encoder_config(config)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.query_threads = query_threads

    @cached_property
    def _query(self) -> _Model:
        return _Model(self.config.query_model, self.config, self.device)

    @cached_property
    def _doc(self) -> _Model:
        doc = self.config.doc_model
        return self._query if doc in (None, self.config.query_model) else _Model(doc, self.config, self.device)

    @property
    def dim(self) -> int:
        return self._query.model.config.hidden_size

    def encode_queries(self, queries: list[str]) -> np.ndarray:
        return self._query.embed([self.config.query_instruction + q for q in queries], threads=self.query_threads)

    def encode_passages(self, passages: list[Passage], progress: bool = False, dtype: str = "float32") -> np.ndarray:
        """Passage vectors; ``dtype`` bfloat16 embeds faster where the CPU has native bf16 matmul
        (``pra perf embed`` measures the speed and the retrieval it keeps)."""
        if self.config.doc_pair:
            inputs = [(p.title, p.text) for p in passages]
        else:
            inputs = [f"{p.title}. {p.text}" if p.title else p.text for p in passages]
        return self._doc.embed(inputs, progress=f"embedding ({self.config.name})" if progress else None, dtype=dtype)
