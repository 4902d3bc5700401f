"""httpx clients built from the settings: API-root base URL, Bearer auth, timeout, retries, diagnosis.

Retries happen in ``send`` (not in a transport) so that environment proxies still apply and every
attempt passes through the recording layer. A failed exchange raises :class:`ExchangeFailed` with a
diagnosis, unless the request carries ``extensions={"taotoken.expect_error": True}`` (for checks that
provoke errors on purpose).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from .errors import ConfigError, ExchangeFailed
from .keys import mask_key
from .retry import RetryLog, decide
from .settings import Settings
from .urls import display_url, is_loopback

EXPECT_ERROR = "taotoken.expect_error"
RETRY_LOG = "taotoken.retry"
USER_AGENT = "pytest-taotoken/0.1"


@dataclass
class ClientStats:
    """Counters a test can read: ``client.stats.retries`` after a call, say."""

    requests: int = 0
    attempts: int = 0
    retries: int = 0
    waits: list[float] = field(default_factory=list)
    last: RetryLog | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, log: RetryLog) -> None:
        with self._lock:
            self.requests += 1
            self.attempts += log.attempts
            self.retries += log.retries
            self.waits.extend(log.waits)
            self.last = log


def _headers(settings: Settings) -> dict[str, str]:
    headers = {"User-Agent": USER_AGENT}
    if settings.api_key:
        headers["Authorization"] = f"Bearer {settings.api_key}"
    return headers


def check_transport_security(settings: Settings) -> None:
    """Refuse to send a key over plain http to a non-loopback host unless --taotoken-allow-http."""
    url = httpx.URL(settings.api_root)
    if url.scheme == "http" and not is_loopback(url.host) and not settings.allow_http and settings.api_key:
        raise ConfigError(
            f"base_url {display_url(settings.api_root)} (from {settings.source('base_url')}) uses http:// for a"
            " non-loopback host: the key would travel in clear. Fix: use https://, or pass --taotoken-allow-http"
            " if the network is trusted",
            field="base_url",
            source=settings.source("base_url"),
        )


def _client_kwargs(settings: Settings, kwargs: dict[str, Any]) -> dict[str, Any]:
    if settings.talks_to_endpoint:  # replay sends nothing over the network
        check_transport_security(settings)
    headers = _headers(settings)
    headers.update(kwargs.pop("headers", None) or {})
    return {
        "base_url": settings.api_root,
        "headers": headers,
        "timeout": httpx.Timeout(settings.timeout),
        **kwargs,
    }


def _diagnose_response(response: httpx.Response, settings: Settings, log: RetryLog) -> None:
    from .diagnosis import check_response

    check_response(response, settings, retry_log=log)


def _diagnose_exception(request: httpx.Request, exc: Exception, settings: Settings, log: RetryLog) -> ExchangeFailed:
    from .diagnosis import failure_for_exception

    return failure_for_exception(request, exc, settings, retry_log=log)


class _RetryMixin:
    settings: Settings
    stats: ClientStats
    sleep_enabled: bool

    def _init_taotoken(self, settings: Settings, sleep: bool | None) -> None:
        self.settings = settings
        self.stats = ClientStats()
        # In replay, retries do not sleep: the recorded server is not really rate-limiting.
        self.sleep_enabled = settings.mode != "replay" if sleep is None else sleep

    def _expects_error(self, request: httpx.Request) -> bool:
        return bool(request.extensions.get(EXPECT_ERROR))

    def _after_error(self, request: httpx.Request, exc: httpx.TransportError, log: RetryLog) -> float:
        """The wait before the next attempt; raises when the error ends the exchange (diagnosed)."""
        log.statuses.append(None)
        decision = decide(None, {}, log.attempts - 1, self.settings.max_retries) if _retryable_exc(exc) else None
        if decision is not None and decision.retry:
            return decision.wait
        log.stop_reason = decision.reason if decision else ""
        self.stats.add(log)
        if self._expects_error(request):
            raise exc
        raise _diagnose_exception(request, exc, self.settings, log) from exc

    def _after_response(self, response: httpx.Response, log: RetryLog) -> float | None:
        """The wait before retrying, or None when this response is the answer."""
        log.statuses.append(response.status_code)
        decision = decide(response.status_code, response.headers, log.attempts - 1, self.settings.max_retries)
        if decision.retry:
            return decision.wait
        log.stop_reason = decision.reason
        return None

    def _must_read(self, request: httpx.Request, response: httpx.Response, kwargs: dict[str, Any]) -> bool:
        """A streamed reply is read (and diagnosed) only when it failed: a good stream is the caller's."""
        return not kwargs.get("stream") or (response.status_code >= 400 and not self._expects_error(request))

    def _finish(self, request: httpx.Request, response: httpx.Response, log: RetryLog, *, read: bool) -> None:
        response.extensions[RETRY_LOG] = log  # type: ignore[index]
        self.stats.add(log)
        if read and not self._expects_error(request):
            _diagnose_response(response, self.settings, log)


class TaoTokenClient(_RetryMixin, httpx.Client):
    """``httpx.Client`` with the plugin's retry policy, stats and diagnosis."""

    def __init__(self, settings: Settings, *, sleep: bool | None = None, **kwargs: Any) -> None:
        super().__init__(**_client_kwargs(settings, kwargs))
        self._init_taotoken(settings, sleep)
        self._sleep: Callable[[float], None] = time.sleep

    def __repr__(self) -> str:
        return f"<TaoTokenClient {display_url(self.settings.api_root)} key={mask_key(self.settings.api_key)}>"

    def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:  # type: ignore[override]
        log = RetryLog()
        while True:
            log.attempts += 1
            try:
                response = super().send(request, **kwargs)
            except httpx.TransportError as exc:
                self._wait(log, self._after_error(request, exc, log))
                continue
            wait = self._after_response(response, log)
            if wait is not None:
                response.close()
                self._wait(log, wait)
                continue
            read = self._must_read(request, response, kwargs)
            if read:
                response.read()
            elif not self._expects_error(request):
                response.stream = _DiagnosedStream(response.stream, request, self.settings, log, _idle_watch(response))
            self._finish(request, response, log, read=read)
            return response

    def _wait(self, log: RetryLog, seconds: float) -> None:
        log.waits.append(seconds)
        if self.sleep_enabled and seconds > 0:
            self._sleep(seconds)


class TaoTokenAsyncClient(_RetryMixin, httpx.AsyncClient):
    """``httpx.AsyncClient`` with the plugin's retry policy, stats and diagnosis."""

    def __init__(self, settings: Settings, *, sleep: bool | None = None, **kwargs: Any) -> None:
        super().__init__(**_client_kwargs(settings, kwargs))
        self._init_taotoken(settings, sleep)

    def __repr__(self) -> str:
        return f"<TaoTokenAsyncClient {display_url(self.settings.api_root)} key={mask_key(self.settings.api_key)}>"

    async def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:  # type: ignore[override]
        log = RetryLog()
        while True:
            log.attempts += 1
            try:
                response = await super().send(request, **kwargs)
            except httpx.TransportError as exc:
                await self._wait(log, self._after_error(request, exc, log))
                continue
            wait = self._after_response(response, log)
            if wait is not None:
                await response.aclose()
                await self._wait(log, wait)
                continue
            read = self._must_read(request, response, kwargs)
            if read:
                await response.aread()
            elif not self._expects_error(request):
                response.stream = _DiagnosedAsyncStream(response.stream, request, self.settings, log,
                                                        _idle_watch(response))
            self._finish(request, response, log, read=read)
            return response

    async def _wait(self, log: RetryLog, seconds: float) -> None:
        log.waits.append(seconds)
        if self.sleep_enabled and seconds > 0:
            await asyncio.sleep(seconds)


_DIAGNOSED_TYPES: dict[type[httpx.TransportError], type[ExchangeFailed]] = {}


def _diagnosed_type(cls: type[httpx.TransportError]) -> type[ExchangeFailed]:
    """An ``ExchangeFailed`` that is also the httpx error it stands for (same name): pytest shows the diagnosis,
    and code that catches ``httpx.TransportError`` mid-stream (a retry loop) still catches it."""
    found = _DIAGNOSED_TYPES.get(cls)
    if found is None:
        found = _DIAGNOSED_TYPES[cls] = type(cls.__name__, (ExchangeFailed, cls), {"__module__": ExchangeFailed.__module__})
    return found


def _stream_failure(exc: httpx.TransportError, request: httpx.Request, settings: Settings,
                    log: RetryLog) -> ExchangeFailed:
    failure = _diagnose_exception(request, exc, settings, log)
    both = _diagnosed_type(type(exc))(str(failure), diagnosis=failure.diagnosis)
    both.request = request  # type: ignore[attr-defined]  # httpx's errors carry the request
    return both


class _IdleWatch:
    """Ends an event stream that sends only keep-alive comments for longer than the timeout.

    Each comment resets httpx's read timeout, so a gateway that sends ``: keep-alive`` while the model never
    answers would otherwise hold the stream, and the run, open forever.
    """

    def __init__(self, timeout: float, request: httpx.Request) -> None:
        from .sse import SSEParser

        self._parser = SSEParser()
        self._timeout, self._request = timeout, request
        self._last = time.monotonic()

    def feed(self, chunk: bytes) -> None:
        if self._parser.feed(chunk):
            self._last = time.monotonic()
        elif time.monotonic() - self._last > self._timeout:
            raise httpx.ReadTimeout(f"no event for {self._timeout:g} s, only keep-alive comments", request=self._request)


def _idle_watch(response: httpx.Response) -> _IdleWatch | None:
    if "text/event-stream" not in response.headers.get("content-type", ""):
        return None
    timeout = response.request.extensions.get("timeout", {}).get("read")
    return _IdleWatch(float(timeout), response.request) if isinstance(timeout, (int, float)) else None


class _DiagnosedStream(httpx.SyncByteStream):
    """A streamed body whose transport errors (a stall past the timeout, a reset mid-stream, keep-alives and
    nothing else) raise the diagnosis, as every other failed exchange does, instead of a bare httpx error."""

    def __init__(self, inner: Any, request: httpx.Request, settings: Settings, log: RetryLog,
                 idle: _IdleWatch | None = None) -> None:
        self._inner, self._request, self._settings, self._log, self._idle = inner, request, settings, log, idle

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self._inner:
                if self._idle is not None:
                    self._idle.feed(chunk)
                yield chunk
        except httpx.TransportError as exc:
            raise _stream_failure(exc, self._request, self._settings, self._log) from exc

    def close(self) -> None:
        self._inner.close()


class _DiagnosedAsyncStream(httpx.AsyncByteStream):
    """The async twin of :class:`_DiagnosedStream`."""

    def __init__(self, inner: Any, request: httpx.Request, settings: Settings, log: RetryLog,
                 idle: _IdleWatch | None = None) -> None:
        self._inner, self._request, self._settings, self._log, self._idle = inner, request, settings, log, idle

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                if self._idle is not None:
                    self._idle.feed(chunk)
                yield chunk
        except httpx.TransportError as exc:
            raise _stream_failure(exc, self._request, self._settings, self._log) from exc

    async def aclose(self) -> None:
        await self._inner.aclose()


def _retryable_exc(exc: httpx.TransportError) -> bool:
    """Connection-level failures are retried; timeouts waiting for an answer are not."""
    return isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError,
                            httpx.WriteError))


def build_client(settings: Settings, **kwargs: Any) -> TaoTokenClient:
    return TaoTokenClient(settings, **kwargs)


def build_async_client(settings: Settings, **kwargs: Any) -> TaoTokenAsyncClient:
    return TaoTokenAsyncClient(settings, **kwargs)
