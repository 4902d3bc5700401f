"""Live test bed fixtures; collected only where ``TESTBED_LIVE=1`` (``tox -e live`` sets it).

The default unit run must stay offline and fast, and its environment has neither LiteLLM nor
torch, so every test module here is ignored unless the variable is set. The session-scoped
``testbed`` fixture starts the bed once (about 12 s, ~0.8 GB) and stops every process it
started when the session ends, whatever the outcome. When ``TESTBED_BASE_URL`` is already set
(``python -m testbed run -- pytest tests/live``), the running bed is reused instead.
Run these tests without ``-n``: each xdist worker would start a bed of its own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # testbed/ is a top-level folder beside the package, not installed
    sys.path.insert(0, str(ROOT))

from testbed.bed import GOOD_KEY, LIMITED_KEY, MODELS, BedInfo, TestBed  # noqa: E402 - needs ROOT on sys.path

LIVE = os.environ.get("TESTBED_LIVE") == "1"
collect_ignore_glob = [] if LIVE else ["test_*.py"]


@pytest.fixture(scope="session")
def testbed() -> Iterator[BedInfo]:
    """The running bed's ``BedInfo``: base URL, keys, model names, upstream URLs, PIDs."""
    if os.environ.get("TESTBED_BASE_URL"):
        yield BedInfo(
            base_url=os.environ["TESTBED_BASE_URL"],
            good_key=os.environ.get("TESTBED_GOOD_KEY", GOOD_KEY),
            limited_key=os.environ.get("TESTBED_LIMITED_KEY", LIMITED_KEY),
            limited_rpm=int(os.environ.get("TESTBED_LIMITED_RPM", "2")),
            rate_window_s=int(os.environ.get("TESTBED_RATE_WINDOW_S", "2")),
            models=tuple(os.environ.get("TESTBED_MODELS", ",".join(MODELS)).split(",")),
            upstreams={m: os.environ[f"TESTBED_UPSTREAM_{m.upper()}"] for m in MODELS
                       if f"TESTBED_UPSTREAM_{m.upper()}" in os.environ},
            pids={}, workdir="",
            tiny_batching=os.environ.get("TESTBED_TINY_BATCHING") == "1",
        )
        return
    with TestBed() as info:
        yield info
