"""benchmarks/run.py works and writes every key of results.json. Figures are never asserted here:
they depend on the machine; the benchmark itself compares them with the targets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "benchmarks"
RUN = BENCH / "run.py"
KEYS = ("replay_ratio", "replay_vs_vcrpy_default", "validate_ratio", "stream_ratio", "concurrency_ratio",
        "client_overhead_ratio", "collect_overhead_ratio", "suite_replay_s_per_check", "suite_tokens_per_model")
HANG_S = 600  # a generous bound that only catches a hang


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(RUN), *args], capture_output=True, text=True, timeout=HANG_S, cwd=REPO)


@pytest.fixture(scope="module")
def bench() -> Any:
    """The benchmark's helper modules, imported the way run.py imports them (from its own folder)."""
    sys.path.insert(0, str(BENCH))
    try:
        import _common  # type: ignore[import-not-found]
        import _runs  # type: ignore[import-not-found]
        import run  # type: ignore[import-not-found]

        yield run, _common, _runs
    finally:
        sys.path.remove(str(BENCH))


def test_quick_run_writes_every_key(tmp_path: Path) -> None:
    default = BENCH / "results.json"
    before = default.stat().st_mtime_ns if default.exists() else None
    out = tmp_path / "results.json"

    proc = _run("--quick", "--rounds", "1", "--output", str(out))

    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text(encoding="utf-8"))
    for key in KEYS:
        value = data[key]
        assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{key}: {value!r}"
        figure = data["figures"][key]
        assert len(figure["rounds"]) == 1 and figure["baseline"] and figure["error"] is None, figure
        assert key in proc.stdout  # the printed table has a row per figure
    assert data["meta"]["quick"] is True and data["meta"]["machine"]["cpus"] >= 1
    assert isinstance(data["warnings"], list)
    assert data["figures"]["suite_tokens_per_model"]["details"]["source"]
    assert data["figures"]["suite_replay_s_per_check"]["details"]["source"]
    # --output was honoured: the committed results were not overwritten
    assert (default.stat().st_mtime_ns if default.exists() else None) == before


def test_tokens_come_from_a_given_live_report(tmp_path: Path) -> None:
    report = {"checks": [
        {"check": "chat.basic", "model": "tiny", "tokens": {"prompt": 10, "completion": 5}},
        {"check": "chat.stream", "model": "tiny", "tokens": {"prompt": 7, "completion": 8}},
        {"check": "chat.basic", "model": "echo", "tokens": {"prompt": 3, "completion": 1}},
    ], "summary": {"passed": 3, "failed": 0, "skipped": 0, "errors": 0}}
    path = tmp_path / "live-report.json"
    path.write_text(json.dumps(report), encoding="utf-8")
    out = tmp_path / "results.json"

    proc = _run("--only", "suite_tokens_per_model", "--live-report", str(path), "--output", str(out))

    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text(encoding="utf-8"))
    details = data["figures"]["suite_tokens_per_model"]["details"]
    assert details["per_model"] == {"tiny": 30, "echo": 4}
    assert data["suite_tokens_per_model"] == 30
    assert str(path) in details["source"]
    assert data["validate_ratio"] is None  # not measured with --only: written as null, never left out


def test_unknown_only_key_is_refused() -> None:
    proc = _run("--only", "speed_ratio")
    assert proc.returncode != 0
    assert "unknown key(s) speed_ratio" in proc.stderr


def test_figure_median_spread_and_warning(bench: Any) -> None:
    _, common, _ = bench
    fig = common.Figure("validate_ratio", 5, "json.loads", rounds=[2.0, 3.0, 4.0])
    assert fig.value == 3.0
    assert fig.spread == pytest.approx(2 / 3)
    assert fig.met is True
    assert "validate_ratio" in fig.warning(0.25) and fig.warning(0.9) is None
    single = common.Figure("stream_ratio", 5, "splitlines", rounds=[7.0])
    assert single.spread is None and single.warning(0.0) is None and single.met is False
    assert common.Figure("suite_replay_s_per_check", None, "checks", rounds=[0.1]).met is None


def test_table_marks_errors_and_misses(bench: Any) -> None:
    run, common, _ = bench
    figures = {
        "validate_ratio": common.Figure("validate_ratio", 5, "json.loads", rounds=[3.0, 3.2]),
        "stream_ratio": common.Figure("stream_ratio", 5, "splitlines", rounds=[40.0, 44.0]),
        "replay_ratio": common.Figure("replay_ratio", 10, "", error="RuntimeError: boom"),
    }
    lines = {line.split()[0]: line for line in run.table(figures).splitlines()[1:]}
    assert lines["validate_ratio"].endswith("met")
    assert lines["stream_ratio"].endswith("MISSED")
    assert lines["replay_ratio"].endswith("ERROR")
    assert "| `stream_ratio` |" in run.markdown(figures)


def test_clean_env_drops_settings_and_keys(bench: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _, common, _ = bench
    monkeypatch.setenv("TAOTOKEN_API_KEY", "sk-test-fake-0000000000001a2b")
    monkeypatch.setenv("PYTEST_ADDOPTS", "-x")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", "/tmp/summary.md")
    env = common.clean_env(EXTRA="1")
    assert "TAOTOKEN_API_KEY" not in env and "PYTEST_ADDOPTS" not in env and "GITHUB_STEP_SUMMARY" not in env
    assert env["EXTRA"] == "1" and "127.0.0.1" in env["NO_PROXY"]
