"""Recording under pressure: two xdist workers at once, and a recording run killed with SIGKILL.

Loop counts are environment-tunable for long runs (CI keeps them small):
``TAOTOKEN_XDIST_RUNS`` (default 2) record+replay rounds under ``-n TAOTOKEN_XDIST_WORKERS`` (default 2), and
``TAOTOKEN_KILL_RUNS`` (default 4) killed recording runs.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_recording_plugin import CANARY, CHAT_TESTS, ENV_NAMES

from pytest_taotoken import _cassette
from pytest_taotoken.testing import FakeGateway

SHARED_TESTS = '''
import pytest

pytestmark = pytest.mark.taotoken_cassette("shared/all")


@pytest.mark.parametrize("n", range(6))
def test_shared(client, n):
    body = {"model": "fake-model", "messages": [{"role": "user", "content": f"shared {n}"}], "temperature": 0}
    assert client.post("v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
'''


@pytest.fixture
def gateway(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeGateway]:
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TAOTOKEN_API_KEY", CANARY)
    with FakeGateway(api_key=CANARY) as gw:
        yield gw


def xdist_runs() -> int:
    return int(os.environ.get("TAOTOKEN_XDIST_RUNS", "2"))


def xdist_workers() -> str:
    return os.environ.get("TAOTOKEN_XDIST_WORKERS", "2")


def test_record_and_replay_with_xdist_workers_lose_nothing(pytester: pytest.Pytester, gateway: FakeGateway,
                                                         monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytester.makepyfile(test_chat=CHAT_TESTS, test_shared=SHARED_TESTS)
    obs = tmp_path / "observed"
    monkeypatch.setenv("OBS_DIR", str(obs))
    cassettes = pytester.path / "cassettes"
    for _ in range(xdist_runs()):
        shutil.rmtree(cassettes, ignore_errors=True)
        shutil.rmtree(obs, ignore_errors=True)
        obs.mkdir()
        monkeypatch.setenv("TAOTOKEN_API_KEY", CANARY)
        result = pytester.runpytest("-n", xdist_workers(), "--taotoken-record", f"--taotoken-base-url={gateway.base_url}",
                                    "-p", "no:cacheprovider")
        result.assert_outcomes(passed=11)
        files = sorted(str(p.relative_to(cassettes)) for p in cassettes.rglob("*") if p.is_file())
        assert files == ["shared/all.yaml", *(f"test_chat/test_{t}.yaml"
                                               for t in ("async", "concurrent", "plain_httpx", "stream", "sync"))]
        shared = _cassette.load(cassettes / "shared/all.yaml").interactions
        assert sorted(i.recorded_by or "" for i in shared) == [f"test_shared.py::test_shared[{n}]" for n in range(6)]
        monkeypatch.delenv("TAOTOKEN_API_KEY")
        pytester.runpytest("-n", xdist_workers(), "-p", "no:cacheprovider").assert_outcomes(passed=11)


KILL_TESTS = '''
import pytest

@pytest.mark.parametrize("n", range(3))
def test_many(client, n):
    for i in range(%d):
        body = {"model": "fake-model", "messages": [{"role": "user", "content": f"{n} {i} " + "x" * 2000}]}
        assert client.post("v1/chat/completions", json=body).status_code == 200
'''
KILL_REQUESTS = 60


def kill_runs() -> int:
    return int(os.environ.get("TAOTOKEN_KILL_RUNS", "4"))


def _wait_for_a_write(folder: Path, proc: subprocess.Popen[bytes], limit: float) -> bool:
    """Return True as soon as a temporary cassette file exists (a write is under way); False at ``limit``."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and proc.poll() is None:
        if folder.is_dir() and any(name.endswith(".tmp") for name in os.listdir(folder)):
            return True
        time.sleep(0.0002)
    return False


def test_kill_9_of_a_recording_run_leaves_every_cassette_whole(pytester: pytest.Pytester,
                                                               gateway: FakeGateway) -> None:
    """Half the kills are sent while a cassette is being written, half at a random moment."""
    pytester.makepyfile(test_kill=KILL_TESTS % KILL_REQUESTS)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--taotoken-record",
               f"--taotoken-base-url={gateway.base_url}"]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    subprocess.run(command, cwd=pytester.path, env=env, check=True, capture_output=True, timeout=120)
    folder = pytester.path / "cassettes" / "test_kill"
    names = sorted(p.name for p in folder.iterdir())
    assert len(names) == 3
    rng = random.Random()
    during_write = interrupted = 0
    for run in range(kill_runs()):
        for leftover in folder.glob(".*.tmp"):  # count only what this run leaves (writers sweep them anyway)
            leftover.unlink()
        proc = subprocess.Popen(command, cwd=pytester.path, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        if run % 2 == 0:
            during_write += _wait_for_a_write(folder, proc, limit=60)
        else:
            time.sleep(rng.uniform(0.3, 2.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        interrupted += any(name.endswith(".tmp") for name in os.listdir(folder))
        for name in names:
            items = _cassette.load(folder / name).interactions  # loads whole, or the test fails here
            assert len(items) == KILL_REQUESTS, f"run {run}: {name} has {len(items)} interactions"
    print(f"kill runs: {kill_runs()}, sent during a write: {during_write}, left a half-written temporary file:"
          f" {interrupted}")
    assert during_write >= 1, "no kill was sent during a write: the test proved nothing"
