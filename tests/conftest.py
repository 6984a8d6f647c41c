"""Shared fixtures, and the parts a test may need that a machine may lack.

``PRA_REQUIRE`` (a comma list of ``REQUIRABLE``) names the parts that must be there: a test that would
skip because one of them is missing fails instead, naming it. CI sets it (``.ci/run``); where it is
unset and ``CI`` is true, the parts CI installs (``CI_PARTS``: all but ``cuda``, a CUDA device, which CI
lacks) are required. Elsewhere a missing part skips the test, and ``-rs`` (pyproject's addopts) lists
each skip with its reason in the summary.
Tests ask for a part through ``require`` / ``require_module`` (in a test or fixture, or at module
level) or mark themselves ``@pytest.mark.requires(part, available, reason)``."""
from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

import pytest

REQUIRABLE = ("vllm", "llamacpp", "chromium", "shared-data", "qwen", "cuda")
# "cuda" (tests/test_gpu.py) is required only where a run names it: PRA_REQUIRE=cuda on a GPU machine.
CI_PARTS = "vllm,llamacpp,chromium,shared-data,qwen"
# The shared raw data (benchmark originals, corpora sources): $PRA_DATA, else shared/data beside the checkout.
SHARED_DATA = Path(os.environ.get("PRA_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")


def required_parts() -> set[str]:
    """The parts ``PRA_REQUIRE`` names (``CI_PARTS`` where it is unset and ``CI`` is true)."""
    value = os.environ.get("PRA_REQUIRE")
    if value is None and os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        value = CI_PARTS
    parts = {p.strip() for p in (value or "").split(",") if p.strip()}
    unknown = sorted(parts - set(REQUIRABLE))
    if unknown:
        raise pytest.UsageError(f"PRA_REQUIRE names unknown part(s) {', '.join(unknown)}; "
                                f"known: {', '.join(REQUIRABLE)}")
    return parts


def require(part: str, reason: str) -> None:
    """``part`` is missing (``reason`` says why): fail where it is required, else skip. Never returns."""
    if part not in REQUIRABLE:
        raise ValueError(f"unknown part {part!r}; known: {', '.join(REQUIRABLE)}")
    if part in required_parts():
        pytest.fail(f"required part {part!r} is missing (PRA_REQUIRE): {reason}", pytrace=False)
    pytest.skip(f"{part}: {reason}", allow_module_level=True)


def require_module(name: str, part: str, reason: str) -> ModuleType:
    """``import name``, or ``require(part, ...)`` when it cannot be imported (not installed, or a broken
    install: the import's own error is kept in the message)."""
    try:
        return importlib.import_module(name)
    except Exception as err:      # noqa: BLE001 -- a broken install raises more than ImportError
        require(part, f"{reason} ({type(err).__name__}: {err})")


def pytest_configure(config):
    config.addinivalue_line("markers", "requires(part, available, reason): the test needs a part "
                            "(tests/conftest.py REQUIRABLE); when not available it skips, or fails where PRA_REQUIRE names it")
    required_parts()            # an unknown name is a usage error before any test runs


def pytest_runtest_setup(item):
    for mark in item.iter_markers("requires"):
        part, available, reason = mark.args
        if not available:
            require(part, reason)


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
