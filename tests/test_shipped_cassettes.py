"""The cassettes shipped in cassettes/ (recorded from the live test bed) hold no secret, no path of the
recording machine, and replay the whole suite offline, as the README's main-job command does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CASSETTES = Path(__file__).resolve().parent.parent / "cassettes"
FILES = sorted(CASSETTES.rglob("*.yaml"))
KEYISH = re.compile(r"sk-[A-Za-z0-9_\-]{12,}")
ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?:work|tmp|root|home|Users|var/folders)/|[A-Za-z]:\\\\")


def test_the_suite_cassettes_are_shipped() -> None:
    assert len([f for f in FILES if f.parts[-3] == "suite"]) >= 24  # 12 checks x 2 models


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(CASSETTES)))
def test_a_shipped_cassette_holds_no_key_and_no_machine_path(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert not KEYISH.findall(text), f"{path}: key-shaped value"
    assert "testbed-good" not in text and "testbed-limited" not in text
    assert "authorization" not in text.lower() or "<TAOTOKEN_API_KEY>" in text
    assert not ABSOLUTE_PATH.findall(text), f"{path}: absolute path of the recording machine"


def test_the_main_job_replays_offline(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TAOTOKEN_API_KEY", "OPENAI_API_KEY", "TAOTOKEN_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_BASE",
                 "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    result = pytester.runpytest("--taotoken-suite", f"--taotoken-cassette-dir={CASSETTES}", "--taotoken-models=tiny,echo",
                                "-p", "no:cacheprovider", "-rs")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes.get("errors", 0) == 0, result.stdout.str()[-3000:]
    assert outcomes["passed"] >= 20
