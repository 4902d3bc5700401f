"""The only two things the doctor asks of the world outside the files: git, and a loopback port.

Both are small; the doctor caches their answers for one run, and a test can replace them. The port
probe refuses any host that is not loopback: the doctor never sends anything over the network, it
only asks whether a local proxy is listening (the usual cause of "local proxy failed").
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import Literal

from ..urls import is_loopback

GitState = Literal["tracked", "unignored", "ignored", "outside"]
GIT_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 0.5


def _git(cwd: Path, *args: str) -> int | None:
    try:
        done = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, timeout=GIT_TIMEOUT_S,
                              check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.returncode


def git_state(path: str) -> GitState:
    """Whether git tracks ``path``, would add it (not ignored), ignores it, or it is outside any work tree."""
    file = Path(path)
    folder = file.parent
    if _git(folder, "rev-parse", "--is-inside-work-tree") != 0:
        return "outside"
    if _git(folder, "ls-files", "--error-unmatch", "--", file.name) == 0:
        return "tracked"
    ignored = _git(folder, "check-ignore", "-q", "--", file.name)
    if ignored == 0:
        return "ignored"
    return "unignored" if ignored == 1 else "outside"


def _loopback_addresses(host: str) -> list[tuple[int, str]]:
    bare = host.strip("[]").lower()
    if bare == "localhost" or bare.endswith(".localhost"):
        return [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")]
    return [(socket.AF_INET6 if ":" in bare else socket.AF_INET, bare)]


def loopback_listening(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> bool | None:
    """True if something accepts TCP connections on the loopback ``host:port``; None if ``host`` is not loopback."""
    if not is_loopback(host) or not 0 < port < 65536:
        return None
    for family, address in _loopback_addresses(host):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.settimeout(timeout)
                if sock.connect_ex((address, port)) == 0:
                    return True
        except OSError:
            continue
    return False
