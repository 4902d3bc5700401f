"""Answer httpx requests from a cassette, or send them and record what comes back, chunk by chunk.

The patch sits on ``HTTPTransport.handle_request`` and ``AsyncHTTPTransport.handle_async_request``
(of ``httpx``, and of ``httpx2`` when it is installed, which the openai SDK v3 uses). Every attempt a
client makes, retries included, passes there, whichever client or SDK built the request. Custom
transports (``MockTransport``, ASGI apps) are left alone: a test that brings its own transport does
not talk to the endpoint.

The patch is installed while at least one :class:`Recorder` is active and removed after; the
innermost active recorder answers.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import json
import sys
import threading
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Literal

from ._cassette import (
    Cassette,
    Failure,
    Interaction,
    Key,
    MissingRecording,
    Request,
    Response,
    body_model,
    canonical_body,
    match_key,
    path_of,
)
from ._scrub import Scrubber
from .keys import redact

Mode = Literal["replay", "record"]
_STREAMED_TYPES = ("text/event-stream", "application/x-ndjson", "application/jsonl", "application/json-seq")

_STACK: list[Recorder] = []
_GUARD = threading.Lock()
_SAVED: list[tuple[type, str, Any]] = []


@functools.cache
def _httpx2_installed() -> bool:
    return importlib.util.find_spec("httpx2") is not None


def _modules() -> list[Any]:
    mods = [importlib.import_module("httpx")]
    if "httpx2" in sys.modules or _httpx2_installed():
        with contextlib.suppress(ImportError):
            mods.append(importlib.import_module("httpx2"))
    return mods


def _install() -> None:
    for mod in _modules():
        sync_cls, async_cls = mod.HTTPTransport, mod.AsyncHTTPTransport
        orig_sync, orig_async = sync_cls.handle_request, async_cls.handle_async_request

        def handle_request(self: Any, request: Any, _orig: Any = orig_sync, _mod: Any = mod) -> Any:
            rec = _STACK[-1] if _STACK else None
            if rec is None:
                return _orig(self, request)
            return rec.handle(_mod, request, lambda: _orig(self, request))

        async def handle_async_request(self: Any, request: Any, _orig: Any = orig_async, _mod: Any = mod) -> Any:
            rec = _STACK[-1] if _STACK else None
            if rec is None:
                return await _orig(self, request)
            return await rec.ahandle(_mod, request, lambda: _orig(self, request))

        _SAVED.append((sync_cls, "handle_request", orig_sync))
        _SAVED.append((async_cls, "handle_async_request", orig_async))
        sync_cls.handle_request = handle_request
        async_cls.handle_async_request = handle_async_request


def _uninstall() -> None:
    while _SAVED:
        cls, name, orig = _SAVED.pop()
        setattr(cls, name, orig)


def activate(recorder: Recorder) -> None:
    with _GUARD:
        if not _STACK:
            _install()
        _STACK.append(recorder)


def deactivate(recorder: Recorder) -> None:
    with _GUARD:
        for n in range(len(_STACK) - 1, -1, -1):
            if _STACK[n] is recorder:
                del _STACK[n]
                break
        if not _STACK:
            _uninstall()


# -- streams ---------------------------------------------------------------------------------------

class _ReplayStream:
    """The recorded chunks, then the recorded transport error if the exchange ended in one."""

    def __init__(self, chunks: list[bytes], error: Callable[[], Exception] | None) -> None:
        self._chunks = chunks
        self._error = error

    def __iter__(self) -> Iterator[bytes]:
        yield from self._chunks
        if self._error is not None:
            raise self._error()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk
        if self._error is not None:
            raise self._error()

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


class _TapStream:
    """Passes the server's chunks through unchanged and hands a copy of each to the recorder."""

    def __init__(self, inner: Any, tap: _Tap) -> None:
        self._inner = inner
        self._tap = tap

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self._inner:
                self._tap.feed(chunk)
                yield chunk
        except Exception as exc:
            self._tap.finish(exc)
            raise
        self._tap.finish(None)

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._tap.finish(None)


class _AsyncTapStream(_TapStream):
    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                self._tap.feed(chunk)
                yield chunk
        except Exception as exc:
            self._tap.finish(exc)
            raise
        self._tap.finish(None)

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            self._tap.finish(None)


@functools.cache
def _stream_types(mod: Any) -> tuple[Any, Any, Any]:
    """The stream classes, based on this httpx module's own stream types (its isinstance checks need that)."""
    replay = type("ReplayStream", (_ReplayStream, mod.SyncByteStream, mod.AsyncByteStream), {})
    tap = type("TapStream", (_TapStream, mod.SyncByteStream), {})
    atap = type("AsyncTapStream", (_AsyncTapStream, mod.AsyncByteStream), {})
    return replay, tap, atap


# -- recording one exchange --------------------------------------------------------------------

def _header_pairs(raw: Any) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw]


class _Tap:
    """One response being recorded: its chunks, decoded from gzip/deflate so the cassette stays readable."""

    def __init__(self, recorder: Recorder, request: Request, status: int, reason: str,
                 headers: list[tuple[str, str]]) -> None:
        self.recorder = recorder
        self.request = request
        self.status, self.reason, self.headers = status, reason, headers
        self.raw: list[bytes] = []
        self.decoded: list[bytes] | None = None
        self._decoder: Any = None
        encodings = [e.strip().lower() for h, v in headers if h.lower() == "content-encoding" for e in v.split(",")]
        encodings = [e for e in encodings if e and e != "identity"]
        if encodings and all(e in ("gzip", "x-gzip", "deflate") for e in encodings) and len(encodings) == 1:
            self._decoder = zlib.decompressobj(zlib.MAX_WBITS | 32)
            self.decoded = []
        self.interaction: Interaction | None = None
        self._lock = threading.Lock()

    def feed(self, chunk: bytes) -> None:
        self.raw.append(chunk)
        if self.decoded is not None:
            try:
                self.decoded.append(self._decoder.decompress(chunk))
            except zlib.error:
                self.decoded = None

    def finish(self, error: BaseException | None) -> None:
        with self._lock:
            if self.interaction is not None:
                return
            failure = None
            if error is not None:
                failure = Failure(type(error).__name__, self.recorder.scrubber.text(str(error)))
                self.recorder.stream_errors.append(f"{self.request.method} {self.request.uri}: {failure.type}")
            self.interaction = self._build(failure)

    def _build(self, failure: Failure | None) -> Interaction:
        scrub = self.recorder.scrubber
        chunks = self.raw
        headers = self.headers
        if self.decoded is not None:
            tail: bytes | None = b""
            if failure is None:
                try:
                    tail = self._decoder.flush()
                except zlib.error:
                    tail = None
            if tail is not None:
                chunks = [*self.decoded, tail]
                headers = [(h, v) for h, v in headers if h.lower() != "content-encoding"]
        chunks = [c for c in chunks if c]
        body = scrub.data(b"".join(chunks))
        sizes: tuple[int, ...] = ()
        ctype = next((v for h, v in headers if h.lower() == "content-type"), "").lower()
        if len(chunks) > 1 and any(t in ctype for t in _STREAMED_TYPES):
            scrubbed = [scrub.data(c) for c in chunks]
            if b"".join(scrubbed) == body:
                sizes = tuple(len(c) for c in scrubbed)
        headers = [(h, str(len(body)) if h.lower() == "content-length" else v) for h, v in headers]
        out: dict[str, list[str]] = scrub.headers(headers)
        response = Response(self.status, self.reason, out, body, sizes)
        return Interaction(self.request, response, failure, self.recorder.owner)


# -- the recorder --------------------------------------------------------------------------------

class Recorder:
    """Answers (replay) or records (record) the requests of one cassette use."""

    def __init__(self, mode: Mode, scrubber: Scrubber, cassette: Cassette, *, owner: str | None = None,
                 shared: bool = False, display: str = "", command: str = "", root: str = "") -> None:
        self.mode = mode
        # Paths are matched below the API root, when the cassette says which root it was recorded under.
        self.root = root if cassette.root_path is not None else ""
        self.scrubber = scrubber
        self.cassette = cassette
        self.owner = owner if shared else None
        self.display = display or str(cassette.path)
        self.command = command
        self.misses: list[MissingRecording] = []
        self.stream_errors: list[str] = []
        self.replayed = 0
        self._lock = threading.Lock()
        self._queues = cassette.queues(owner) if mode == "replay" else {}
        self._counts = {k: len(q) for k, q in self._queues.items()}
        self._recorded: list[Interaction | _Tap] = []

    # replay ----------------------------------------------------------------------------------------
    def handle(self, mod: Any, request: Any, send: Callable[[], Any]) -> Any:
        body = request.read()
        if self.mode == "replay":
            return self._replay(mod, request, body)
        try:
            response = send()
        except mod.TransportError as exc:
            self._record_error(request, body, exc)
            raise
        return self._record(mod, request, body, response, asynchronous=False)

    async def ahandle(self, mod: Any, request: Any, send: Callable[[], Awaitable[Any]]) -> Any:
        body = await request.aread()
        if self.mode == "replay":
            return self._replay(mod, request, body)
        try:
            response = await send()
        except mod.TransportError as exc:
            self._record_error(request, body, exc)
            raise
        return self._record(mod, request, body, response, asynchronous=True)

    def _replay(self, mod: Any, request: Any, body: bytes) -> Any:
        scrub = self.scrubber
        key = match_key(request.method, scrub.text(str(request.url)), scrub.data(body), self.root)
        with self._lock:
            queue = self._queues.get(key)
            item = queue.popleft() if queue else None
            if item is not None:
                self.replayed += 1
        if item is None:
            full = path_of(scrub.text(str(request.url)))
            miss = MissingRecording(redact(self._miss_message(key, scrub.data(body), full)))
            with self._lock:
                self.misses.append(miss)
            raise miss

        failure = item.error

        def error() -> Exception:
            assert failure is not None
            cls = getattr(mod, failure.type, None)
            if not (isinstance(cls, type) and issubclass(cls, mod.TransportError)):
                cls = mod.TransportError
            exc: Exception = cls(failure.message, request=request)
            return exc

        if item.response is None:
            raise error()
        resp = item.response
        replay_stream, _, _ = _stream_types(mod)
        return mod.Response(
            resp.status,
            headers=[(k, v) for k, values in resp.headers.items() for v in values],
            stream=replay_stream(resp.chunks(), error if failure is not None else None),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": resp.reason.encode("latin-1", "replace")},
        )

    def _miss_message(self, key: Key, body: bytes, full_path: str | None = None) -> str:
        method, path, _ = key
        path = full_path or path  # the request's own path, not the one below the API root
        model = body_model(body)
        what = f"{method} {path}" + (f' (model "{model}")' if model else "")
        if not self.cassette.exists:
            reason = "the cassette does not exist"
        elif self._counts.get(key):
            n = self._counts[key]
            reason = (f"its {n} recording{'s' if n > 1 else ''} of this request {'were' if n > 1 else 'was'} all"
                      " replayed already (the test now sends it more often than when it was recorded)")
        else:
            same = [i for i in self.cassette.interactions if i.request.key[:2] == key[:2]]
            if same:
                reason = (f"it holds {len(same)} recording{'s' if len(same) > 1 else ''} of {method} {path}, none"
                          " with this body")
                nearest = _nearest_difference([i.request.body for i in same], body)
                if nearest:
                    reason += f"; the nearest differs at {nearest}"
            else:
                reason = f"it holds no recording of {method} {path}"
        return f"taotoken: no recording of {what} in cassette {self.display}: {reason}.\nRecord it with: {self.command}"

    # record ------------------------------------------------------------------------------------
    def _snapshot(self, request: Any, body: bytes) -> Request:
        scrub = self.scrubber
        return Request(request.method, scrub.text(str(request.url)), scrub.data(body),
                       scrub.headers(_header_pairs(request.headers.raw)))

    def _record_error(self, request: Any, body: bytes, exc: BaseException) -> None:
        failure = Failure(type(exc).__name__, self.scrubber.text(str(exc)))
        item = Interaction(self._snapshot(request, body), None, failure, self.owner)
        with self._lock:
            self._recorded.append(item)

    def _record(self, mod: Any, request: Any, body: bytes, response: Any, *, asynchronous: bool) -> Any:
        reason = response.extensions.get("reason_phrase", b"")
        reason = reason.decode("latin-1") if isinstance(reason, bytes) else str(reason or "")
        tap = _Tap(self, self._snapshot(request, body), response.status_code, reason,
                   _header_pairs(response.headers.raw))
        with self._lock:
            self._recorded.append(tap)
        _, tap_stream, atap_stream = _stream_types(mod)
        response.stream = (atap_stream if asynchronous else tap_stream)(response.stream, tap)
        return response

    def recorded(self) -> list[Interaction]:
        """Everything recorded so far, in the order the responses arrived (unread bodies as far as read)."""
        with self._lock:
            items = list(self._recorded)
        out: list[Interaction] = []
        for item in items:
            if isinstance(item, _Tap):
                item.finish(None)
                assert item.interaction is not None
                out.append(item.interaction)
            else:
                out.append(item)
        return out


def _nearest_difference(candidates: list[bytes], body: bytes) -> str:
    """Where the closest recorded body first differs from the one sent (``$.messages[0].content: ...``)."""
    try:
        sent = json.loads(body) if body else None
    except (ValueError, RecursionError):
        return ""
    best: list[str] | None = None
    for raw in candidates[:50]:
        try:
            recorded = json.loads(raw) if raw else None
        except (ValueError, RecursionError):
            continue
        diffs: list[str] = []
        _diff(recorded, sent, "$", diffs)
        if diffs and (best is None or len(diffs) < len(best)):
            best = diffs
    if not best:
        return ""
    more = f" (and {len(best) - 1} more)" if len(best) > 1 else ""
    return best[0] + more


def _short(value: Any) -> str:
    text = canonical_body(json.dumps(value).encode()) if not isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _diff(a: Any, b: Any, path: str, out: list[str], limit: int = 20) -> None:
    if len(out) >= limit:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            sub = f"{path}.{k}"
            if k not in a:
                out.append(f"{sub}: not recorded, sent {_short(b[k])}")
            elif k not in b:
                out.append(f"{sub}: recorded {_short(a[k])}, not sent")
            else:
                _diff(a[k], b[k], sub, out, limit)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for n, (x, y) in enumerate(zip(a, b, strict=False)):
            _diff(x, y, f"{path}[{n}]", out, limit)
    elif a != b or type(a) is not type(b):
        out.append(f"{path}: recorded {_short(a)}, sent {_short(b)}")
