"""Policy backends; ``load_policy`` picks one from a model spec."""
from __future__ import annotations

from pra.backends.base import LMBackend
from pra.errors import UserError

BACKENDS = ("transformers", "llamacpp", "vllm", "openai")


def load_policy(model: str, backend: str = "transformers", **kwargs) -> LMBackend:
    """``transformers`` (default, CPU or GPU), ``llamacpp`` (GGUF in process, CPU: the fastest here for
    the Qwen models), ``vllm`` (in process, GPU; needs ``pra[gpu]``) or
    ``openai`` (any OpenAI-compatible server: pass ``base_url=``; ``model`` is the served name). The
    result serves the policy and, wrapped in a ``RewardAgent``, the reward agent alike."""
    if backend == "transformers":
        from pra.backends.transformers_backend import TransformersBackend
        return TransformersBackend(model, **kwargs)
    if backend == "llamacpp":
        from pra.backends.llamacpp_backend import LlamaCppBackend
        return LlamaCppBackend(model, **kwargs)
    if backend == "vllm":
        from pra.backends.vllm_backend import VLLMBackend
        return VLLMBackend(model, **kwargs)
    if backend == "openai":
        from pra.backends.openai_backend import OpenAIBackend
        return OpenAIBackend(model=model, **kwargs)
    raise UserError(f"unknown policy backend {backend!r}; choose one of {', '.join(BACKENDS)}")
