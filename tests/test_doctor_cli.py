"""``taotoken doctor``: exit codes, the text a user reads, and --json validated against its schema."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from pytest_taotoken.cli import main
from pytest_taotoken.doctor.sources import ENV_VARS

FIXTURES = Path(__file__).parent / "doctor_fixtures"
SCHEMA_PATH = Path(__file__).parent.parent / "contracts" / "doctor.schema.json"
KEY = "sk-test-fake-0000000000001a2b"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*ENV_VARS, "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
                 "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TAOTOKEN_API_KEY", KEY)
    monkeypatch.setenv("RL_SAMPLE_MODEL", "qwen-max")


@pytest.fixture(scope="module")
def validator() -> Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the clean set outside any git repository, as the current folder."""
    shutil.copytree(FIXTURES / "clean", tmp_path / "proj")
    monkeypatch.chdir(tmp_path / "proj")
    return tmp_path / "proj"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["doctor", "--no-probe", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_clean_project_exits_0(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys)
    assert code == 0
    assert out.splitlines()[0] == "environment (shell environment): ok (0 errors, 0 warnings, 2 values)"
    assert "rl.toml (RL framework TOML): ok (0 errors, 0 warnings, 8 values)" in out
    assert out.rstrip().endswith("taotoken doctor: OK: 0 errors, 0 warnings in 9 sources")


def test_errors_exit_1_with_location_and_fix(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(FIXTURES / "mistakes" / "spelling_cursor_baseURL.json", project / "settings.json")
    code, out, _ = run(capsys)
    assert code == 1
    assert ("settings.json:2:3: error spelling.cursor_baseURL: 'openai.baseURL' is not a Cursor setting"
            in out)
    assert "    fix: rename 'openai.baseURL' to 'openai.baseUrl' (lower-case 'rl')" in out
    assert "FAILED: 1 error" in out


def test_warnings_alone_exit_0(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, str(FIXTURES / "mistakes" / "rollout_identical.toml"), "--no-env")
    assert code == 0
    assert "warning rollout.identical_samples" in out and "OK: 0 errors, 1 warning in 1 source" in out


@pytest.mark.parametrize("args", [["doctor", "no/such/file.env"], ["doctor", "--no-such-option"], [],
                                  ["doctor", "--root", "no-such-folder"], ["unknown-command"]])
def test_usage_problems_exit_2(project: Path, capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    assert main(args) == 2
    assert capsys.readouterr().err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--help"]) == 0
    assert "--json" in capsys.readouterr().out


def test_json_output_matches_the_schema(project: Path, capsys: pytest.CaptureFixture[str],
                                        validator: Draft202012Validator) -> None:
    for name in ("key_placeholder.env", "parse_json.json", "spelling_api_base_level.yaml"):
        shutil.copy(FIXTURES / "mistakes" / name, project / name)
    code, out, _ = run(capsys, "--json", ".", "key_placeholder.env", "parse_json.json", "spelling_api_base_level.yaml")
    data: dict[str, Any] = json.loads(out)
    validator.validate(data)
    assert code == 1 and data["ok"] is False
    assert data["summary"] == {"sources": 12, "errors": 3, "warnings": 0}
    # discovered files first (sorted), then the given ones not discovered; a file given twice is checked once
    assert [(f["code"], f["file"], f["line"]) for f in data["findings"]] == [
        ("key.placeholder", "key_placeholder.env", 2), ("spelling.api_base_level", "spelling_api_base_level.yaml", 3),
        ("parse.json", "parse_json.json", 3)]
    assert KEY not in out


def test_json_of_a_clean_project_matches_the_schema(project: Path, capsys: pytest.CaptureFixture[str],
                                                    validator: Draft202012Validator) -> None:
    code, out, _ = run(capsys, "--json")
    data = json.loads(out)
    validator.validate(data)
    assert (code, data["ok"], data["findings"]) == (0, True, [])
    keys = [v["value"] for s in data["sources"] for v in s["values"] if v["field"] == "api_key"]
    assert set(keys) == {"sk-…1a2b", "sk-…9f9f", "sk-…xxxx", "${TAOTOKEN_API_KEY}"}
    assert KEY not in out


@pytest.mark.parametrize("bad", [
    {"code": "NotDotted"},
    {"severity": "info"},
    {"line": 0},
])
def test_the_schema_rejects_malformed_findings(validator: Draft202012Validator, bad: dict[str, Any]) -> None:
    finding = {"code": "key.placeholder", "severity": "error", "message": "m", "fix": "f", "source": None,
               "file": None, "line": None, "column": None, **bad}
    doc = {"schema_version": 1, "tool": "taotoken doctor", "root": "/", "ok": False,
           "summary": {"sources": 0, "errors": 1, "warnings": 0}, "sources": [], "findings": [finding]}
    assert list(validator.iter_errors(doc))


def test_the_schema_rejects_an_unmasked_key(validator: Draft202012Validator) -> None:
    value = {"field": "api_key", "name": "OPENAI_API_KEY", "value": KEY, "file": None, "line": None, "column": None,
             "client": None, "role": None, "shared": True}
    source = {"label": "environment", "kind": "environment", "file": None, "template": False, "status": "ok",
              "errors": 0, "warnings": 0, "values": [value]}
    doc = {"schema_version": 1, "tool": "taotoken doctor", "root": "/", "ok": True,
           "summary": {"sources": 1, "errors": 0, "warnings": 0}, "sources": [source], "findings": []}
    assert list(validator.iter_errors(doc))
    value["value"] = "sk-…1a2b"
    validator.validate(doc)


def test_the_module_runs_as_a_command(project: Path) -> None:
    shutil.copy(FIXTURES / "mistakes" / "key_placeholder.env", project / ".env")
    done = subprocess.run([sys.executable, "-m", "pytest_taotoken.cli", "doctor", "--no-probe", "--no-env"],
                          capture_output=True, text=True, cwd=project, timeout=60, check=False)
    assert done.returncode == 1, done.stderr
    assert ".env:2:1: error key.placeholder" in done.stdout
