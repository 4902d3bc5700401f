"""The figures that run pytest in a child process: collection overhead, suite replay, suite tokens.

Every run starts in its own temporary folder (with an empty ``pytest.ini``, so that no project
configuration applies) and with :func:`_common.clean_env`, so that a key or a setting exported in
the shell cannot change what is measured.
"""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import FAKE_KEY, MODELS, Figure, clean_env, gateway

REPO = Path(__file__).resolve().parent.parent
SHIPPED_CASSETTES = REPO / "cassettes"
LIVE_REPORT = REPO / ".ci" / "artifacts" / "live-report.json"
PYTEST = (sys.executable, "-m", "pytest", "-p", "no:cacheprovider")
RUN_TIMEOUT_S = 600


@dataclass
class Run:
    wall: float  # seconds on the clock
    cpu: float  # user + system seconds of the child: what other load on the machine does not inflate
    proc: subprocess.CompletedProcess[str]


def _pytest(args: Sequence[str], cwd: Path, env: dict[str, str]) -> Run:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([*PYTEST, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(wall, cpu, proc)


def _tail(proc: subprocess.CompletedProcess[str], lines: int = 15) -> str:
    return "\n".join((proc.stdout + proc.stderr).splitlines()[-lines:])


def _project(root: Path) -> Path:
    (root / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    return root


# ------------------------------------------------------------------------------------------- collection


def _module(n: int) -> str:
    """20 tests: 10 functions, one parametrised function (5 cases) and a class of 5 methods."""
    funcs = "".join(f"def test_plain_{i}():\n    assert {i} + {n} == {i + n}\n\n\n" for i in range(10))
    return (
        "import pytest\n\n\n" + funcs
        + "@pytest.mark.parametrize('x', range(5))\ndef test_param(x):\n    assert x >= 0\n\n\n"
        + "class TestGroup:\n" + "".join(f"    def test_m{i}(self):\n        assert True\n\n" for i in range(5))
    )


def collect_overhead_ratio(rounds: int, tests: int = 500, repeats: int = 2) -> Figure:
    """CPU seconds of the collection, as installed (every entry-point plugin loads); wall and pytest alone in details.

    CPU time, because collection is single-threaded, so it equals the wall time on an idle machine,
    while other load on a shared machine inflates the wall time of one run and not the other. In a
    round each variant runs ``repeats`` times (A B B A) and keeps its fastest run: noise only adds time.
    """
    fig = Figure("collect_overhead_ratio", 1.10, "the same collection with -p no:taotoken (CPU seconds)")
    collect = ["--collect-only", "-q"]
    bare_env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    variants: dict[str, tuple[list[str], dict[str, str]]] = {
        "plugin": (collect, {}), "without": ([*collect, "-p", "no:taotoken"], {}),
        "alone_plugin": ([*collect, "-p", "pytest_taotoken.plugin"], bare_env), "alone_without": (collect, bare_env),
    }
    runs: dict[str, list[Run]] = {name: [] for name in variants}
    alone: list[float] = []
    with tempfile.TemporaryDirectory(prefix="taotoken-bench-collect-") as tmp:
        root = _project(Path(tmp))
        for n in range(tests // 20):
            (root / f"test_mod{n:03d}.py").write_text(_module(n), encoding="utf-8")
        _pytest(collect, root, clean_env())  # warm-up: bytecode of the test modules, the OS file cache
        for i in range(rounds):
            this: dict[str, Run] = {}
            for pair in (("plugin", "without"), ("alone_plugin", "alone_without")):
                first, second = pair if i % 2 == 0 else pair[::-1]
                for rep in range(repeats):
                    for name in (first, second) if rep % 2 == 0 else (second, first):
                        args, extra = variants[name]
                        run = _pytest(args, root, clean_env(**extra))
                        if f"{tests} tests collected" not in run.proc.stdout:
                            raise RuntimeError(f"collection ({name}) did not collect {tests} tests:\n{_tail(run.proc)}")
                        if name not in this or run.cpu < this[name].cpu:
                            this[name] = run
            for name, run in this.items():
                runs[name].append(run)
            fig.rounds.append(this["plugin"].cpu / this["without"].cpu)
            alone.append(this["alone_plugin"].cpu / this["alone_without"].cpu)

    def med(name: str, attr: str) -> float:
        return float(statistics.median(getattr(r, attr) for r in runs[name]))

    fig.details = {
        "tests": tests, "runs_per_variant_per_round": repeats,
        "plugin_cpu_s": round(med("plugin", "cpu"), 4), "without_cpu_s": round(med("without", "cpu"), 4),
        "difference_cpu_ms": round((med("plugin", "cpu") - med("without", "cpu")) * 1000, 1),
        "wall_ratio": round(statistics.median(p.wall / w.wall for p, w in zip(runs["plugin"], runs["without"], strict=True)),
                            4),
        "plugin_wall_s": round(med("plugin", "wall"), 4), "without_wall_s": round(med("without", "wall"), 4),
        "ratio_against_pytest_alone": round(statistics.median(alone), 4),
        "pytest_alone_cpu_s": round(med("alone_without", "cpu"), 4),
        "pytest_alone_difference_cpu_ms": round((med("alone_plugin", "cpu") - med("alone_without", "cpu")) * 1000, 1),
    }
    fig.note = ("CPU seconds of `pytest --collect-only -q`, start-up included, every installed plugin loaded;"
                " details: wall time, and against pytest alone (PYTEST_DISABLE_PLUGIN_AUTOLOAD=1)")
    return fig


# ------------------------------------------------------------------------------------------- suite replay


def _safe(model: str) -> str:
    """The cassette file stem of a model, as ``suite.runner.cassette_path`` names it."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in model)


def _shipped(cassettes: Path) -> tuple[str, list[str]] | None:
    """(base URL, models) of the shipped suite cassettes, read from their recorded requests; None if absent.

    The files are ``suite/<check>/<model>.yaml``; a model whose ID is not a safe file name is found
    among the models its cassettes' requests name (a check may also send other models, on purpose).
    """
    files = sorted((cassettes / "suite").glob("*/*.yaml"))
    if not files:
        return None
    from pytest_taotoken import _cassette

    models: dict[str, str] = {}
    base = None
    for path in files:
        models.setdefault(path.stem, path.stem)
        for item in _cassette.load(path).interactions:
            uri = item.request.uri
            if base is None and "/v1/" in uri:
                base = uri[: uri.index("/v1/")]
            model = item.request.model
            if model and _safe(model) == path.stem:
                models[path.stem] = model
    if base is None:
        return None
    return base, list(models.values())


def _report(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("checks"), list):
        raise ValueError(f"{path} is not a taotoken report (no 'checks' list)")
    return data


def suite_replay_s_per_check(rounds: int, cassettes: Path = SHIPPED_CASSETTES) -> Figure:
    fig = Figure("suite_replay_s_per_check", None, "wall seconds of `pytest --taotoken-suite` / checks run", unit="s")
    with tempfile.TemporaryDirectory(prefix="taotoken-bench-suite-") as tmp:
        root = _project(Path(tmp))
        shipped = _shipped(cassettes)
        if shipped is not None:
            base, models = shipped
            cassette_dir = cassettes
            source = f"shipped cassettes ({cassette_dir}/suite)"
        else:
            models, cassette_dir = list(MODELS), root / "cassettes"
            with gateway(0.0) as base:
                args = ["--taotoken-suite", "--taotoken-record", "--taotoken-base-url", base, "--taotoken-models",
                        ",".join(models), "--taotoken-cassette-dir", str(cassette_dir), "-q"]
                proc = _pytest(args, root, clean_env(TAOTOKEN_API_KEY=FAKE_KEY)).proc
                if proc.returncode != 0:
                    raise RuntimeError(f"recording the suite against the fault gateway failed:\n{_tail(proc)}")
            source = "recorded now against the fault gateway (no shipped cassettes under cassettes/suite)"
        report_path = root / "replay-report.json"
        args = ["--taotoken-suite", "--taotoken-base-url", base, "--taotoken-models", ",".join(models),
                "--taotoken-cassette-dir", str(cassette_dir), "--taotoken-report", str(report_path), "-q"]
        env = clean_env()  # replay needs no key
        walls, cpus, in_session = [], [], []
        report: dict[str, Any] = {}
        if rounds > 1:
            _pytest(args, root, env)  # warm-up: the first run reads the cassettes from disk
        for _ in range(rounds):
            run = _pytest(args, root, env)
            report = _report(report_path)
            checks = report["checks"]
            if not checks:
                raise RuntimeError(f"the replayed suite ran no checks:\n{_tail(run.proc)}")
            wall = run.wall
            walls.append(wall)
            cpus.append(run.cpu / len(checks))
            in_session.append(sum(c.get("duration_s", 0.0) for c in checks) / len(checks))
            fig.rounds.append(wall / len(checks))
    summary = report.get("summary", {})
    fig.details = {"source": source, "models": models, "checks": len(report.get("checks", [])),
                   "outcomes": {k: summary.get(k) for k in ("passed", "failed", "skipped", "errors")},
                   "wall_s": round(statistics.median(walls), 3),
                   "cpu_s_per_check": round(statistics.median(cpus), 4),
                   "in_test_s_per_check": round(statistics.median(in_session), 4)}
    fig.note = "source: " + ("shipped cassettes" if shipped else "recorded now against the fault gateway")
    broken = (summary.get("failed") or 0) + (summary.get("errors") or 0)
    if broken:
        fig.note += f"; {broken} check(s) failed in replay (details.outcomes): the cassettes need recording again"
    return fig


# ------------------------------------------------------------------------------------------- tokens


def tokens_per_model(report: dict[str, Any]) -> dict[str, int]:
    """Prompt + completion tokens of every check, summed per model."""
    out: dict[str, int] = {}
    for check in report["checks"]:
        tokens = check.get("tokens") or {}
        model = str(check.get("model") or "-")
        out[model] = out.get(model, 0) + int(tokens.get("prompt", 0)) + int(tokens.get("completion", 0))
    return out


def suite_tokens_per_model(live_report: Path | None = None) -> Figure:
    fig = Figure("suite_tokens_per_model", 1500, "the live suite's report: tokens summed per model; the most", unit="tokens")
    path = live_report or (LIVE_REPORT if LIVE_REPORT.is_file() else None)
    if path is not None:
        report = _report(path)
        source = f"live test bed report ({path})"
        fig.note = "source: live test bed report"
    else:
        with tempfile.TemporaryDirectory(prefix="taotoken-bench-live-") as tmp, gateway(0.0) as base:
            root = _project(Path(tmp))
            report_path = root / "live-report.json"
            args = ["--taotoken-suite", "--taotoken-live", "--taotoken-base-url", base, "--taotoken-models",
                    ",".join(MODELS), "--taotoken-report", str(report_path), "-q"]
            proc = _pytest(args, root, clean_env(TAOTOKEN_API_KEY=FAKE_KEY)).proc
            if not report_path.is_file():
                raise RuntimeError(f"the live suite run wrote no report:\n{_tail(proc)}")
            report = _report(report_path)
        source = "fake gateway"
        fig.note = "source: fake gateway (no live test bed report found); its usage counts words, not real tokens"
    per_model = tokens_per_model(report)
    if not per_model:
        raise RuntimeError(f"the report from {source} lists no checks")
    fig.rounds = [float(max(per_model.values()))]
    summary = report.get("summary", {})
    requests: dict[str, int] = {}
    for check in report["checks"]:
        model = str(check.get("model") or "-")
        requests[model] = requests.get(model, 0) + int(check.get("requests") or 0)
    fig.details = {"source": source, "per_model": per_model, "requests_per_model": requests,
                   "outcomes": {k: summary.get(k) for k in ("passed", "failed", "skipped", "errors")}}
    return fig
