"""Cassettes: replay by default, record with ``--taotoken-record``, nothing with ``--taotoken-live``.

Two layers:

- :func:`use_cassette` (over :class:`CassetteSession`) is the mechanism. It works outside pytest too
  (the bundled suite and scripts use it): inside the block, every httpx request (plugin clients, plain
  httpx, the openai SDK) is answered from the cassette, or sent and recorded.
- :class:`RecordingPlugin` is the pytest side: which tests use a cassette (``taotoken_live``,
  ``taotoken_cassette`` or the plugin's client fixtures), where it lives, when it is written (at
  teardown, only if the test passed: a failed test keeps the old cassette and says so), and the
  failure for a request that has no recording.

Heavy imports (yaml, httpx) happen only when a test uses a cassette, so that merely having the plugin
installed costs a run nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import pytest

from .errors import CassetteError
from .keys import redact

if TYPE_CHECKING:
    from ._cassette import CassetteCorrupt, CassetteLocked, MissingRecording
    from ._intercept import Recorder
    from .settings import Settings

__all__ = [
    "PLUGIN_NAME",
    "CassetteCorrupt",
    "CassetteLocked",
    "CassetteSession",
    "MissingRecording",
    "RecordingPlugin",
    "cassette_path",
    "ensure_cassette",
    "record_command",
    "use_cassette",
]

_LAZY = ("CassetteCorrupt", "CassetteLocked", "MissingRecording")


def __getattr__(name: str) -> Any:
    """The cassette exceptions, imported on first use (their module needs yaml)."""
    if name in _LAZY:
        from . import _cassette

        return getattr(_cassette, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


PLUGIN_NAME = "taotoken-recording"
SECTION = "taotoken recording"
CassetteMode = Literal["replay", "record", "live"]
_UNSAFE = re.compile(r'[<>:"/\\|?*\x00-\x1f\x7f]')
_MAX_NAME = 120


def record_command(nodeid: str) -> str:
    """``pytest --taotoken-record "<nodeid>"``, quoted for a POSIX shell."""
    escaped = re.sub(r'(["\\$`])', r"\\\1", nodeid)
    return f'pytest --taotoken-record "{escaped}"'


class CassetteSession:
    """One use of one cassette: :meth:`start`, the test's requests, then :meth:`finish`."""

    def __init__(self, path: str | os.PathLike[str], mode: CassetteMode, settings: Settings | None = None, *,
                 owner: str | None = None, shared: bool = False, display: str | None = None,
                 command: str | None = None) -> None:
        self.path = Path(path)
        self.mode = mode
        self.settings = settings
        self.owner = owner
        self.shared = shared
        self.display = display or str(self.path)
        self.command = command or 'the same code inside use_cassette(path, "record")'
        self.existed = False
        self.written: int | None = None
        self.recorder: Recorder | None = None

    @property
    def root_path(self) -> str:
        """The API root's path (``/api`` for https://taotoken.net/api): requests are matched below it."""
        return urlsplit(self.settings.api_root).path.rstrip("/") if self.settings is not None else ""

    @property
    def misses(self) -> list[AssertionError]:
        return list(self.recorder.misses) if self.recorder is not None else []

    @property
    def stream_errors(self) -> list[str]:
        return list(self.recorder.stream_errors) if self.recorder is not None else []

    def start(self) -> None:
        """Load the cassette (replay) and route httpx through it. Raises ``CassetteCorrupt``."""
        if self.mode == "live" or self.recorder is not None:
            return
        from . import _cassette, _intercept
        from ._scrub import Scrubber

        if self.mode == "replay":
            cassette = _cassette.load(self.path, display=self.display, fix=self.command)
        else:
            cassette = _cassette.Cassette(self.path, [], exists=self.path.exists())
        self.existed = cassette.exists
        scrubber = Scrubber([self.settings.api_key] if self.settings is not None else [])
        self.recorder = _intercept.Recorder(self.mode, scrubber, cassette, owner=self.owner, shared=self.shared,
                                            root=self.root_path,
                                            display=self.display, command=self.command)
        _intercept.activate(self.recorder)

    def stop(self) -> None:
        if self.recorder is not None:
            from . import _intercept

            _intercept.deactivate(self.recorder)

    def finish(self, ok: bool, why: str = "the test failed while recording") -> str | None:
        """Stop, and in record mode write the cassette if ``ok``; return what to tell the user, if anything.

        Raises ``CassetteLocked`` when another process keeps the cassette locked.
        """
        self.stop()
        if self.mode != "record" or self.recorder is None:
            return None
        if not ok:
            kept = "the previous cassette is kept" if self.existed else "there was no cassette before"
            return f"{self.display} was not written: {why}; {kept}"
        from . import _cassette

        interactions = self.recorder.recorded()
        if not interactions and not self.existed:
            return None
        self.written = _cassette.write(self.path, interactions, owner=self.owner, shared=self.shared,
                                       root_path=self.root_path,
                                       display=self.display)
        return None


@contextlib.contextmanager
def use_cassette(path: str | os.PathLike[str], mode: CassetteMode | None = None, settings: Settings | None = None,
                 *, owner: str | None = None, shared: bool = False,
                 command: str | None = None) -> Iterator[CassetteSession]:
    """Replay, record or pass through every httpx request made inside the block.

    ``mode`` defaults to ``settings.mode`` (else replay). In record mode the cassette is written when
    the block ends without an exception; with one, the old cassette is kept and the exception says so.
    In replay mode, a request without a recording raises ``MissingRecording`` (an ``AssertionError``);
    if the code swallowed it, it is raised again when the block ends.
    """
    chosen: CassetteMode = mode or (settings.mode if settings is not None else "replay")
    session = CassetteSession(path, chosen, settings, owner=owner, shared=shared, command=command)
    session.start()
    try:
        yield session
    except BaseException as exc:
        note = session.finish(ok=False, why=f"{type(exc).__name__} ended the block while recording")
        if note and hasattr(exc, "add_note"):
            exc.add_note(f"taotoken: {note}")
        raise
    session.finish(ok=True)
    if session.misses:
        raise session.misses[0]


# -- pytest ----------------------------------------------------------------------------------------

def _safe_name(name: str) -> str:
    name = _UNSAFE.sub("_", name).strip(". ") or "_"
    if len(name) > _MAX_NAME:
        digest = hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()[:10]
        name = f"{name[:_MAX_NAME - 11]}-{digest}"
    return name


def cassette_path(item: pytest.Item, cassette_dir: Path) -> tuple[Path, bool]:
    """``<cassette_dir>/<module path>/<test>.yaml``, or ``<cassette_dir>/<name>.yaml`` when shared."""
    base = cassette_dir if cassette_dir.is_absolute() else item.config.rootpath / cassette_dir
    marker = item.get_closest_marker("taotoken_cassette")
    if marker is not None:
        name = marker.args[0] if marker.args else marker.kwargs.get("name")
        parts = Path(name).parts if isinstance(name, str) else ()
        if not isinstance(name, str) or not parts or Path(name).is_absolute() or ".." in parts:
            raise CassetteError(
                f"taotoken_cassette({name!r}) on {item.nodeid}: give a cassette name relative to the cassette"
                " folder, e.g. @pytest.mark.taotoken_cassette(\"chat/shared\")"
            )
        file = str(name) if str(name).endswith((".yaml", ".yml")) else f"{name}.yaml"
        return base / file, True
    try:
        module = item.path.relative_to(item.config.rootpath)
    except ValueError:
        module = Path(item.path.name)
    test = ".".join(item.nodeid.split("::")[1:]) or item.name
    return base / module.with_suffix("") / f"{_safe_name(test)}.yaml", False


@dataclass
class _State:
    session: CassetteSession
    failed: bool = False
    skipped: bool = False
    miss_reported: bool = False


_STATE = pytest.StashKey[_State]()


class RecordingPlugin:
    """Gives each test that talks to the endpoint its cassette, and writes it when the test passed."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.notes: dict[str, str] = {}

    # which test, which cassette ---------------------------------------------------------------
    @staticmethod
    def wants(item: pytest.Item) -> bool:
        return bool(item.get_closest_marker("taotoken_live") or item.get_closest_marker("taotoken_cassette"))

    def _display(self, path: Path) -> str:
        with contextlib.suppress(ValueError):
            return str(path.relative_to(self.config.invocation_params.dir))
        return str(path)

    def _command(self, item: pytest.Item) -> str:
        nodeid = item.nodeid
        invocation = self.config.invocation_params.dir
        if invocation != self.config.rootpath:
            rest = nodeid.split("::", 1)[1:]
            with contextlib.suppress(ValueError):
                nodeid = "::".join([os.path.relpath(item.path, invocation), *rest])
        return record_command(nodeid)

    def activate(self, item: pytest.Item) -> CassetteSession | None:
        """Start the test's cassette (once); a corrupt cassette or a bad marker fails the test here."""
        from .plugin import require_key

        require_key(self.settings)  # record/live without a usable key would only record 401s
        if self.settings.mode == "live":
            return None
        state = item.stash.get(_STATE, None)
        if state is not None:
            return state.session
        problem = None
        try:
            path, shared = cassette_path(item, self.settings.cassette_dir)
            session = CassetteSession(path, self.settings.mode, self.settings, owner=item.nodeid, shared=shared,
                                      display=self._display(path), command=self._command(item))
            session.start()
        except CassetteError as exc:
            problem = redact(str(exc))
        if problem is not None:
            pytest.fail(problem, pytrace=False)
        item.stash[_STATE] = _State(session)
        return session

    # hooks --------------------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)  # inside every wrapper (logging's too), before the fixtures are set up
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if self.wants(item):
            self.activate(item)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item,
                                  call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        state = item.stash.get(_STATE, None)
        if state is not None and call.excinfo is not None and _is_miss(call.excinfo.value):
            _cut_at_test(call.excinfo, item)
        report = yield
        if state is None:
            return report
        if report.failed:
            state.failed = True
        elif report.skipped:
            state.skipped = True
        session = state.session
        if report.failed and call.when in ("setup", "call") and session.mode == "record":
            kept = "the previous cassette is kept" if session.existed else "there was no cassette before"
            report.sections.append((SECTION, f"{session.display} will not be written: the test failed while"
                                              f" recording; {kept}."))
        if report.failed and session.misses and not state.miss_reported:
            state.miss_reported = True
            if not _raised_miss(call):
                text = "\n".join(str(m) for m in session.misses[:3])
                report.sections.append((SECTION, f"requests without a recording (the failure may stem from"
                                                 f" them):\n{text}"))
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
        try:
            result = yield
        except BaseException:
            self._finish(item, ok=False)
            raise
        self._finish(item, ok=True)
        return result

    def _finish(self, item: pytest.Item, ok: bool) -> None:
        state = item.stash.get(_STATE, None)
        if state is None:
            return
        del item.stash[_STATE]
        session = state.session
        problem = None
        try:
            session.finish(ok=ok and not state.failed and not state.skipped)
        except CassetteError as exc:
            problem = redact(str(exc))
        if problem is not None:
            pytest.fail(problem, pytrace=False)
        if session.misses and not state.miss_reported and not state.failed:
            more = len(session.misses) - 1
            extra = f"\n(and {more} more request{'s' if more > 1 else ''} without a recording)" if more else ""
            pytest.fail(f"{session.misses[0]}{extra}\n(the test caught the error; it fails here instead)",
                        pytrace=False)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, content in report.sections:
            if name == SECTION and "will not be written" in content:
                self.notes[report.nodeid] = content

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.notes:
            return
        terminalreporter.write_sep("-", "taotoken: cassettes not written")
        for nodeid, note in self.notes.items():
            terminalreporter.write_line(f"{nodeid}: {note}")


def _cut_at_test(excinfo: pytest.ExceptionInfo[BaseException], item: pytest.Item) -> None:
    """End the traceback at the test's own last line: the frames inside httpx only hide the message."""
    tb: TracebackType | None = excinfo.tb
    last: TracebackType | None = None
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename) == item.path:
            last = tb
        tb = tb.tb_next
    if last is not None:
        last.tb_next = None
        excinfo.traceback = excinfo.traceback.__class__(excinfo.tb)


def _is_miss(exc: BaseException) -> bool:
    from ._cassette import MissingRecording

    return isinstance(exc, MissingRecording)


def _raised_miss(call: pytest.CallInfo[None]) -> bool:
    return call.excinfo is not None and _is_miss(call.excinfo.value)


def ensure_cassette(request: pytest.FixtureRequest) -> None:
    """From a fixture that talks to the endpoint: make sure the requesting test's cassette is in use."""
    plugin = request.config.pluginmanager.get_plugin(PLUGIN_NAME)
    if isinstance(plugin, RecordingPlugin) and isinstance(request.node, pytest.Item):
        plugin.activate(request.node)
