"""Hardening: no key leaks, proven with a canary.

The plugin runs as a user runs it (pytester), with ``TAOTOKEN_API_KEY`` set to a random 40-character
canary (not key-shaped, so nothing masks it by its look), against every fault-gateway scenario:

- live, record and then replay mode, failing tests with ``-vv --tb=long -l -rA``, the captured output
  and logs at DEBUG, JUnit XML with everything in it, and careless user code that prints the request
  headers and asserts on a body that echoes the key;
- the bundled suite with ``--taotoken-report``, ``--junitxml`` and ``GITHUB_STEP_SUMMARY``;
- the doctor (pytest items and the ``taotoken doctor`` command) over files that hold the canary.

Then everything written is searched (every file under the run's folder: cassettes, report, JUnit XML,
step summary; the terminal output; the log records): the canary may appear nowhere, not even a piece of
8 characters of it in any case. ``TAOTOKEN_HARDENING_FULL=1`` also runs the suite against every scenario.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import string
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml  # noqa: F401 - see below

from pytest_taotoken.testing import SCENARIOS, FakeGateway, Scenario

# pytester restores sys.modules after each in-process run. PyYAML's C extension cannot be re-imported: a yaml
# first imported inside one run would come back half new, half old in the next, and every cassette would
# read as "not valid YAML". Importing it here keeps it out of the snapshot.

FRAGMENT = 8
VALID = ("ok", "stream_quirky", "gzip", "deterministic", "drop_headers", "serial", "models_unlisted")
FAULTS = tuple(sorted(set(SCENARIOS) - set(VALID)))
STREAMS = ("stream_truncated", "stream_bad_json", "stream_error_event", "stream_quirky", "stream_stall", "stream_reset")
FULL = os.environ.get("TAOTOKEN_HARDENING_FULL") == "1"
ENV_VARS = ("TAOTOKEN_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_BASE", "RL_SAMPLE_MODEL", "RL_EVAL_MODEL",
            "OPENAI_MODEL", "OPENAI_API_KEY", "TAOTOKEN_TIMEOUT", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
            "http_proxy", "https_proxy", "all_proxy")

def new_canary() -> str:
    """40 random letters and digits: no prefix, nothing key-shaped, so only real redaction can hide it."""
    return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(40))


def leaks(canary: str, text: str) -> list[str]:
    """Every piece of ``canary`` of 8 characters (any case) that ``text`` holds: longer pieces hold one too."""
    low, secret = text.lower(), canary.lower()
    return sorted({secret[i:i + FRAGMENT] for i in range(len(secret) - FRAGMENT + 1) if secret[i:i + FRAGMENT] in low})


def search_everything(canary: str, folder: Path, *texts: str) -> dict[str, list[str]]:
    """Hits per place: every file under ``folder`` (binary files read as latin-1 too) and the given texts."""
    hits: dict[str, list[str]] = {}
    searched = 0
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        data = path.read_bytes()
        searched += 1
        found = leaks(canary, data.decode("utf-8", "replace")) or leaks(canary, data.decode("latin-1"))
        if found:
            hits[str(path.relative_to(folder))] = found
    for n, text in enumerate(texts):
        found = leaks(canary, text)
        if found:
            hits[f"text #{n}"] = found
    assert searched, "nothing was written: the search would prove nothing"
    return hits


def test_the_search_finds_a_piece_of_the_canary_in_any_case(tmp_path: Path) -> None:
    canary = new_canary()
    (tmp_path / "a.txt").write_text(f"xx{canary[5:14].upper()}yy")
    (tmp_path / "b.bin").write_bytes(b"\xff" + canary[20:28].encode())
    assert set(search_everything(canary, tmp_path, "clean", canary[-9:])) == {"a.txt", "b.bin", "text #1"}


class GatewayPlugin:
    """Hands the outer test's gateway to the inner tests (pytester runs them in this process)."""

    def __init__(self, gateway: FakeGateway) -> None:
        self.gw = gateway

    @pytest.fixture
    def gateway(self) -> FakeGateway:
        return self.gw


INNER_TESTS = '''
import logging
import sys

import pytest

from pytest_taotoken.sse import assemble
from pytest_taotoken.testing import Scenario

SCENARIOS = {scenarios!r}
VALID = {valid!r}
STREAMS = {streams!r}
PARAMS = {{"rate_limited": {{"retry_after": 0.05}}, "slow": {{"slow_s": 2}}, "hang": {{"stall_s": 2}},
          "stall_body": {{"stall_s": 2}}, "stream_stall": {{"stall_s": 2}}}}
log = logging.getLogger("inner")


def exchange(client, gateway, name):
    gateway.scenario = Scenario.of(name, **PARAMS.get(name, {{}}))
    body = {{"model": "fake-model", "messages": [{{"role": "user", "content": "hi"}}], "max_tokens": 8}}
    log.debug("client=%r settings=%r headers=%r", client, client.settings, client.headers)
    if name in STREAMS:
        body.update(stream=True, stream_options={{"include_usage": True}})
        with client.stream("POST", "v1/chat/completions", json=body) as response:
            log.info("streaming %r %r", response, response.headers)
            return assemble(response.iter_bytes()).message()["content"]
    response = client.post("v1/chat/completions", json=body)
    log.info("reply %s %s %r", response.status_code, response.text, response.request.headers)
    print(response.headers, response.request.headers)
    return response.json()["choices"][0]["message"]["content"]


@pytest.mark.taotoken_live
@pytest.mark.parametrize("name", SCENARIOS)
def test_strict(name, client, gateway, caplog):
    caplog.set_level(logging.DEBUG)
    assert exchange(client, gateway, name)


@pytest.mark.taotoken_live
@pytest.mark.parametrize("name", SCENARIOS)
def test_caught(name, client, gateway, caplog):
    caplog.set_level(logging.DEBUG)
    try:
        content = exchange(client, gateway, name)
    except AssertionError as exc:
        print(repr(exc), repr(exc.__cause__), repr(getattr(exc, "diagnosis", None)))
        print(str(exc), file=sys.stderr)
        log.exception("caught %r", exc)
        assert name not in VALID, str(exc)
    else:
        assert name in VALID and content


@pytest.mark.taotoken_live
def test_careless_user_code(client, gateway):
    """Prints the raw request headers and asserts on a body that echoes the key: the report masks both."""
    gateway.scenario = "unauthorized_echo"
    response = client.post("v1/chat/completions", json={{"model": "fake-model", "messages": []}},
                           extensions={{"taotoken.expect_error": True}})
    print(dict(response.request.headers), response.text)
    sys.stderr.write(response.text)
    logging.getLogger("careless").warning("body %s", response.text)
    assert response.json() == {{}}
'''


@pytest.fixture
def canary(monkeypatch: pytest.MonkeyPatch, pytester: pytest.Pytester) -> Iterator[str]:
    value = new_canary()
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TAOTOKEN_API_KEY", value)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "step-summary.md"))
    yield value


def _run(pytester: pytest.Pytester, gw: FakeGateway, mode: str, *args: str) -> pytest.RunResult:
    tag = f"{mode}-{len(list(pytester.path.glob('junit-*.xml')))}"
    flags = () if mode == "replay" else (f"--taotoken-{mode}",)
    return pytester.runpytest(
        *flags, "-p", "no:cacheprovider",
        f"--taotoken-base-url={gw.base_url}", "--taotoken-timeout=0.3", "--taotoken-max-retries=1",
        "--taotoken-models=fake-model", "-vv", "--tb=long", "-l", "-rA", "--log-level=DEBUG",
        f"--junitxml=junit-{tag}.xml", "-o", "junit_logging=all", f"--taotoken-report=report-{tag}.json",
        *args, plugins=[GatewayPlugin(gw)])


def _everything(result: pytest.RunResult, caplog: pytest.LogCaptureFixture) -> list[str]:
    """The run's output and the log records, formatted as pytest shows them (exceptions included).

    In-memory records of the ``careless`` logger are left out: user code that logs a raw body holding the
    key gets its own record back, and only what is written out (the captured-log sections) is masked.
    """
    records = [r for r in caplog.records if not r.name.startswith("careless")]
    return [result.stdout.str(), result.stderr.str(), *(caplog.handler.format(r) for r in records)]


@pytest.mark.parametrize("modes", [("live",), ("record", "replay")], ids=["live", "record-then-replay"])
def test_every_scenario_in_live_record_and_replay_leaks_nothing(pytester: pytest.Pytester, canary: str,
                                                                caplog: pytest.LogCaptureFixture,
                                                                modes: tuple[str, ...]) -> None:
    caplog.set_level(logging.DEBUG)
    pytester.makepyfile(test_inner=INNER_TESTS.format(scenarios=sorted(SCENARIOS), valid=VALID, streams=STREAMS))
    texts: list[str] = []
    with FakeGateway(api_key=canary) as gw:
        for mode in modes:
            result = _run(pytester, gw, mode)
            assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
            outcomes = result.parseoutcomes()
            texts += _everything(result, caplog)
            if mode == "replay":  # the recorded faults replay: a hang's timeout included, offline and at once
                result.stdout.fnmatch_lines(["*PASSED*test_caught*hang*", "*FAILED*test_strict*hang*"])
                assert outcomes.get("passed") == len(SCENARIOS) + len(VALID), outcomes
                continue
            # Every fault fails with its diagnosis; every scenario passes where the test expects the failure.
            failed = sorted(line.split(" ")[1] for line in result.outlines if line.startswith("FAILED "))
            assert outcomes.get("passed") == len(SCENARIOS) + len(VALID), failed
            assert outcomes.get("failed") == len(FAULTS) + 1, failed
            result.stdout.fnmatch_lines(["*[[]auth[]]*", "*[[]timeout[]]*", "*[[]rate_limit[]]*", "*[[]stream[]]*"])
    if "record" in modes:
        cassettes = list((pytester.path / "cassettes").rglob("*.yaml"))
        assert len(cassettes) == len(SCENARIOS) + len(VALID)
        assert any("<TAOTOKEN_API_KEY>" in p.read_text() for p in cassettes)  # the echoed key, scrubbed
    assert search_everything(canary, pytester.path, *texts) == {}


def _suite(pytester: pytest.Pytester, gw: FakeGateway, mode: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    report = pytester.path / f"suite-{mode}-{gw.scenario.name}.json"
    flags = () if mode == "replay" else (f"--taotoken-{mode}",)
    result = pytester.runpytest("--taotoken-suite", *flags, f"--taotoken-base-url={gw.base_url}",
                                "--taotoken-models=fake-model", "--taotoken-timeout=0.5", "--taotoken-max-retries=1",
                                f"--taotoken-report={report}", f"--junitxml={report.with_suffix('.xml')}",
                                "-o", "junit_logging=all", "-vv", "--tb=long", "-l", "-rA", "-p", "no:cacheprovider",
                                plugins=[GatewayPlugin(gw)])
    assert "INTERNALERROR" not in result.stdout.str()
    return result, json.loads(report.read_text())


SUITE_SCENARIOS = sorted(SCENARIOS) if FULL else ["ok", "unauthorized_echo", "stream_truncated", "rate_limited"]


def test_the_suite_report_junit_and_step_summary_leak_nothing(pytester: pytest.Pytester, canary: str,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    texts: list[str] = []
    with FakeGateway(api_key=canary, latency=0.02) as gw:
        for name in SUITE_SCENARIOS:
            gw.scenario = Scenario.of(name, **({"retry_after": 0.05, "recover_after": 2} if name == "rate_limited" else {}))
            result, data = _suite(pytester, gw, "record" if name == "ok" else "live")
            texts += _everything(result, caplog)
            checks = {c["check"]: c for c in data["checks"]}
            assert len(checks) == 12, checks
            if name == "unauthorized_echo":
                assert checks["chat.basic"]["category"] == "auth"
                assert checks["auth.rejected"]["outcome"] == "passed"
        gw.scenario = "ok"
        replayed, data = _suite(pytester, gw, "replay")
        texts += _everything(replayed, caplog)
        assert data["mode"] == "replay" and data["summary"]["failed"] == 0, data["checks"]
    summary = (pytester.path / "step-summary.md").read_text()
    assert summary.count("### taotoken") == len(SUITE_SCENARIOS) + 1
    assert list((pytester.path / "cassettes" / "suite").rglob("*.yaml"))
    assert search_everything(canary, pytester.path, *texts) == {}


DOCTOR_FILES = {
    ".env": "TAOTOKEN_API_KEY={k}\nOPENAI_API_KEY=\" {k} \"\nOPENAI_BASE_URL=https://user:{k}@taotoken.net/api/v1?key={k}\n"
            "RL_SAMPLE_MODEL={k}\n",
    "auth.json": '{{"base_url": "https://taotoken.net/api/v1", "api_key": "Bearer {k}", "model": "qwen-max"}}',
    "settings.json": '{{"openai.baseUrl": "https://{k}.example/v1", "openai.apiKey": "\'{k}\'", "openai.baseURL": "{k}"}}',
    "mini-swe-agent.yaml": "model:\n  model_name: openai/{k}\n  model_kwargs:\n    api_base: {k}\n    api_key: {k}\\n\n",
    "rl.toml": '[model]\nbase_url = "https://taotoken.net/api"\napi_key_env = "{k}"\napi_key = "{k}"\nsample_model = "q"\n',
    "profile.sh": "export TAOTOKEN_API_KEY='{k}'\nexport TAOTOKEN_BASE_URL={k}\n",
    "config.json": '{{"current": "{k}", "profiles": [{{"name": "{k}", "base_url": "https://x.example/api", "api_key": "{k}"}}]}}',
    "mcp_settings.json": '{{"mcpServers": {{"s": {{"env": {{"OPENAI_API_KEY": "{k}", "OPENAI_BASE_URL": "{k}"}}}}}}}}',
    "broken.yaml": "model:\n  model_kwargs:\n    api_key: \"{k}\n  - [\n",
}


def test_the_doctor_over_files_holding_the_canary_leaks_nothing(pytester: pytest.Pytester, canary: str,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.delenv("TAOTOKEN_API_KEY")  # the doctor must find and mask the key in the files on its own
    folder = pytester.path / "project"
    folder.mkdir()
    for name, template in DOCTOR_FILES.items():
        target = folder / (name if name != "broken.yaml" else "sub/mini-swe-agent.yaml")  # does not parse
        target.parent.mkdir(exist_ok=True)
        target.write_text(template.format(k=canary), encoding="utf-8")
    paths = [str(p) for p in sorted(folder.rglob("*")) if p.is_file()]
    result = pytester.runpytest("--taotoken-doctor", *paths, "-vv", "--tb=long", "-l", "-rA", "-p", "no:cacheprovider",
                                "--junitxml=doctor.xml", "-o", "junit_logging=all", "--taotoken-report=doctor.json")
    assert "INTERNALERROR" not in result.stdout.str()
    assert result.parseoutcomes().get("failed", 0) >= 5  # the files are full of errors: the items fail
    command = pytester.run(sys.executable, "-m", "pytest_taotoken.cli", "doctor", "--json", "-v", *paths,
                           timeout=60)
    text = pytester.run(sys.executable, "-m", "pytest_taotoken.cli", "doctor", "-v", str(folder), timeout=60)
    assert command.ret == 1 and text.ret == 1
    assert json.loads(command.stdout.str())["ok"] is False
    doctored = [result.stdout.str(), command.stdout.str(), command.stderr.str(), text.stdout.str(),
                text.stderr.str(), *_everything(result, caplog)]
    for path in folder.rglob("*"):
        if path.is_file():
            path.unlink()  # the inputs hold the canary on purpose; what the doctor wrote must not
    assert search_everything(canary, pytester.path, *doctored) == {}
