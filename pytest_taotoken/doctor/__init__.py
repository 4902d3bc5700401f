"""The config doctor: check every place a Base URL, key and model ID are written, before anything is sent.

Usage from Python::

    from pytest_taotoken.doctor import run_doctor
    result = run_doctor([".env", "rl.toml"], env=os.environ, root=".")
    result.ok, result.findings, result.to_dict()   # the dict matches contracts/doctor.schema.json

The same checks run as pytest items (``pytest --taotoken-doctor [PATH ...]``, see
:mod:`.pytest_plugin`) and as a command (``taotoken doctor [PATH ...] [--json]``, see
:mod:`pytest_taotoken.cli`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .core import PathLike, collect_paths, run_doctor
from .discovery import discover, discoverable
from .model import ConfigValue, DoctorResult, SourceRead, SourceReport
from .registry import registered_checks
from .render import format_finding, render_text, summary_line

__all__ = [
    "ConfigValue",
    "DoctorResult",
    "SourceRead",
    "SourceReport",
    "collect_paths",
    "discover",
    "discoverable",
    "doctor_report",
    "format_finding",
    "registered_checks",
    "render_text",
    "run_doctor",
    "summary_line",
]


def doctor_report(paths: Iterable[PathLike] = (), env: Mapping[str, str] | None = None,
                  root: PathLike | None = None, **options: Any) -> dict[str, Any]:
    """The whole doctor result as the dict ``contracts/doctor.schema.json`` describes (keys masked)."""
    return run_doctor(paths, env, root, **options).to_dict()
