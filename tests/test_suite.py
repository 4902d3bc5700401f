"""The bundled suite run as a user runs it (pytester), against the fault gateway on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pytest_taotoken.testing import FakeGateway, Scenario

KEY = "sk-test-fake-0000000000001a2b"
MODEL = "fake-model"
SCHEMA = json.loads((Path(__file__).parent.parent / "contracts" / "report.schema.json").read_text())


@pytest.fixture(autouse=True)
def key_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("TAOTOKEN_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_BASE", "RL_SAMPLE_MODEL", "RL_EVAL_MODEL",
                 "OPENAI_MODEL", "OPENAI_API_KEY", "GITHUB_STEP_SUMMARY", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                 "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TAOTOKEN_API_KEY", KEY)
    yield


def run_suite(pytester: pytest.Pytester, gw: FakeGateway, *args: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    report = pytester.path / "report.json"
    result = pytester.runpytest("--taotoken-suite", "--taotoken-live", f"--taotoken-base-url={gw.base_url}",
                                f"--taotoken-models={MODEL}", f"--taotoken-report={report}", "--taotoken-timeout=5",
                                "-p", "no:cacheprovider", *args)
    data = json.loads(report.read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    assert KEY not in report.read_text() and KEY not in result.stdout.str()
    return result, data


def by_check(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["check"]: c for c in data["checks"]}


ALL = {"models.list", "chat.basic", "url.layout", "auth.rejected", "model.unknown", "chat.concurrency", "chat.diversity",
       "chat.determinism", "headers.passthrough", "chat.stream", "chat.tools", "chat.multiturn"}


@pytest.mark.parametrize("scenario", ["ok", "stream_quirky", "gzip"])
def test_valid_gateways_pass_every_check(pytester: pytest.Pytester, scenario: str) -> None:
    with FakeGateway(scenario, api_key=KEY, latency=0.1) as gw:
        result, data = run_suite(pytester, gw)
        base = gw.base_url
    checks = by_check(data)
    assert set(checks) == ALL
    assert {c["outcome"] for c in checks.values()} == {"passed"}, {k: c["summary"] for k, c in checks.items()}
    assert data["summary"]["passed"] == len(ALL) and data["summary"]["failed"] == 0
    assert data["layouts"]["v1"] is True and data["layouts"]["client_base_urls"]["openai-sdk"] == base + "/v1"
    assert checks["chat.diversity"]["details"]["distinct"] >= 2
    assert isinstance(checks["chat.concurrency"]["details"]["ratio"], float)
    assert checks["chat.stream"]["details"]["done"] is True
    assert all(c["tokens"]["prompt"] + c["tokens"]["completion"] <= 1500 for c in checks.values())
    assert data["summary"]["tokens"] <= 1500
    result.stdout.fnmatch_lines(["*= taotoken =*", "check * model * outcome * latency * tokens * category",
                                 "chat.basic * fake-model * passed*", "base URL per client family:",
                                 f"  openai-sdk * {base}/v1"])
    assert checks["chat.basic"]["nodeid"] == f"suite/chat.basic[{MODEL}]"


@pytest.mark.parametrize(
    ("scenario", "check", "outcome", "category"),
    [
        ("serial", "chat.concurrency", "failed", "concurrency"),
        ("deterministic", "chat.diversity", "failed", "diversity"),
        ("drop_headers", "headers.passthrough", "skipped", None),
        ("unauthorized", "chat.basic", "failed", "auth"),
        ("html_200", "chat.basic", "failed", "bad_response"),
        ("stream_truncated", "chat.stream", "failed", "stream"),
        ("model_not_found", "chat.basic", "failed", "model_not_found"),
        ("fastapi_404", "chat.basic", "failed", "base_url"),
        ("unauthorized", "url.layout", "failed", "auth"),  # not blamed on the base URL
        ("html_200", "models.list", "failed", "bad_response"),
        ("html_200", "chat.tools", "failed", "bad_response"),
    ],
)
def test_faulty_gateways_fail_the_right_check(pytester: pytest.Pytester, scenario: str, check: str, outcome: str,
                                              category: str | None) -> None:
    latency = {"serial": 0.1, "ok": 0.1}.get(scenario, 0.0)
    with FakeGateway(scenario, api_key=KEY, latency=latency) as gw:
        _, data = run_suite(pytester, gw)
    entry = by_check(data)[check]
    assert (entry["outcome"], entry["category"]) == (outcome, category), entry
    assert entry["summary"]
    if outcome == "failed":
        assert entry["fix"]


def test_drop_headers_skip_says_what_to_do(pytester: pytest.Pytester) -> None:
    with FakeGateway("drop_headers", api_key=KEY) as gw:
        result, data = run_suite(pytester, gw, "-rs", "-k", "headers")
    assert "record the version in your application" in by_check(data)["headers.passthrough"]["summary"]
    result.stdout.fnmatch_lines(["SKIPPED*no way to see whether X-RL-Version reached the model*"])


def test_rate_limited_gateway_passes_the_burst_check(pytester: pytest.Pytester) -> None:
    scenario = Scenario.of("rate_limited", retry_after=0.05, recover_after=3)
    with FakeGateway(scenario, api_key=KEY) as gw:
        _, data = run_suite(pytester, gw, "--taotoken-burst=6", "-k", "rate_limit")
    entry = by_check(data)["rate_limit.retry_after"]
    assert entry["outcome"] == "passed", entry
    assert entry["details"]["rate_limited"] >= 1 and entry["details"]["recovered"] is True


def test_burst_check_is_opt_in_and_skips_without_429(pytester: pytest.Pytester) -> None:
    with FakeGateway("ok", api_key=KEY) as gw:
        _, data = run_suite(pytester, gw, "-k", "rate_limit")
        assert data["checks"] == []
        _, data = run_suite(pytester, gw, "--taotoken-burst=3", "-k", "rate_limit")
    entry = by_check(data)["rate_limit.retry_after"]
    assert entry["outcome"] == "skipped" and "no 429 in a burst of 3" in entry["summary"]


def test_no_model_configured_skips_with_the_requirement(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--taotoken-suite", "-rs", "-k", "chat.basic")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["suite/chat.basic[[]no-model[]] s*",
                                 "SKIPPED*needs a model: set RL_SAMPLE_MODEL / RL_EVAL_MODEL or pass --taotoken-models*"])


def test_ids_per_model_and_pyargs(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--taotoken-suite", "--collect-only", "-q", "--taotoken-models=a,b")
    result.stdout.fnmatch_lines(["suite/models.list[[]a[]]", "suite/models.list[[]b[]]", "suite/chat.basic[[]a[]]"])
    assert "rate_limit.retry_after" not in result.stdout.str()
    result = pytester.runpytest("--pyargs", "pytest_taotoken.suite", "--collect-only", "-q", "--taotoken-models=a")
    result.stdout.fnmatch_lines(["suite/chat.multiturn[[]a[]]", "12 tests collected*"])


def test_user_tests_run_beside_the_suite_when_paths_are_given(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mine="def test_mine(): pass")
    result = pytester.runpytest("--taotoken-suite", "test_mine.py", "--collect-only", "-q", "--taotoken-models=a")
    result.stdout.fnmatch_lines(["test_mine.py::test_mine", "suite/models.list[[]a[]]"])
    result = pytester.runpytest("--taotoken-suite", "--collect-only", "-q", "--taotoken-models=a")
    assert "test_mine" not in result.stdout.str()


def test_github_step_summary_and_xdist(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    with FakeGateway("ok", api_key=KEY) as gw:
        _, serial = run_suite(pytester, gw, "-k", "chat.basic or models.list or auth")
        _, parallel = run_suite(pytester, gw, "-n", "2", "-k", "chat.basic or models.list or auth")
    assert [(c["check"], c["outcome"]) for c in serial["checks"]] == [(c["check"], c["outcome"]) for c in parallel["checks"]]
    text = summary.read_text()
    assert "| check | model | outcome | latency | tokens | category |" in text
    assert "| chat.basic | fake-model | passed |" in text and KEY not in text


def test_report_is_written_even_when_checks_fail(pytester: pytest.Pytester) -> None:
    with FakeGateway("unauthorized", api_key=KEY) as gw:
        result, data = run_suite(pytester, gw, "-k", "chat.basic")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert data["summary"]["failed"] == 1 and data["endpoint"]["key"] == "sk-…1a2b"


def test_doctor_findings_go_into_the_json_report(pytester: pytest.Pytester) -> None:
    pytester.path.joinpath(".env").write_text("OPENAI_BASE_URL=https://taotoken.net/api/v1/chat/completions?utm_source=x\n")
    report = pytester.path / "report.json"
    pytester.runpytest("--taotoken-doctor", ".env", f"--taotoken-report={report}", "-p", "no:cacheprovider")
    data = json.loads(report.read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    codes = {f["code"] for f in data["doctor"]}
    assert "base_url.query" in codes or "base_url.v1_suffix" in codes, codes


def test_an_unwritable_report_is_one_line_and_a_failed_run(pytester: pytest.Pytester) -> None:
    with FakeGateway("ok", api_key=KEY) as gw:
        result = pytester.runpytest("--taotoken-suite", "--taotoken-live", f"--taotoken-base-url={gw.base_url}",
                                    f"--taotoken-models={MODEL}", "--taotoken-report=/proc/report.json",
                                    "-k", "models.list", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["taotoken: cannot write the report /proc/report.json: *. Fix: give --taotoken-report*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_body_excerpts_mask_the_key_before_cutting() -> None:
    """A key that straddles the excerpt's end must not leave its first characters behind."""
    import httpx

    from pytest_taotoken.keys import register_secret
    from pytest_taotoken.suite.context import body_excerpt

    key = "sk-canary-" + "q7Wz3LmP9x" * 4
    register_secret(key)
    for pad in range(150, 200):
        excerpt = body_excerpt(httpx.Response(401, json={"error": {"message": "x" * pad + key}}))
        assert not any(key[i:i + 8] in excerpt for i in range(len(key) - 7)), pad
