"""Run the doctor: read every source, run every check, attach each finding to its source.

No network: the only outside calls are ``git`` (is a file with a literal key tracked?) and a TCP
connect to a loopback proxy port. A source that cannot be read or checked becomes a finding and
the other sources are still checked.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from ..findings import Finding
from ..keys import clean_key, is_placeholder, register_secret
from . import checks, cross  # noqa: F401 - importing them registers the checks
from .discovery import discover
from .model import DoctorResult, SourceRead, SourceReport, env_reference
from .probes import GitState, git_state, loopback_listening
from .registry import Context, check_across, check_values
from .sources import read_environment, read_file

PathLike = str | os.PathLike[str]


def collect_paths(paths: Iterable[PathLike], root: Path, *, discover_when_empty: bool = True) -> list[Path]:
    """The files to check: given files as they are, given folders discovered, no paths: discover ``root``.

    Relative paths are relative to the current folder, as on any command line.
    """
    out: dict[Path, Path] = {}
    given = [Path(p) for p in paths]
    if not given and discover_when_empty:
        given = [root]
    for path in given:
        full = path.absolute()
        for file in discover(full) if full.is_dir() else [full]:
            out.setdefault(file.resolve(), file)
    return list(out.values())


def _internal(read: SourceRead, exc: BaseException) -> Finding:
    return Finding("doctor.internal_error", "error",
                   f"the doctor could not check {read.label} ({type(exc).__name__})",
                   "report this as a bug with the shape of the file (never its keys)", source=read.label,
                   file=read.file)


def _safe_read(path: Path, root: Path) -> SourceRead:
    try:
        return read_file(path, root)
    except Exception as exc:  # the doctor must never crash on a user's file
        read = SourceRead(str(path), "unknown", str(path), path=str(path))
        read.findings.append(_internal(read, exc))
        return read


def run_doctor(
    paths: Iterable[PathLike] = (),
    env: Mapping[str, str] | None = None,
    root: PathLike | None = None,
    *,
    include_env: bool = True,
    discover_when_empty: bool = True,
    probe: bool | Callable[[str, int], bool | None] = True,
    git: Callable[[str], GitState] | None = None,
) -> DoctorResult:
    """Check ``paths`` (files or folders; none: the known names under ``root``) and ``env``.

    ``env`` defaults to ``os.environ``; ``probe=False`` skips the loopback proxy connect, and a
    callable ``(host, port) -> listening`` replaces it; ``git`` replaces the git query (tests).
    The result holds every source, each with its findings.
    """
    base = Path(root) if root is not None else Path.cwd()
    env = dict(os.environ) if env is None else dict(env)
    files = collect_paths(paths, base, discover_when_empty=discover_when_empty)
    reads = [_safe_read(p, base) for p in files]
    extra_key_vars = [v.value.strip() for r in reads for v in r.values
                      if v.field == "api_key_env" and isinstance(v.value, str)]
    if include_env:
        reads.insert(0, read_environment(env, extra_key_vars))
    defined = {name: r.label for r in reads if r.kind in ("dotenv", "shell") for name in r.defined}
    listening = probe if callable(probe) else (loopback_listening if probe else None)
    ctx = Context(env, git=git or git_state, listening=listening,
                  defined_in_files=defined)
    for read in reads:  # so that no output can hold a key, even by accident
        for v in read.values:
            if v.field == "api_key" and isinstance(v.value, str) and not env_reference(v.value):
                key = clean_key(v.value)[0]
                if not is_placeholder(key):
                    register_secret(v.value.strip(), key)
    reports = [SourceReport(read, list(read.findings)) for read in reads]
    for report in reports:
        try:
            report.findings.extend(check_values(report.read, ctx))
        except Exception as exc:
            report.findings.append(_internal(report.read, exc))
    try:
        by_read = {id(r.read): r for r in reports}
        for value, finding in check_across(reads, ctx):
            owner = next(r for r in reads if any(v is value for v in r.values))
            by_read[id(owner)].findings.append(finding)
    except Exception as exc:
        if reports:
            reports[0].findings.append(_internal(reports[0].read, exc))
    for report in reports:
        report.findings.sort(key=lambda f: (f.line or 0, f.column or 0))
    return DoctorResult(str(base), reports)
