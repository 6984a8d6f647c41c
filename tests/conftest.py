import pytest


@pytest.fixture(scope="session")
def smollm2():
    """The embedded SmolLM2-135M-Instruct policy, loaded once for the whole session."""
    from pra.backends.transformers_backend import TransformersBackend
    return TransformersBackend("smollm2-135m-instruct", batch_size=16, dtype="float32")


@pytest.fixture(autouse=True)
def servers_alive(request):
    """After each test that used a real server (tests/servers.py): a dead one fails it with its log."""
    yield
    for name in ("llama_server", "vllm_server"):
        if name in request.fixturenames:
            request.getfixturevalue(name).check_alive()
