"""Hardening: nothing on disk is ever half-written, and a bad cassette fails only its own test.

- A corrupt cassette (truncated, garbage, empty, not a cassette, a folder) fails its test with the file
  name and the command that records it again: one error per test, never an INTERNALERROR (pytester),
  for a marked test, a client-fixture test and the bundled suite.
- ``kill -9`` of a recording run at a random moment, in a loop: every cassette is afterwards byte for
  byte the old one or a complete new one that loads, and so is the JSON report; the next run records
  over the stale lock files the killed run left.
- Consecutive record and replay runs under ``pytest -n 4`` lose no cassette and corrupt none.

Loop sizes: ``TAOTOKEN_HARDENING_KILL_RUNS`` (default 20, as the issue asks) and
``TAOTOKEN_HARDENING_XDIST_RUNS`` (default 10 in CI; the issue's 40 were run in development).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml  # noqa: F401 - imported before pytester's runs: PyYAML's C extension must not be re-imported

from pytest_taotoken import _cassette
from pytest_taotoken.testing import FakeGateway

KEY = "sk-test-fake-00000000000d15c0"
ENV_VARS = ("TAOTOKEN_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_BASE", "OPENAI_API_KEY", "RL_SAMPLE_MODEL",
            "RL_EVAL_MODEL", "OPENAI_MODEL", "GITHUB_STEP_SUMMARY", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
            "http_proxy", "https_proxy", "all_proxy", "PYTEST_ADDOPTS")
KILL_RUNS = int(os.environ.get("TAOTOKEN_HARDENING_KILL_RUNS", "20"))
XDIST_RUNS = int(os.environ.get("TAOTOKEN_HARDENING_XDIST_RUNS", "10"))
FIGURES: dict[str, int] = {}


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TAOTOKEN_API_KEY", KEY)


# --------------------------------------------------------------------------- corrupt cassettes

CORRUPT_TESTS = '''
import httpx
import pytest

@pytest.mark.taotoken_live
@pytest.mark.parametrize("kind", {kinds!r})
def test_marked(kind):
    httpx.post("http://127.0.0.1:9/api/v1/chat/completions", json={{"model": "m"}})

@pytest.mark.parametrize("kind", {kinds!r})
def test_fixture(kind, client):
    client.post("v1/chat/completions", json={{"model": "m", "messages": []}})

def test_untouched():
    pass
'''
GOOD = _cassette.dumps([_cassette.Interaction(
    _cassette.Request("POST", "http://127.0.0.1:1/api/v1/chat/completions", b'{"model":"m"}'),
    _cassette.Response(200, "OK", {"content-type": ["application/json"]}, b'{"choices":[]}'))])
CORRUPTIONS: dict[str, bytes | None] = {
    "truncated": GOOD.encode()[: len(GOOD) // 2],
    "no_version": GOOD.replace("version: 1", "").encode(),
    "garbage": b"\x00\xff\xfe garbage \x01",
    "empty": b"",
    "not_a_cassette": b"- just\n- a list\n",
    "bad_binary": GOOD.replace("string: '{\"choices\":[]}'", "string: !!binary '===not base64==='").encode(),
    "deep": b"[" * 5000,
    "folder": None,  # a folder where the file should be
}


def _corrupt(path: Path, data: bytes | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if data is None:
        path.mkdir()
        (path / "x").write_text("x")
    else:
        path.write_bytes(data)


def test_a_corrupt_cassette_fails_its_test_with_the_file_and_the_record_command(pytester: pytest.Pytester,
                                                                               env: None) -> None:
    kinds = sorted(CORRUPTIONS)
    pytester.makepyfile(test_c=CORRUPT_TESTS.format(kinds=kinds))
    for test in ("test_marked", "test_fixture"):
        for kind in kinds:
            _corrupt(pytester.path / "cassettes" / "test_c" / f"{test}[{kind}].yaml", CORRUPTIONS[kind])
    result = pytester.runpytest("-p", "no:cacheprovider", "-rE")
    out = result.stdout.str()
    assert "INTERNALERROR" not in out and "KeyError" not in out, out[-3000:]
    result.assert_outcomes(passed=1, errors=2 * len(kinds))  # one error per test, the others untouched
    for test in ("test_marked", "test_fixture"):
        for kind in kinds:
            assert f"cassette cassettes/test_c/{test}[{kind}].yaml cannot be replayed:" in out, kind
            assert f'Fix: delete it and record it again: pytest --taotoken-record "test_c.py::{test}[{kind}]"' in out


def test_a_corrupt_suite_cassette_fails_its_check_with_the_suite_record_command(pytester: pytest.Pytester,
                                                                               env: None) -> None:
    folder = pytester.path / "cassettes" / "suite"
    _corrupt(folder / "chat.basic" / "fake-model.yaml", CORRUPTIONS["truncated"])
    _corrupt(folder / "models.list" / "fake-model.yaml", CORRUPTIONS["garbage"])
    report = pytester.path / "report.json"
    result = pytester.runpytest("--taotoken-suite", "--taotoken-models=fake-model", f"--taotoken-report={report}",
                                "-k", "chat.basic or models.list", "-p", "no:cacheprovider")
    out = result.stdout.str()
    assert "INTERNALERROR" not in out and "KeyError" not in out, out[-3000:]
    assert result.ret == 1
    checks = {c["check"]: c for c in json.loads(report.read_text())["checks"]}
    for check in ("chat.basic", "models.list"):
        assert checks[check]["outcome"] in ("failed", "error"), checks[check]
        assert f"cassettes/suite/{check}/fake-model.yaml cannot be replayed:" in out
        assert f'pytest --taotoken-suite --taotoken-record --taotoken-models "fake-model" -k "{check}"' in out


# --------------------------------------------------------------------------- kill -9 at a random moment

KILL_TESTS = '''
import pytest

@pytest.mark.taotoken_live
@pytest.mark.parametrize("n", range(6))
def test_record(client, n):
    for i in range(12):
        body = {"model": "fake-model", "temperature": 1.0, "messages": [{"role": "user", "content": f"{n} {i} " + "x" * 3000}]}
        assert client.post("v1/chat/completions", json=body).status_code == 200
'''


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.glob("*.yaml")} if folder.is_dir() else {}


def _wait_for_a_write(folder: Path, proc: subprocess.Popen[bytes], limit: float) -> None:
    """Return as soon as a temporary cassette exists beside the others (a write is under way), or at ``limit``."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and proc.poll() is None:
        if any(name.endswith(".tmp") for name in os.listdir(folder)):
            return
        time.sleep(0.0002)


def test_kill_9_at_a_random_moment_leaves_old_or_new_complete_files(pytester: pytest.Pytester, env: None) -> None:
    pytester.makepyfile(test_kill=KILL_TESTS)
    folder = pytester.path / "cassettes" / "test_kill"
    report = pytester.path / "report.json"
    with FakeGateway(api_key=KEY) as gw:
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--taotoken-record",
                   f"--taotoken-base-url={gw.base_url}", f"--taotoken-report={report}"]
        run_env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        start = time.monotonic()
        subprocess.run(command, cwd=pytester.path, env=run_env, check=True, capture_output=True, timeout=120)
        full = time.monotonic() - start
        old = _snapshot(folder)
        assert len(old) == 6
        rng = random.Random()
        replaced = during_write = 0
        for run in range(KILL_RUNS):
            old_report = report.read_bytes()
            proc = subprocess.Popen(command, cwd=pytester.path, env=run_env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            if run % 2:
                time.sleep(rng.uniform(0.3 * full, 1.1 * full))  # any moment from collection to the report
            else:
                _wait_for_a_write(folder, proc, limit=2 * full + 10)  # the moment that matters most
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            during_write += any(p.name.endswith(".tmp") for p in folder.iterdir())
            new = _snapshot(folder)
            assert set(new) == set(old), "a cassette vanished"
            for name, data in new.items():
                if data == old[name]:
                    continue
                items = _cassette.parse(data)  # a changed cassette must be a complete new one
                assert len(items) == 12, f"{name}: {len(items)} interactions"
                replaced += 1
            old = new
            text = report.read_bytes()
            assert text == old_report or json.loads(text)["summary"], "the report is neither old nor complete"
        # The killed runs left stale locks and temporary files: the next run still records everything.
        subprocess.run(command, cwd=pytester.path, env=run_env, check=True, capture_output=True, timeout=120)
    final = _snapshot(folder)
    assert all(len(_cassette.parse(data)) == 12 for data in final.values()) and len(final) == 6
    assert not list(folder.glob("*.lock"))
    FIGURES.update(kill_runs=KILL_RUNS, cassettes_replaced_by_killed_runs=replaced, kills_during_a_write=during_write)
    print(f"\nkill -9 loop: {FIGURES}")
    assert during_write >= 1, "no kill landed during a write: the loop proved less than it claims"


# --------------------------------------------------------------------------- xdist -n 4

XDIST_MODULE = '''
import pytest

@pytest.mark.parametrize("n", range(4))
def test_own(client, n):
    body = {{"model": "fake-model", "temperature": 1.0, "messages": [{{"role": "user", "content": "{name} own " + str(n)}}]}}
    assert client.post("v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]

@pytest.mark.taotoken_cassette("shared/everyone")
@pytest.mark.parametrize("n", range(2))
def test_shared(client, n):
    body = {{"model": "fake-model", "messages": [{{"role": "user", "content": "{name} shared " + str(n)}}]}}
    assert client.post("v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
'''
MODULES = [f"test_x{i}" for i in range(4)]


@pytest.fixture
def xdist_project(pytester: pytest.Pytester, env: None) -> Iterator[pytest.Pytester]:
    pytester.makepyfile(**{name: XDIST_MODULE.format(name=name) for name in MODULES})
    yield pytester


def test_record_and_replay_under_xdist_n4_lose_and_corrupt_nothing(xdist_project: pytest.Pytester,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pytester = xdist_project
    cassettes = pytester.path / "cassettes"
    expected = sorted([f"{m}/test_own[{n}].yaml" for m in MODULES for n in range(4)] + ["shared/everyone.yaml"])
    total = len(MODULES) * 6
    with FakeGateway(api_key=KEY) as gw:
        for _ in range(XDIST_RUNS):
            monkeypatch.setenv("TAOTOKEN_API_KEY", KEY)
            recorded = pytester.runpytest_subprocess("-n", "4", "--taotoken-record", f"--taotoken-base-url={gw.base_url}",
                                                     "-p", "no:cacheprovider", timeout=180)
            recorded.assert_outcomes(passed=total)
            files = sorted(str(p.relative_to(cassettes)) for p in cassettes.rglob("*") if p.is_file())
            assert files == expected, files  # nothing lost, no lock or temporary file left
            for name in expected:
                items = _cassette.load(cassettes / name).interactions
                assert len(items) == (len(MODULES) * 2 if name.startswith("shared") else 1), name
            seen = len(gw.requests)
            monkeypatch.delenv("TAOTOKEN_API_KEY")
            replayed = pytester.runpytest_subprocess("-n", "4", f"--taotoken-base-url={gw.base_url}",
                                                     "-p", "no:cacheprovider", timeout=180)
            replayed.assert_outcomes(passed=total)
            assert len(gw.requests) == seen  # replay sent nothing
    FIGURES["xdist_runs"] = XDIST_RUNS
    print(f"\nxdist -n 4 record+replay runs: {XDIST_RUNS}")
