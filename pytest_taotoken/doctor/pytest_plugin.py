"""The doctor as pytest items: ``pytest --taotoken-doctor [PATH ...]``.

Each config file becomes one item (as flake8- and mypy-style plugins turn files into tests), and
the environment one more. An item fails when its source has an error finding, and passes when it
has only warnings, which the terminal summary lists. With ``--taotoken-doctor`` only doctor items
run: other files are not collected, so test modules are not even imported. With no paths, the
known file names under rootdir are discovered (not ``testpaths``: config files live at the root).

The plugin object is registered by ``plugin.py`` when the option is given. Every item's findings
are attached to its report as the ``taotoken_doctor`` user property (a list of finding dicts), so a
JSON report can carry them, with or without xdist.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from .core import run_doctor
from .discovery import HIDDEN_DIRS_ALLOWED, discoverable, display_path, skip_dir
from .model import DoctorResult, SourceReport
from .render import format_finding, plural

DOCTOR_RESULT_KEY = pytest.StashKey[DoctorResult]()
USER_PROPERTY = "taotoken_doctor"
ITEM_NAME = "taotoken-doctor"


class DoctorFailed(AssertionError):
    """A source has error findings; the message lists every finding with its fix."""


class _DoctorItemBase(pytest.Item):
    doctor: DoctorPlugin

    def source_key(self) -> str:
        raise NotImplementedError

    def runtest(self) -> None:
        report = self.doctor.result().for_path(self.source_key())
        findings = report.findings if report else []
        self.user_properties.append((USER_PROPERTY, [f.to_dict() for f in findings]))
        if report is not None and report.errors:
            raise DoctorFailed(_failure_text(report))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, DoctorFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)


class DoctorItem(_DoctorItemBase):
    """The check of one config file."""

    def source_key(self) -> str:
        return str(self.path.resolve())

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"taotoken doctor: {display_path(self.path, self.config.rootpath)}"


class DoctorEnvItem(_DoctorItemBase):
    """The check of the process environment."""

    def source_key(self) -> str:
        return "environment"

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, "taotoken doctor: environment"


class DoctorFile(pytest.File):
    """A config file: one item."""

    doctor: DoctorPlugin

    def collect(self) -> list[pytest.Item]:
        item = DoctorItem.from_parent(self, name=ITEM_NAME)
        item.doctor = self.doctor
        return [item]


def _failure_text(report: SourceReport) -> str:
    head = (f"taotoken doctor: {report.read.label} has {plural(len(report.errors), 'error')}"
            f" and {plural(len(report.warnings), 'warning')}")
    return "\n".join([head, *(format_finding(f) for f in report.findings)])


class DoctorPlugin:
    """Collects the doctor items and runs the doctor once for all of them (consistency needs them all)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.root = config.rootpath
        if config.args_source != pytest.Config.ArgsSource.ARGS:
            config.args = [str(self.root)]  # discover from rootdir, not testpaths
        self.files: list[Path] = []
        self._result: DoctorResult | None = None
        self.passed_warnings: list[dict[str, Any]] = []

    # -- collection

    @pytest.hookimpl(tryfirst=True)
    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        if collection_path.is_dir():
            if collection_path.name in HIDDEN_DIRS_ALLOWED:
                return False  # editor and agent settings live in hidden folders pytest skips by default
            return True if skip_dir(collection_path) else None
        return None if discoverable(collection_path) else True

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> DoctorFile | None:
        if not (parent.session.isinitpath(file_path) or discoverable(file_path)):
            return None
        if file_path.resolve() not in {f.resolve() for f in self.files}:
            self.files.append(file_path)
        node = DoctorFile.from_parent(parent, path=file_path)
        node.doctor = self
        return node

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        keep = [i for i in items if isinstance(i, DoctorItem)]
        dropped = [i for i in items if not isinstance(i, DoctorItem)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        env_item = DoctorEnvItem.from_parent(session, name="environment", nodeid=f"{ITEM_NAME}::environment")
        env_item.doctor = self
        items[:] = [env_item, *keep]

    # -- running

    def result(self) -> DoctorResult:
        if self._result is None:
            self._result = run_doctor(self.files, os.environ, self.root, discover_when_empty=False)
            self.config.stash[DOCTOR_RESULT_KEY] = self._result
        return self._result

    # -- reporting (also on an xdist controller, from the reports' user properties)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" or not report.passed:
            return
        for name, value in report.user_properties:
            if name == USER_PROPERTY and isinstance(value, list):
                self.passed_warnings.extend(f for f in value if f.get("severity") == "warning")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.passed_warnings:
            return
        from ..findings import Finding

        terminalreporter.section("taotoken doctor warnings")
        for data in self.passed_warnings:
            terminalreporter.line(format_finding(Finding(**data)))
        terminalreporter.line(f"taotoken doctor: {plural(len(self.passed_warnings), 'warning')} in passing sources")
