"""An exclusive lock file beside a cassette, so that two processes never write it at once.

``O_CREAT | O_EXCL`` makes creation atomic on every platform. The file holds the owner's PID, host
and test, for the message a waiting process shows. A lock whose process is gone (``kill -9`` of a
recording run) is stale: it is moved aside by an atomic rename, so that of two processes that find
the same stale lock only one breaks it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

#: How long a writer waits for another one before failing (a write takes milliseconds).
WAIT_SECONDS = 10.0
#: A lock older than this whose PID cannot be checked (another host, Windows) counts as stale.
UNCHECKABLE_STALE_AFTER = 600.0
_POLL = 0.01


class LockBusy(Exception):
    """The lock stayed held for the whole wait; ``holder`` describes who holds it."""

    def __init__(self, lock: Path, holder: str) -> None:
        super().__init__(f"{lock} is held by {holder}")
        self.lock = lock
        self.holder = holder


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    if sys.platform == "win32":  # os.kill(pid, 0) would terminate the process there
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return True
    return True


def _read(lock: Path) -> tuple[str, float] | None:
    """The lock's text and age, or None when it vanished meanwhile."""
    try:
        text = lock.read_text(encoding="utf-8", errors="replace")
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return None
    except OSError:
        return ("", 0.0)
    return text, age


def _is_stale(text: str, age: float) -> bool:
    parts = text.split("\n")
    try:
        pid = int(parts[0])
        host = parts[1]
    except (ValueError, IndexError):
        # Empty or half-written: its writer died between create and write, or is writing right now.
        return age > 5.0
    if host != socket.gethostname() or sys.platform == "win32":
        return age > UNCHECKABLE_STALE_AFTER
    return not _pid_alive(pid)


def _describe(text: str) -> str:
    parts = text.split("\n")
    if len(parts) >= 3 and parts[0].isdigit():
        return f"pid {parts[0]} on {parts[1]} ({parts[2] or 'no test'})"
    return "an unknown process"


def _break(lock: Path, seen: str) -> None:
    aside = lock.with_name(f"{lock.name}.stale.{os.getpid()}.{time.monotonic_ns()}")
    try:
        os.rename(lock, aside)
    except OSError:
        return  # someone else broke it first
    try:
        if aside.read_text(encoding="utf-8", errors="replace") != seen:
            # Between our read and the rename, another process broke the stale lock and took it: give it back.
            with contextlib.suppress(OSError):
                os.link(aside, lock)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        os.unlink(aside)


@contextlib.contextmanager
def locked(path: Path, owner: str = "", wait: float | None = None) -> Iterator[Path]:
    """Hold ``<path>.lock`` for the block; raise :class:`LockBusy` after ``wait`` seconds of contention."""
    lock = lock_path(path)
    deadline = time.monotonic() + (WAIT_SECONDS if wait is None else wait)
    content = f"{os.getpid()}\n{socket.gethostname()}\n{owner.replace(chr(10), ' ')}\n"
    while True:
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            seen = _read(lock)
            if seen is None:
                continue
            if _is_stale(*seen):
                _break(lock, seen[0])
                continue
            if time.monotonic() >= deadline:
                raise LockBusy(lock, _describe(seen[0])) from None
            time.sleep(_POLL)
            continue
        try:
            os.write(fd, content.encode("utf-8"))
        finally:
            os.close(fd)
        break
    try:
        yield lock
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)
