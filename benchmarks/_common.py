"""What every benchmark shares: figures with their spread, the fault gateway in its own process, a clean env.

A figure is a ratio measured side by side: in each round the plugin's way and its floor (or peer) run
back to back, so that a machine that slows down slows both. The figure is the median of the rounds'
ratios, and the spread (max - min) / median says how far to trust it.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

FAKE_KEY = "sk-test-fake-0000000000001a2b"  # a fake key: the gateway below accepts only this one
MODELS = ("fake-model", "fake-model-large")
MAX_SPREAD = 0.25  # (max - min) / median above this: the figure is printed with a warning


@dataclass
class Figure:
    """One key of results.json: per-round values, their median and spread, the target and the baseline."""

    key: str
    target: float | None  # the value must stay <= target; None: reported only
    baseline: str  # what the figure is divided by (or where it comes from)
    rounds: list[float] = field(default_factory=list)
    unit: str = "x"
    details: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    error: str | None = None

    @property
    def value(self) -> float | None:
        return statistics.median(self.rounds) if self.rounds else None

    @property
    def spread(self) -> float | None:
        """(max - min) / median of the rounds; None with fewer than two rounds."""
        med = self.value
        if len(self.rounds) < 2 or not med:
            return None
        return (max(self.rounds) - min(self.rounds)) / abs(med)

    @property
    def met(self) -> bool | None:
        value = self.value
        return None if self.target is None or value is None else value <= self.target

    def warning(self, max_spread: float) -> str | None:
        spread = self.spread
        if spread is not None and spread > max_spread:
            return (f"{self.key}: the rounds spread {spread:.0%} (> {max_spread:.0%}) around the median: too wide to"
                    " trust; rerun on a quieter machine or with more --rounds")
        return None

    def as_json(self) -> dict[str, Any]:
        value, spread = self.value, self.spread
        return {
            "value": _round(value), "unit": self.unit, "median": _round(value),
            "min": _round(min(self.rounds)) if self.rounds else None,
            "max": _round(max(self.rounds)) if self.rounds else None,
            "spread": None if spread is None else round(spread, 4),
            "rounds": [_round(r) for r in self.rounds], "target": self.target, "met": self.met,
            "baseline": self.baseline, "note": self.note, "details": self.details, "error": self.error,
        }


def _round(value: float | None) -> float | None:
    if value is None:
        return None
    return round(value, 4) if abs(value) < 100 else round(value, 1)


def best_per_call(fn: Callable[[], object], number: int, repeat: int) -> float:
    """Seconds per call: the fastest of ``repeat`` batches of ``number`` calls (noise only ever adds time)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def side_by_side(a: Callable[[], object], b: Callable[[], object], number_a: int, number_b: int,
                 repeat: int = 5) -> tuple[float, float]:
    """Seconds per call of ``a`` and ``b``, their batches interleaved so that drift hits both alike."""
    best_a = best_b = float("inf")
    for _ in range(repeat):
        best_a = min(best_a, best_per_call(a, number_a, 1))
        best_b = min(best_b, best_per_call(b, number_b, 1))
    return best_a, best_b


# ------------------------------------------------------------------------------------------- env


# the plugin's settings, pytest's own (ADDOPTS, PLUGINS, DISABLE_PLUGIN_AUTOLOAD, xdist's), coverage's
_DROP_PREFIXES = ("TAOTOKEN_", "RL_", "OPENAI_", "TESTBED_", "PYTEST_", "COV_CORE_")
_DROP = frozenset({"GITHUB_STEP_SUMMARY"})


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the settings a user may have exported, loopback unproxied."""
    from pytest_taotoken.settings import FIELDS

    drop = set(_DROP) | {name for spec in FIELDS for name in spec.env}
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith(_DROP_PREFIXES)}
    for name in ("NO_PROXY", "no_proxy"):
        env[name] = ",".join(filter(None, [env.get(name, ""), "127.0.0.1", "localhost"]))
    env.update(extra)
    return env


# ------------------------------------------------------------------------------------------- gateway


_CHILD = """
import json, sys
from pytest_taotoken.testing import FakeGateway
with FakeGateway(**json.loads(sys.argv[1])) as gw:
    print(gw.base_url, flush=True)
    sys.stdin.read()  # serve until the parent closes stdin (or dies)
"""


@contextmanager
def gateway(latency: float = 0.0, **params: Any) -> Iterator[str]:
    """A :class:`~pytest_taotoken.testing.FakeGateway` on 127.0.0.1 in a child process; yields its base URL.

    Its own process, so that the server's threads do not share the client's interpreter lock: the
    client side is measured as it runs against a real endpoint. It accepts only :data:`FAKE_KEY`.
    """
    params = {"latency": latency, "api_key": FAKE_KEY, "models": list(MODELS), **params}
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(params)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env())
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://127.0.0.1:"):
            proc.kill()
            _, err = proc.communicate(timeout=10)
            raise RuntimeError(f"the fault gateway did not start (exit {proc.returncode}): {err[-2000:]}")
        yield url
    finally:
        if proc.poll() is None:
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None and not stream.closed:
                stream.close()
