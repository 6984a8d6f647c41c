"""Policy backends; ``load_policy`` picks one from a model spec."""
from __future__ import annotations

from pra.backends.base import LMBackend


def load_policy(model: str, backend: str = "transformers", **kwargs) -> LMBackend:
    """``transformers`` (default, CPU or GPU)."""
    if backend == "transformers":
        from pra.backends.transformers_backend import TransformersBackend
        return TransformersBackend(model, **kwargs)
    raise ValueError(f"unknown policy backend {backend!r}")
