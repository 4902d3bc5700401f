"""Cassettes on disk: vcrpy's YAML format, loaded strictly, indexed for fast replay, written atomically.

Format (vcrpy's, so that its tools and diffs read it)::

    interactions:
    - request: {method, uri, body, headers: {Name: [value]}}
      response:
        status: {code: 200, message: OK}
        headers: {Name: [value]}
        body:
          string: <text (JSON, SSE) verbatim; !!binary when not UTF-8>
          chunk_sizes: [57, 61, 14]   # streamed replies: the chunk boundaries, so replay streams alike
      error: {type: ReadError, message: ...}   # only when the exchange ended in a transport error
      recorded_by: <test id>                   # only in shared cassettes
    version: 1

``version`` is written last, so a truncated file is always detected. Keys vcrpy does not know
(``chunk_sizes``, ``error``, ``recorded_by``) are ignored by vcrpy.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from ._atomic import atomic_write_text
from ._lockfile import LockBusy, locked
from .errors import CassetteError

try:
    from yaml import CSafeDumper as _BaseDumper
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover - PyYAML without libyaml
    from yaml import SafeDumper as _BaseDumper  # type: ignore[assignment]
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]

VERSION = 1
Key = tuple[str, str, str]


class CassetteCorrupt(CassetteError, AssertionError):
    """A cassette file cannot be read back; the message names the file, the reason and the fix."""


class MissingRecording(CassetteError, AssertionError):
    """Replay met a request the cassette does not hold; the message gives the command that records it."""


class CassetteLocked(CassetteError, AssertionError):
    """Another process kept the cassette locked for the whole wait; nothing was written."""


class CassetteUnwritable(CassetteError, AssertionError):
    """The cassette's folder cannot be created; nothing was written."""


for _cls in (CassetteCorrupt, MissingRecording, CassetteLocked, CassetteUnwritable):
    _cls.__module__ = "pytest_taotoken.recording"  # where users import them from


@dataclass(frozen=True)
class Request:
    method: str
    uri: str
    body: bytes = b""
    headers: Mapping[str, Sequence[str]] = field(default_factory=dict)
    root: str = field(default="", compare=False)  # the API root's path when recorded (not matched)

    @cached_property
    def key(self) -> Key:
        return match_key(self.method, self.uri, self.body, self.root)

    @cached_property
    def model(self) -> str | None:
        return body_model(self.body)


@dataclass(frozen=True)
class Response:
    status: int
    reason: str = ""
    headers: Mapping[str, Sequence[str]] = field(default_factory=dict)
    body: bytes = b""
    chunk_sizes: tuple[int, ...] = ()

    def chunks(self) -> list[bytes]:
        """The body cut where the server's chunks ended; one chunk when the sizes do not add up."""
        if len(self.chunk_sizes) < 2 or sum(self.chunk_sizes) != len(self.body):
            return [self.body] if self.body else []
        out, at = [], 0
        for size in self.chunk_sizes:
            out.append(self.body[at:at + size])
            at += size
        return out


@dataclass(frozen=True)
class Failure:
    """A transport error (an ``httpx`` exception class name) that ended the exchange."""

    type: str
    message: str = ""


@dataclass(frozen=True)
class Interaction:
    request: Request
    response: Response | None
    error: Failure | None = None
    recorded_by: str | None = None


# -- matching ----------------------------------------------------------------------------------

def path_of(uri: str, root: str = "") -> str:
    """The path and query of a URI below the API root's path ``root``.

    Neither the host nor the root's path is matched, so a recording made against
    ``http://127.0.0.1:4000`` replays against ``https://taotoken.net/api`` and on any port.
    """
    parts = urlsplit(uri)
    path = parts.path
    root = root.rstrip("/")
    if root and (path == root or path.startswith(root + "/")):
        path = path[len(root):] or "/"
    return path + ("?" + parts.query if parts.query else "")


def canonical_body(body: bytes) -> str:
    """JSON with sorted keys and no spaces, so that key order and formatting do not matter."""
    if not body:
        return ""
    try:
        return json.dumps(json.loads(body), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (ValueError, RecursionError):
        return body.decode("utf-8", "surrogateescape")


def match_key(method: str, uri: str, body: bytes, root: str = "") -> Key:
    return method.upper(), path_of(uri, root), canonical_body(body)


def body_model(body: bytes) -> str | None:
    try:
        data = json.loads(body) if body else None
    except (ValueError, RecursionError):
        return None
    model = data.get("model") if isinstance(data, dict) else None
    return model if isinstance(model, str) else None


# -- YAML ----------------------------------------------------------------------------------------

class _Dumper(_BaseDumper):  # type: ignore[misc,valid-type]
    """Multi-line text (SSE bodies) as literal blocks, so a diff shows one event per line."""


def _represent_str(dumper: _Dumper, text: str) -> yaml.Node:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _represent_str)


def _text_or_bytes(data: bytes) -> str | bytes | None:
    """UTF-8 as text (PyYAML escapes what YAML cannot show, and reads it back exactly); else ``!!binary``."""
    if not data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


def _to_dict(item: Interaction) -> dict[str, Any]:
    req = item.request
    out: dict[str, Any] = {
        "request": {"method": req.method, "uri": req.uri, "body": _text_or_bytes(req.body),
                    "headers": {k: list(v) for k, v in req.headers.items()}},
    }
    if item.response is not None:
        resp = item.response
        body: dict[str, Any] = {"string": _text_or_bytes(resp.body) or ""}
        if len(resp.chunk_sizes) > 1:
            body["chunk_sizes"] = list(resp.chunk_sizes)
        out["response"] = {"status": {"code": resp.status, "message": resp.reason},
                           "headers": {k: list(v) for k, v in resp.headers.items()}, "body": body}
    if item.error is not None:
        out["error"] = {"type": item.error.type, "message": item.error.message}
    if item.recorded_by:
        out["recorded_by"] = item.recorded_by
    return out


def dumps(interactions: Iterable[Interaction], root_path: str | None = None) -> str:
    data: dict[str, Any] = {} if root_path is None else {"root_path": root_path}
    data.update({"interactions": [_to_dict(i) for i in interactions], "version": VERSION})
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1 << 30,
                     default_flow_style=None)


class _Bad(Exception):
    pass


def _need(cond: bool, why: str) -> None:
    if not cond:
        raise _Bad(why)


def _as_bytes(value: Any, where: str) -> bytes:
    if value is None:
        return b""
    if isinstance(value, bytes):
        return value
    _need(isinstance(value, str), f"{where} is not text")
    return str(value).encode("utf-8", "surrogatepass")


def _headers(value: Any, where: str) -> dict[str, list[str]]:
    if value is None:
        return {}
    _need(isinstance(value, dict), f"{where} is not a mapping")
    out: dict[str, list[str]] = {}
    for name, values in value.items():
        items = values if isinstance(values, list) else [values]
        _need(isinstance(name, str) and all(isinstance(v, (str, int)) for v in items),
              f"{where} has a header that is not text")
        out[name] = [str(v) for v in items]
    return out


def _from_dict(raw: Any, n: int, owner: str | None) -> Interaction:
    where = f"interaction {n}"
    _need(isinstance(raw, dict), f"{where} is not a mapping")
    req = raw.get("request")
    _need(isinstance(req, dict), f"{where} has no request")
    method, uri = req.get("method"), req.get("uri")
    _need(isinstance(method, str) and bool(method), f"{where}: request.method is missing")
    _need(isinstance(uri, str) and bool(uri), f"{where}: request.uri is missing")
    request = Request(method, uri, _as_bytes(req.get("body"), f"{where}: request.body"),
                      _headers(req.get("headers"), f"{where}: request.headers"))
    response = None
    if raw.get("response") is not None:
        resp = raw["response"]
        _need(isinstance(resp, dict), f"{where}: response is not a mapping")
        status = resp.get("status")
        _need(isinstance(status, dict), f"{where}: response.status is missing")
        code, message = status.get("code"), status.get("message", "")
        _need(isinstance(code, int) and not isinstance(code, bool) and 100 <= code <= 999,
              f"{where}: response.status.code is not an HTTP status")
        body = resp.get("body")
        _need(isinstance(body, dict) and "string" in body, f"{where}: response.body.string is missing")
        sizes = body.get("chunk_sizes") or []
        _need(isinstance(sizes, list) and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                              for s in sizes), f"{where}: response.body.chunk_sizes is not a list of sizes")
        response = Response(code, str(message or ""), _headers(resp.get("headers"), f"{where}: response.headers"),
                            _as_bytes(body["string"], f"{where}: response.body.string"), tuple(sizes))
    error = None
    if raw.get("error") is not None:
        err = raw["error"]
        _need(isinstance(err, dict) and isinstance(err.get("type"), str), f"{where}: error.type is missing")
        error = Failure(err["type"], str(err.get("message") or ""))
    _need(response is not None or error is not None, f"{where} has neither a response nor an error")
    recorded_by = raw.get("recorded_by")
    return Interaction(request, response, error, recorded_by if isinstance(recorded_by, str) else owner)


def parse(text: bytes | str) -> list[Interaction]:
    """Interactions of a cassette's text; raises ``_Bad`` with the reason when it is not a valid cassette."""
    return parse_with_root(text)[0]


def parse_with_root(text: bytes | str) -> tuple[list[Interaction], str | None]:
    """The interactions and the API root path they were recorded under (None: not recorded)."""
    try:
        data = yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise _Bad(f"it is not valid YAML ({exc.problem or exc.context}{where})") from None
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError, MemoryError) as exc:
        raise _Bad(f"it is not valid YAML ({type(exc).__name__}: {str(exc)[:200]})") from None
    _need(isinstance(data, dict), "it is not a cassette (no top-level mapping)" if data is not None else "it is empty")
    _need(data.get("version") == VERSION,
          "it has no 'version: 1' at its end: the file is truncated or is not a cassette")
    raw = data.get("interactions")
    _need(isinstance(raw, list), "it has no list of interactions")
    root = data.get("root_path")
    _need(root is None or isinstance(root, str), "its root_path is not text")
    items = [_from_dict(item, n, None) for n, item in enumerate(raw)]
    if root:
        items = [replace(i, request=replace(i.request, root=root)) for i in items]
    return items, root


# -- loading, with a cache for cassettes shared by many tests ----------------------------------

@dataclass
class Cassette:
    path: Path
    interactions: list[Interaction]
    exists: bool = True
    root_path: str | None = None

    def queues(self, owner: str | None = None) -> dict[Key, deque[Interaction]]:
        """Per-key FIFO queues; in a shared cassette, the owner's own recordings come first."""
        items: Iterable[Interaction] = self.interactions
        if owner is not None and any(i.recorded_by for i in self.interactions):
            items = sorted(self.interactions, key=lambda i: i.recorded_by not in (None, owner))
        out: dict[Key, deque[Interaction]] = {}
        for item in items:
            out.setdefault(item.request.key, deque()).append(item)
        return out


_CACHE: dict[Path, tuple[tuple[int, int, int], Cassette]] = {}


def corrupt_message(path: str, reason: str, fix: str) -> str:
    return f"taotoken: cassette {path} cannot be replayed: {reason}. Fix: delete it and record it again: {fix}"


def load(path: Path, *, display: str | None = None, fix: str = "record it again") -> Cassette:
    """The cassette at ``path`` (empty when there is none); :class:`CassetteCorrupt` when unreadable."""
    shown = display or str(path)
    try:
        stat = path.stat()
    except FileNotFoundError:
        return Cassette(path, [], exists=False)
    except OSError as exc:
        raise CassetteCorrupt(corrupt_message(shown, f"it cannot be read ({exc.strerror})", fix)) from None
    signature = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
    cached = _CACHE.get(path)
    if cached is not None and cached[0] == signature:
        return cached[1]
    try:
        interactions, root_path = parse_with_root(path.read_bytes())
    except _Bad as exc:
        raise CassetteCorrupt(corrupt_message(shown, str(exc), fix)) from None
    except OSError as exc:
        raise CassetteCorrupt(corrupt_message(shown, f"it cannot be read ({exc.strerror})", fix)) from None
    cassette = Cassette(path, interactions, root_path=root_path)
    _CACHE[path] = (signature, cassette)
    return cassette


# -- writing -------------------------------------------------------------------------------------

def merge(old: Sequence[Interaction], new: Sequence[Interaction], owner: str) -> list[Interaction]:
    """``old`` with ``owner``'s interactions replaced by ``new``, in place, so a re-record diffs small."""
    out: list[Interaction] = []
    placed = False
    for item in old:
        if item.recorded_by == owner:
            if not placed:
                out.extend(new)
                placed = True
            continue
        out.append(item)
    if not placed:
        out.extend(new)
    return out


def write(path: Path, interactions: Sequence[Interaction], *, owner: str | None = None, shared: bool = False,
          display: str | None = None, lock_wait: float | None = None, root_path: str | None = None) -> int:
    """Write the cassette atomically under its lock file; in a shared cassette, merge with the other tests'.

    Returns the number of interactions in the file. Raises :class:`CassetteLocked` when another process
    holds the lock for the whole wait.
    """
    shown = display or str(path)
    try:
        os.makedirs(path.parent, exist_ok=True)
    except OSError as exc:
        raise CassetteUnwritable(
            f"taotoken: cassette {shown} was not written: its folder cannot be created ({exc.strerror or exc})."
            " Fix: point --taotoken-cassette-dir (or ini taotoken_cassette_dir) at a writable folder"
        ) from None
    try:
        with locked(path, owner or "", wait=lock_wait):
            _remove_leftovers(path)
            final = list(interactions)
            if shared and owner is not None:
                try:
                    old = parse(path.read_bytes())
                except (OSError, _Bad):
                    old = []  # none yet, or corrupt: recording is how a corrupt cassette gets repaired
                final = merge(old, interactions, owner)
            atomic_write_text(path, dumps(final, root_path))
            _CACHE.pop(path, None)
            return len(final)
    except LockBusy as exc:
        raise CassetteLocked(
            f"taotoken: cassette {shown} was not written: another process is writing it ({exc.holder}), and it"
            f" kept the lock {exc.lock.name} longer than the wait. The previous cassette is kept. Fix: run the tests"
            " that share this cassette in one worker (e.g. `@pytest.mark.xdist_group` with `--dist loadgroup`), or,"
            f" if no other pytest is running, delete {exc.lock}"
        ) from None


def _remove_leftovers(path: Path) -> None:
    """Temporary files of a writer killed mid-write (we hold the lock, so no live writer owns them)."""
    prefix = f".{path.name}."
    try:
        names = os.listdir(path.parent)
    except OSError:
        return
    for name in names:
        if name.startswith(prefix) and name.endswith(".tmp"):
            with contextlib.suppress(OSError):
                os.unlink(path.parent / name)
