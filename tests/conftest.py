import pytest


@pytest.fixture(scope="session")
def smollm2():
    """The embedded SmolLM2-135M-Instruct policy, loaded once for the whole session."""
    from pra.backends.transformers_backend import TransformersBackend
    return TransformersBackend("smollm2-135m-instruct", batch_size=16, dtype="float32")
