"""tests/conftest.py's required parts: where PRA_REQUIRE (or CI) names a part, a test that would skip
for want of it fails, naming it; elsewhere it skips."""
import pytest

from tests.conftest import CI_PARTS, require, require_module, required_parts


@pytest.fixture
def env(monkeypatch):
    monkeypatch.delenv("PRA_REQUIRE", raising=False)
    monkeypatch.delenv("CI", raising=False)
    return monkeypatch


def test_a_missing_part_skips_where_nothing_is_required(env):
    assert required_parts() == set()
    with pytest.raises(pytest.skip.Exception, match="chromium: not installed"):
        require("chromium", "not installed")


def test_a_missing_required_part_fails_naming_it(env):
    env.setenv("PRA_REQUIRE", "vllm, chromium")
    with pytest.raises(pytest.fail.Exception, match="required part 'vllm' is missing .*no module"):
        require_module("pra_no_such_module", "vllm", "no module")
    with pytest.raises(pytest.skip.Exception):          # not named: still a skip
        require("shared-data", "absent")


def test_ci_requires_what_it_installs_unless_told_otherwise(env):
    env.setenv("CI", "true")
    assert required_parts() == set(CI_PARTS.split(","))
    env.setenv("PRA_REQUIRE", "chromium")
    assert required_parts() == {"chromium"}
    env.setenv("PRA_REQUIRE", "")                        # set but empty: nothing required, even in CI
    assert required_parts() == set()


def test_an_unknown_part_is_a_usage_error_and_a_present_module_is_returned(env):
    env.setenv("PRA_REQUIRE", "vllm,chromeium")
    with pytest.raises(pytest.UsageError, match="chromeium"):
        required_parts()
    env.setenv("PRA_REQUIRE", "vllm")
    assert require_module("json", "vllm", "stdlib").dumps([]) == "[]"
