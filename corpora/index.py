"""Dense FAISS indexes over a built corpus, stored as float16 embeddings plus a manifest.

An index folder holds ``index.json`` (the manifest), ``embeddings.npy`` (float16, one row per passage
in corpus order) except for ivfpq, whose point is to hold compressed codes only, and, for kinds that
need training, ``index.faiss``. A flat index is rebuilt from the embeddings on load (a second for 10k
passages), so it ships at half the size of a FAISS file. A build
writes into a temporary folder and renames it into place: a build that dies leaves nothing that looks
finished, and the next build removes the temporary folders of builds that are no longer running. The
embeddings are computed in shards of ``EMBED_SHARD`` passages, each saved as it finishes into
``<index>.partial/`` (keyed by corpus, encoder and dtype), so a build killed midway resumes from the last
whole shard; the folder goes once the index is in place.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from corpora.builders import Corpus, load_corpus
from corpora.encoders import DTYPES, Encoder, EncoderConfig, encoder_config
from pra.errors import MissingFile, UserError

KINDS = ("flat", "ivf", "hnsw", "ivfpq")   # also the order in which a kind is picked when none is asked for
COMPRESSED = ("ivfpq",)                    # kinds whose folder keeps no float16 embeddings


class IndexMismatch(UserError):
    """The index on disk was built over other passages or with another encoder."""


@dataclass(frozen=True)
class IndexManifest:
    encoder: str
    encoder_config: dict
    dim: int
    corpus: str
    corpus_sha256: str
    count: int
    normalize: bool
    kind: str
    metric: str = "inner_product"
    dtype: str = "float16"          # how the embeddings are stored: float16, or pq codes only
    passage_dtype: str = "float32"  # what the passage encoder's matmuls ran in (corpora.encoders.DTYPES)


def _vector_key(config: dict) -> dict:
    """What decides the vectors: everything but the batch size."""
    return {k: v for k, v in config.items() if k != "batch_size"}


def index_dir(corpus: Corpus, encoder: EncoderConfig, kind: str) -> Path:
    return corpus.path / "index" / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', encoder.name)}-{kind}"


def _factory(kind: str, n: int, dim: int):
    import faiss

    nlist = max(1, min(int(4 * math.sqrt(n)), n // 39))  # faiss wants ~39 training points per list
    if kind == "ivfpq" and dim % 4:
        raise UserError(f"ivfpq needs a dimension divisible by 4 (got {dim})")
    # PQ codes of one byte per 4 dimensions: over medcorp (nprobe 64) the top 5 shares 0.86 with the
    # exact search's, against 0.74 with a byte per 8 dimensions, at 104 rather than 56 bytes a passage
    spec = {"flat": "Flat", "ivf": f"IVF{nlist},Flat", "hnsw": "HNSW32", "ivfpq": f"IVF{nlist},PQ{dim // 4}"}
    return faiss.index_factory(dim, spec[kind], faiss.METRIC_INNER_PRODUCT)


def _reusable_embeddings(corpus: Corpus, config: EncoderConfig, dtype: str) -> np.ndarray | None:
    """Embeddings that another kind of index already holds for this corpus, encoder and dtype."""
    for manifest_path in sorted((corpus.path / "index").glob("*/index.json")):
        m = IndexManifest(**json.loads(manifest_path.read_text()))
        if (m.corpus_sha256 == corpus.manifest.sha256 and m.passage_dtype == dtype
                and _vector_key(m.encoder_config) == _vector_key(config.to_dict())
                and (manifest_path.parent / "embeddings.npy").exists()):
            return np.load(manifest_path.parent / "embeddings.npy")
    return None


EMBED_SHARD = 2048          # passages per saved shard of embeddings (what a killed build loses at most)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale(out: Path) -> None:
    """The ``.tmp-PID`` and ``.old-PID`` folders that builds of ``out`` killed midway left behind."""
    if not out.parent.is_dir():
        return
    for path in out.parent.glob(f"{out.name}.*-*"):
        kind, _, pid = path.name[len(out.name) + 1:].partition("-")
        if kind in ("tmp", "old") and pid.isdigit() and int(pid) != os.getpid() and not _running(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _embed_resumably(corpus: Corpus, config: EncoderConfig, device: str | None, dtype: str, work: Path) -> np.ndarray:
    """Every passage's float16 embedding, shard by shard, each shard saved in ``work`` as it finishes and
    read back from there by a later build of the same corpus, encoder and dtype."""
    key = {"corpus": corpus.manifest.sha256, "encoder": _vector_key(config.to_dict()), "dtype": dtype,
           "shard": EMBED_SHARD, "passages": len(corpus.passages)}
    stamp = work / "key.json"
    try:
        same = json.loads(stamp.read_text()) == key
    except (OSError, ValueError):
        same = False
    if not same:
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps(key))
    encoder, parts = None, []
    for start in range(0, len(corpus.passages), EMBED_SHARD):
        path = work / f"shard-{start:09d}.npy"
        if path.exists():
            try:
                parts.append(np.load(path))
                continue
            except (OSError, ValueError):
                path.unlink(missing_ok=True)
        encoder = encoder or Encoder(config, device)
        emb = encoder.encode_passages(corpus.passages[start:start + EMBED_SHARD], progress=True, dtype=dtype)
        emb = np.asarray(emb).astype(np.float16)
        tmp = work / f"shard-{start:09d}.tmp-{os.getpid()}.npy"
        np.save(tmp, emb)
        os.replace(tmp, path)
        parts.append(emb)
    return np.concatenate(parts) if parts else np.zeros((0, 0), np.float16)


def build_index(corpus: str | Path | Corpus = "medcorp-mini", encoder: str | EncoderConfig = "minilm-l6-v2",
                kind: str = "flat", out_dir: str | Path | None = None, device: str | None = None,
                dtype: str = "float32") -> Path:
    """Embed every passage (or reuse embeddings another index kind made) and write the index folder.

    ``dtype`` bfloat16 embeds under bfloat16 autocast (3x faster on this CPU, same top 10: see
    ``eval.perf.embed``). Returns the folder: ``out_dir``, by default ``<corpus>/index/<encoder>-<kind>``.
    """
    import faiss

    corpus = corpus if isinstance(corpus, Corpus) else load_corpus(corpus)
    config = encoder_config(encoder)
    if kind not in KINDS:  # fail before the long embedding run
        raise UserError(f"unknown index kind {kind!r}; one of {KINDS}")
    if dtype not in DTYPES:
        raise UserError(f"unknown embedding dtype {dtype!r}; one of {DTYPES}")
    out = Path(out_dir) if out_dir else index_dir(corpus, config, kind)
    _remove_stale(out)
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    work = out.with_name(f"{out.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        emb = _reusable_embeddings(corpus, config, dtype)
        if emb is None:
            emb = _embed_resumably(corpus, config, device, dtype, work)
        if kind not in COMPRESSED:
            np.save(tmp / "embeddings.npy", emb)
        if kind != "flat":
            faiss.write_index(_trained(kind, emb), str(tmp / "index.faiss"))
        manifest = IndexManifest(config.name, config.to_dict(), int(emb.shape[1]), corpus.manifest.name,
                                 corpus.manifest.sha256, len(corpus.passages), config.normalize, kind,
                                 dtype="pq" if kind in COMPRESSED else "float16", passage_dtype=dtype)
        (tmp / "index.json").write_text(json.dumps(asdict(manifest), indent=2) + "\n")
        old = out.with_name(f"{out.name}.old-{os.getpid()}")
        if out.exists():
            out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if work.is_dir() and not any(work.glob("shard-*[0-9].npy")):
            shutil.rmtree(work, ignore_errors=True)        # nothing worth resuming from
    return out


def _trained(kind: str, emb: np.ndarray):
    vectors = np.ascontiguousarray(emb, dtype=np.float32)
    index = _factory(kind, len(vectors), vectors.shape[1])
    index.train(vectors)
    index.add(vectors)
    return index


@dataclass
class DenseIndex:
    path: Path
    manifest: IndexManifest
    index: object               # a faiss.Index
    threads: int | None = None  # OpenMP threads for a search; None: faiss's default

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, row numbers), each shaped (queries, k); a missing hit has row -1."""
        import faiss

        before = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(self.threads or before)
        try:
            return self.index.search(np.ascontiguousarray(queries, dtype=np.float32), k)
        finally:
            faiss.omp_set_num_threads(before)


def built_kind(corpus: Corpus, config: EncoderConfig) -> str:
    """The first of ``KINDS`` built for this corpus and encoder (the exact flat index where there is
    one; medcorp ships only its ivfpq), else flat, whose absence ``load_index`` explains."""
    return next((k for k in KINDS if (index_dir(corpus, config, k) / "index.json").exists()), "flat")


def load_index(corpus: Corpus, encoder: str | EncoderConfig = "minilm-l6-v2", kind: str | None = None,
               path: str | Path | None = None) -> DenseIndex:
    """Load an index (of ``kind``, by default ``built_kind``) and check that it was built over these
    passages with this encoder.

    Up to 200k passages a search runs on one thread: it takes well under a millisecond per query,
    and on shared cores a second OpenMP thread made one query of medcorp-mini 50x slower (16 ms).
    """
    import faiss

    config = encoder_config(encoder)
    kind = kind or built_kind(corpus, config)
    path = Path(path) if path else index_dir(corpus, config, kind)
    if not (path / "index.json").exists():
        raise MissingFile(
            f"no {kind} index for encoder {config.name!r} over corpus {corpus.manifest.name!r} at {path}; "
            f"build it with build_index({corpus.manifest.name!r}, {config.name!r}, {kind!r})")
    m = IndexManifest(**json.loads((path / "index.json").read_text()))
    if m.corpus_sha256 != corpus.manifest.sha256 or _vector_key(m.encoder_config) != _vector_key(config.to_dict()):
        raise IndexMismatch(
            f"index at {path} was built over corpus {m.corpus!r} (sha256 {m.corpus_sha256[:12]}) with encoder "
            f"{m.encoder!r}, but corpus {corpus.manifest.name!r} has sha256 {corpus.manifest.sha256[:12]} and "
            f"encoder {config.name!r} was asked for; rebuild it with build_index("
            f"{corpus.manifest.name!r}, {config.name!r}, {m.kind!r})")
    if m.kind == "flat":
        index = _trained("flat", np.load(path / "embeddings.npy"))
    else:
        index = faiss.read_index(str(path / "index.faiss"))
        if m.kind == "hnsw":
            index.hnsw.efSearch = 128
        else:
            faiss.extract_index_ivf(index).nprobe = 64  # of ~4 sqrt(n) lists; 16 lost 0.04-0.07 of the top 5 over medcorp
    if faiss.get_num_gpus() > 0 and hasattr(faiss, "index_cpu_to_all_gpus") and m.kind != "hnsw":
        index = faiss.index_cpu_to_all_gpus(index)
    return DenseIndex(path, m, index, threads=1 if m.count <= 200_000 else None)
