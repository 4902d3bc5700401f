"""The JSON report (``--taotoken-report``), the terminal summary table and the GitHub step summary.

Each suite item leaves a ``("taotoken", {...})`` entry in its ``user_properties``; reports travel from
xdist workers to the controller with them, so the controller alone writes the files, atomically,
even when tests fail.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest

from ._atomic import atomic_write_text
from .keys import REDACTOR, mask_key, redact
from .settings import Settings
from .suite import PROPERTY
from .urls import client_base_urls, display_url

SCHEMA_VERSION = 1
FAILURE_PROPERTY = "taotoken_failure"
DOCTOR_PROPERTY = "taotoken_doctor"


def _failure_fields(report: pytest.TestReport) -> dict[str, Any]:
    """category/summary/fix from the exception that failed the test (CheckFailed, ExchangeFailed, ...)."""
    for name, value in report.user_properties:
        if name == FAILURE_PROPERTY and isinstance(value, dict):
            return dict(value)
    text = str(report.longreprtext or "")
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else text
        return {"category": None, "summary": redact(str(reason).removeprefix("Skipped: ")), "fix": ""}
    last = [line for line in text.splitlines() if line.startswith("E ")]
    summary = last[0][1:].strip() if last else (text.splitlines()[-1] if text else "")
    return {"category": "other", "summary": redact(summary)[:300], "fix": ""}


def failure_fields_from_exception(exc: BaseException) -> dict[str, Any] | None:
    """What the report says of an exception: the check's verdict, else the diagnosis of the exception."""
    from .suite.registry import CheckFailed

    if isinstance(exc, CheckFailed):
        return {"category": exc.category, "summary": redact(exc.summary), "fix": redact(exc.fix)}
    if not isinstance(exc, Exception):
        return None
    from .diagnosis import diagnose  # the one place that maps exceptions (httpx, contract, stream) to causes

    d = diagnose(exception=exc, fetch_models=False)
    return {"category": d.category, "summary": redact(d.summary), "fix": redact(d.fix)} if d else None


def redact_report(report: pytest.TestReport) -> None:
    """Mask every known secret in a test report: the failure text and the captured output and logs.

    Gateways echo the key back ("Incorrect API key provided: sk-..."), so a test's assertion on a body,
    a print or a log line can carry it; the report is what the terminal, ``--junitxml``, xdist and CI
    logs are built from. A failure that holds a secret becomes plain text; the others are untouched.
    """
    if not REDACTOR.secrets():
        return
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, reason)
        report.longrepr = (longrepr[0], longrepr[1], redact(str(longrepr[2])))
    elif longrepr is not None:
        text = str(longrepr)
        clean = redact(text)
        if clean != text:
            report.longrepr = clean
    report.sections = [(name, redact(content)) for name, content in report.sections]
    report.user_properties = [(name, _redact_value(value)) for name, value in report.user_properties]


def _redact_value(value: Any) -> Any:
    """``value`` with every string in it redacted (user properties end up in JUnit XML)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {_redact_value(k): _redact_value(v) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*(_redact_value(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_redact_value(v) for v in value)
    return value


@dataclass(eq=False)  # plugins must stay hashable for pluggy
class ReportPlugin:
    config: pytest.Config
    settings: Settings
    path: str | None
    checks: list[dict[str, Any]] = field(default_factory=list)
    doctor: list[dict[str, Any]] = field(default_factory=list)

    @pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: masks what the other wrappers added too
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        if call.excinfo is not None and not call.excinfo.errisinstance(pytest.skip.Exception):
            fields = failure_fields_from_exception(call.excinfo.value)
            if fields:
                report.user_properties = [*report.user_properties, (FAILURE_PROPERTY, fields)]
        redact_report(report)
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            for name, value in report.user_properties:
                if name == DOCTOR_PROPERTY and isinstance(value, list):
                    self.doctor.extend(value)
        data = next((value for name, value in report.user_properties if name == PROPERTY), None)
        if not isinstance(data, dict):
            return
        if report.when == "call" or (report.when == "setup" and not report.passed):
            outcome = "error" if (report.when == "setup" and report.failed) else report.outcome
            fields = _failure_fields(report) if not report.passed else {"category": None, "summary": "", "fix": ""}
            self.checks.append({
                "nodeid": report.nodeid, "check": data["check"], "model": data["model"], "outcome": outcome,
                **fields, "duration_s": round(report.duration, 4), "requests": data["requests"],
                "retries": data["retries"], "tokens": data["tokens"], "details": data["details"],
            })

    def build(self) -> dict[str, Any]:
        s = self.settings
        layouts: dict[str, Any] = {"v1": None, "bare": None, "v1v1": None,
                                   "client_base_urls": client_base_urls(display_url(s.api_root))}
        for entry in self.checks:
            if entry["check"] == "url.layout" and entry["details"].get("layouts"):
                layouts.update(entry["details"]["layouts"])
                layouts["client_base_urls"] = entry["details"].get("client_base_urls") or layouts["client_base_urls"]
        outcomes = [c["outcome"] for c in self.checks]
        report = {
            "schema_version": SCHEMA_VERSION,
            "mode": s.mode,
            "generated_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "endpoint": {"base_url": display_url(s.base_url), "api_root": display_url(s.api_root), "key": mask_key(s.api_key),
                         "sources": dict(s.sources), "models": list(s.models)},
            "checks": sorted(self.checks, key=lambda c: c["nodeid"]),
            "layouts": layouts,
            "summary": {
                "passed": outcomes.count("passed"), "failed": outcomes.count("failed"),
                "skipped": outcomes.count("skipped"), "errors": outcomes.count("error"),
                "requests": sum(c["requests"] for c in self.checks), "retries": sum(c["retries"] for c in self.checks),
                "tokens": sum(c["tokens"]["prompt"] + c["tokens"]["completion"] for c in self.checks),
            },
        }
        if self.doctor:
            report["doctor"] = self.doctor
        return report

    def table(self) -> list[tuple[str, str, str, str, str, str]]:
        rows = []
        for c in sorted(self.checks, key=lambda c: (c["check"], c["model"] or "")):
            tokens = c["tokens"]["prompt"] + c["tokens"]["completion"]
            rows.append((c["check"], c["model"] or "-", c["outcome"], f"{c['duration_s']:.2f}s", str(tokens),
                         c["category"] or ""))
        return rows

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.checks:
            return
        tr = terminalreporter
        tr.write_sep("=", "taotoken")
        header = ("check", "model", "outcome", "latency", "tokens", "category")
        rows = [header, *self.table()]
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        for row in rows:
            tr.write_line("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        tr.write_line("")
        tr.write_line("base URL per client family:")
        for family, url in self.build()["layouts"]["client_base_urls"].items():
            tr.write_line(f"  {family:<15} {url}")
        if self.path:
            tr.write_line(f"report written to {self.path}")

    def markdown(self) -> str:
        lines = ["### taotoken", "", "| check | model | outcome | latency | tokens | category |", "|---|---|---|---|---|---|"]
        lines += ["| " + " | ".join(row) + " |" for row in self.table()]
        urls = self.build()["layouts"]["client_base_urls"]
        lines += ["", "| client | base URL |", "|---|---|"] + [f"| {k} | `{v}` |" for k, v in urls.items()]
        return redact("\n".join(lines)) + "\n"

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(self.config, "workerinput"):
            return
        if self.path:
            text = redact(json.dumps(self.build(), indent=2, sort_keys=False, default=str)) + "\n"
            try:
                atomic_write_text(self.path, text)
            except OSError as exc:
                self._cannot_write(session, f"the report {self.path}", exc, "give --taotoken-report a writable path")
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary and self.checks:
            try:
                with open(summary, "a", encoding="utf-8") as fh:
                    fh.write(self.markdown())
            except OSError as exc:
                self._cannot_write(session, f"GITHUB_STEP_SUMMARY ({summary})", exc,
                                   "point GITHUB_STEP_SUMMARY at a writable file, or unset it")

    @staticmethod
    def _cannot_write(session: pytest.Session, what: str, exc: OSError, fix: str) -> None:
        """One line, and a failed run: a missing report must not pass silently, nor end in a traceback."""
        sys.stderr.write(f"taotoken: cannot write {what}: {exc.strerror or exc}. Fix: {fix}\n")
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
