"""Policy backends; ``load_policy`` picks one from a model spec."""
from __future__ import annotations

from search.backends.base import PolicyBackend


def load_policy(model: str, backend: str = "transformers", **kwargs) -> PolicyBackend:
    """``transformers`` (default, CPU or GPU)."""
    if backend == "transformers":
        from search.backends.transformers_backend import TransformersBackend
        return TransformersBackend(model, **kwargs)
    raise ValueError(f"unknown policy backend {backend!r}")
