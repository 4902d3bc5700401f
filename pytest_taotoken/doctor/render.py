"""Render a :class:`DoctorResult` for people: one line per finding, its fix indented below."""

from __future__ import annotations

from ..findings import Finding
from ..keys import redact
from .model import KIND_TITLES, DoctorResult, SourceReport


def location(finding: Finding) -> str:
    """``file:line:col`` (as much as is known), or ``environment``."""
    if not finding.file:
        return "environment"
    where = finding.file
    if finding.line:
        where += f":{finding.line}"
        if finding.column:
            where += f":{finding.column}"
    return where


def format_finding(finding: Finding) -> str:
    """Two lines: where, severity, code and message; then the fix."""
    src = f" (from {finding.source})" if finding.source and finding.file is None else ""
    return redact(f"{location(finding)}: {finding.severity} {finding.code}: {finding.message}{src}\n"
                  f"    fix: {finding.fix}")


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def summary_line(result: DoctorResult) -> str:
    verdict = "OK" if result.ok else "FAILED"
    return (f"taotoken doctor: {verdict}: {plural(len(result.errors), 'error')},"
            f" {plural(len(result.warnings), 'warning')} in {plural(len(result.sources), 'source')}")


def source_line(report: SourceReport) -> str:
    title = KIND_TITLES.get(report.read.kind, report.read.kind)
    counts = f"{plural(len(report.errors), 'error')}, {plural(len(report.warnings), 'warning')}"
    return f"{report.read.label} ({title}): {report.status} ({counts}, {plural(len(report.read.values), 'value')})"


def render_text(result: DoctorResult, *, verbose: bool = False) -> str:
    """The CLI's report: each source with its status, each finding with its fix, then the summary."""
    lines: list[str] = []
    for report in result.sources:
        lines.append(source_line(report))
        if verbose:
            lines.extend(f"    {v.name} = {v.shown()}" + (f"  ({v.where})" if v.file else "")
                         for v in report.read.values)
    findings = result.findings
    if findings:
        lines.append("")
        lines.extend(format_finding(f) for f in findings)
    lines.append("")
    lines.append(summary_line(result))
    return redact("\n".join(lines)) + "\n"
