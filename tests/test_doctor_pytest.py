"""``pytest --taotoken-doctor`` as a user runs it: one item per config file plus the environment."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_taotoken.doctor.sources import ENV_VARS

FIXTURES = Path(__file__).parent / "doctor_fixtures"
KEY = "sk-test-fake-0000000000001a2b"
CLEAN_FILES = [".env", ".env.example", "auth.json", "config.json", "mcp_settings.json", "mini-swe-agent.yaml",
               "rl.toml", "settings.json"]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*ENV_VARS, "TAOTOKEN_TIMEOUT", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy",
                 "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TAOTOKEN_API_KEY", KEY)
    monkeypatch.setenv("RL_SAMPLE_MODEL", "qwen-max")


def copy_clean(pytester: pytest.Pytester) -> None:
    for name in CLEAN_FILES:
        shutil.copy(FIXTURES / "clean" / name, pytester.path / name)


def copy_mistake(pytester: pytest.Pytester, fixture: str, name: str) -> None:
    shutil.copy(FIXTURES / "mistakes" / fixture, pytester.path / name)


def test_clean_project_discovered_one_item_per_file_plus_environment(pytester: pytest.Pytester) -> None:
    copy_clean(pytester)
    pytester.makepyfile(test_unrelated="def test_fails():\n    assert False\n")
    result = pytester.runpytest("--taotoken-doctor", "-v")
    result.assert_outcomes(passed=len(CLEAN_FILES) + 1)
    result.stdout.fnmatch_lines([
        "taotoken-doctor::environment PASSED*",
        ".env::taotoken-doctor PASSED*",
        "rl.toml::taotoken-doctor PASSED*",
        "settings.json::taotoken-doctor PASSED*",
    ])
    assert "test_fails" not in result.stdout.str()  # normal tests are not collected in doctor mode
    assert result.ret == 0


def test_an_error_fails_its_item_with_location_and_fix(pytester: pytest.Pytester) -> None:
    copy_clean(pytester)
    copy_mistake(pytester, "key_placeholder.env", ".env")
    copy_mistake(pytester, "spelling_api_base_level.yaml", "mini-swe-agent.yaml")
    result = pytester.runpytest("--taotoken-doctor")
    result.assert_outcomes(passed=len(CLEAN_FILES) - 1, failed=2)
    result.stdout.fnmatch_lines([
        "*_ taotoken doctor: .env _*",
        "taotoken doctor: .env has 1 error and 0 warnings",
        ".env:2:1: error key.placeholder: OPENAI_API_KEY holds a placeholder (sk-…xxxx), not a real key*",
        "    fix: put your real key from the gateway's console into OPENAI_API_KEY*",
        "*_ taotoken doctor: mini-swe-agent.yaml _*",
        "mini-swe-agent.yaml:3:3: error spelling.api_base_level: *",
        "    fix: move it to model.model_kwargs.api_base*",
        "FAILED .env::taotoken-doctor - taotoken doctor: .env has 1 error and 0 warnings",
    ])
    assert "Traceback" not in result.stdout.str()


def test_explicit_paths_and_warnings_shown_in_the_summary(pytester: pytest.Pytester) -> None:
    copy_mistake(pytester, "rollout_identical.toml", "rl.toml")
    copy_mistake(pytester, "key_shell_placeholder.sh", "zshrc.sh")
    result = pytester.runpytest("--taotoken-doctor", "rl.toml", "zshrc.sh")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([
        "*taotoken doctor warnings*",
        "rl.toml:3:1: warning rollout.identical_samples: temperature is 0 with n_samples = 4*",
        "    fix: raise temperature*",
        "taotoken doctor: 1 warning in passing sources",
    ])
    result.stdout.fnmatch_lines(["zshrc.sh:3:8: error key.placeholder: *"])


def test_the_environment_item_fails_on_an_environment_error(pytester: pytest.Pytester,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "https://taotoken.net/api")
    result = pytester.runpytest("--taotoken-doctor")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*_ taotoken doctor: environment _*",
        "environment: error base_url.client_needs_v1: *(from environment OPENAI_BASE_URL)",
        "    fix: set OPENAI_BASE_URL to https://taotoken.net/api/v1",
    ])


def test_a_file_that_does_not_parse_fails_alone(pytester: pytest.Pytester) -> None:
    copy_clean(pytester)
    copy_mistake(pytester, "parse_toml.toml", "rl.toml")
    result = pytester.runpytest("--taotoken-doctor")
    result.assert_outcomes(passed=len(CLEAN_FILES), failed=1)
    result.stdout.fnmatch_lines(["rl.toml:2:37: error parse.toml: rl.toml is not valid TOML: *"])


def test_discovery_starts_at_rootdir_not_testpaths_and_enters_editor_folders(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ntestpaths = tests\n")
    pytester.mkdir("tests")
    pytester.mkdir(".cursor")
    copy_mistake(pytester, "spelling_cursor_baseURL.json", ".cursor/settings.json")
    result = pytester.runpytest("--taotoken-doctor", "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([".cursor/settings.json::taotoken-doctor FAILED*"])


def test_findings_travel_with_the_reports_under_xdist(pytester: pytest.Pytester) -> None:
    """The controller prints the warnings from the workers' reports (the user property), not from its own run."""
    copy_mistake(pytester, "rollout_timeout_low.json", "auth.json")
    result = pytester.runpytest("--taotoken-doctor", "-n", "1")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "*taotoken doctor warnings*",
        "auth.json:4:3: warning rollout.timeout_low: timeout is 30 s*",
    ])


def test_doctor_mode_in_a_repository_with_test_folders_and_conftests(pytester: pytest.Pytester) -> None:
    """Like this very repository: tests/ with a conftest.py, and config files at the root."""
    copy_clean(pytester)
    pytester.mkdir("tests")
    pytester.path.joinpath("tests", "conftest.py").write_text("import pytest\n")
    pytester.path.joinpath("tests", "test_x.py").write_text("def test_x():\n    assert False\n")
    result = pytester.runpytest("--taotoken-doctor")
    result.assert_outcomes(passed=len(CLEAN_FILES) + 1)
    assert result.ret == 0


def test_a_base_url_the_settings_reject_is_reported_by_the_doctor(pytester: pytest.Pytester,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --taotoken-doctor this is a UsageError at start-up; the doctor is where it gets explained."""
    monkeypatch.setenv("TAOTOKEN_BASE_URL", "ftp://taotoken.net/api")
    result = pytester.runpytest("--taotoken-doctor")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["environment: error base_url.invalid: *(from environment TAOTOKEN_BASE_URL)"])
