"""Hardening: no fault hangs a run.

Every fault ends within the configured timeout plus the capped retry budget, with the right diagnosis:
a server that never answers (the fault gateway's ``hang``, and a socket nobody ever accepts on), headers
then a stall mid-body, an SSE stream that stalls between chunks, a reset mid-body and mid-stream, an
endless stream of 429 (Retry-After small, 99999, negative, garbage) and of 5xx. Each is driven through
the plugin's sync and async clients, buffered and streamed, with a real sleep (live mode).

The wall-clock bounds are generous on purpose: they only catch a hang, never measure speed.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from pytest_taotoken.client import build_async_client, build_client
from pytest_taotoken.errors import ExchangeFailed
from pytest_taotoken.retry import BACKOFF_BASE_S, BACKOFF_MAX_S, MAX_WAIT_S
from pytest_taotoken.settings import Settings, resolve_settings
from pytest_taotoken.sse import aassemble, assemble
from pytest_taotoken.testing import FakeGateway, Scenario

KEY = "sk-test-fake-0000000000001a2b"
TIMEOUT = 0.5
MAX_RETRIES = 2
SLACK_S = 5.0  # generous: only a hang exceeds it


@dataclass(frozen=True)
class Fault:
    scenario: Scenario
    stream: bool
    category: str
    phrase: str  # what the diagnosis must say
    requests: int = 1  # what the server sees: 1 + MAX_RETRIES when retried (a timeout is not: it would multiply)
    retry_after: float = 0.0  # what the server asks to wait per retry (0: backoff or no retry)


FAULTS: dict[str, Fault] = {
    "hang": Fault(Scenario.of("hang", stall_s=30), False, "timeout", "0.5 s (read)"),
    "stall_body": Fault(Scenario.of("stall_body", stall_s=30), False, "timeout", "0.5 s (read)"),
    "slow": Fault(Scenario.of("slow", slow_s=30), False, "timeout", "0.5 s (read)"),
    "stream_stall": Fault(Scenario.of("stream_stall", stall_s=30), True, "timeout", "0.5 s (read)"),
    "reset": Fault(Scenario.of("reset"), False, "connection", "drops connections", requests=3),
    "stream_reset": Fault(Scenario.of("stream_reset"), True, "stream", "connection broke mid-stream"),
    "rate_limited_forever": Fault(Scenario.of("rate_limited", retry_after=0.2), False, "rate_limit",
                                  "gave up after 2 retries", requests=3, retry_after=0.2),
    "retry_after_huge": Fault(Scenario.of("retry_after_huge"), False, "rate_limit", "99999"),
    "retry_after_negative": Fault(Scenario.of("retry_after_negative"), False, "rate_limit", "negative"),
    "retry_after_garbage": Fault(Scenario.of("retry_after_garbage"), False, "rate_limit", "neither seconds nor"),
    "server_error_forever": Fault(Scenario.of("server_error"), False, "server_error", "gave up after 2 retries",
                                  requests=3),
    "bad_gateway_forever": Fault(Scenario.of("bad_gateway_html"), False, "server_error", "gave up after 2 retries",
                                 requests=3),
}


def budget(fault: Fault) -> float:
    """The most a fault may take: every attempt up to the timeout, plus every capped wait between them."""
    attempts = MAX_RETRIES + 1
    backoffs = sum(min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2**a) for a in range(MAX_RETRIES))
    waits = min(fault.retry_after, MAX_WAIT_S) * MAX_RETRIES if fault.retry_after else backoffs
    return attempts * TIMEOUT + waits


def bound(fault: Fault) -> float:
    return 2 * budget(fault) + SLACK_S


def make_settings(gw: FakeGateway) -> Settings:
    return resolve_settings({"base_url": gw.base_url, "timeout": TIMEOUT, "max_retries": MAX_RETRIES}, {},
                            {"TAOTOKEN_API_KEY": KEY}, mode="live")


def body(fault: Fault) -> dict[str, Any]:
    return {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
            "stream": fault.stream}


def check(fault: Fault, exc: ExchangeFailed, elapsed: float, *, streamed: bool = True) -> None:
    diagnosis = exc.diagnosis
    assert diagnosis is not None and diagnosis.category == fault.category, str(exc)
    if fault.stream and streamed:  # broken mid-stream: still the httpx error that callers' retry loops catch
        assert isinstance(exc, httpx.TransportError)
    assert fault.phrase in diagnosis.message(), diagnosis.message()
    assert elapsed < bound(fault), f"took {elapsed:.1f} s, budget {budget(fault):.1f} s: {diagnosis.summary}"


@pytest.fixture(params=sorted(FAULTS))
def fault(request: pytest.FixtureRequest) -> Iterator[tuple[Fault, FakeGateway]]:
    spec = FAULTS[request.param]
    with FakeGateway(spec.scenario) as gw:
        yield spec, gw


def test_every_fault_ends_in_time_with_its_diagnosis_sync(fault: tuple[Fault, FakeGateway]) -> None:
    spec, gw = fault
    start = time.monotonic()
    with build_client(make_settings(gw)) as client, pytest.raises(ExchangeFailed) as info:
        if spec.stream:
            with client.stream("POST", "v1/chat/completions", json=body(spec)) as response:
                assemble(response.iter_bytes())
        else:
            client.post("v1/chat/completions", json=body(spec))
    check(spec, info.value, time.monotonic() - start)
    assert len(gw.requests) == spec.requests


def test_every_fault_ends_in_time_with_its_diagnosis_async(fault: tuple[Fault, FakeGateway]) -> None:
    spec, gw = fault

    async def go() -> None:
        async with build_async_client(make_settings(gw)) as client:
            if spec.stream:
                async with client.stream("POST", "v1/chat/completions", json=body(spec)) as response:
                    await aassemble(response.aiter_bytes())
            else:
                await client.post("v1/chat/completions", json=body(spec))

    start = time.monotonic()
    with pytest.raises(ExchangeFailed) as info:
        asyncio.run(go())
    check(spec, info.value, time.monotonic() - start)
    assert len(gw.requests) == spec.requests


def test_the_buffered_read_of_a_stream_fault_is_diagnosed_too() -> None:
    """``stream: true`` read in one go (no ``client.stream``): the same stall ends the same way."""
    spec = FAULTS["stream_stall"]
    with FakeGateway(spec.scenario) as gw, build_client(make_settings(gw)) as client:
        start = time.monotonic()
        with pytest.raises(ExchangeFailed) as info:
            client.post("v1/chat/completions", json=body(spec))
    check(spec, info.value, time.monotonic() - start, streamed=False)


def test_a_socket_that_is_never_accepted_times_out() -> None:
    """The kernel completes the handshake, nobody ever reads: the request still ends at the timeout."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # never accept()
        port = listener.getsockname()[1]
        cfg = resolve_settings({"base_url": f"http://127.0.0.1:{port}/api", "timeout": TIMEOUT,
                                "max_retries": MAX_RETRIES}, {}, {"TAOTOKEN_API_KEY": KEY}, mode="live")
        start = time.monotonic()
        with build_client(cfg) as client, pytest.raises(ExchangeFailed) as info:
            client.post("v1/chat/completions", json={"model": "m", "messages": []})
        elapsed = time.monotonic() - start
    assert info.value.diagnosis.category == "timeout", str(info.value)
    assert elapsed < 2 * (MAX_RETRIES + 1) * TIMEOUT + SLACK_S


class KeepAliveForever:
    """An event stream that sends one chunk, then only ``: keep-alive`` comments every 0.1 s, until stopped.

    Each comment resets the read timeout: without the plugin's idle watch, a client would wait forever.
    """

    def __init__(self) -> None:
        stop = self.stop = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                first = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
                         b'"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}\n\n')
                try:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(first), first))
                    while not stop.wait(0.1):
                        self.wfile.write(b"e\r\n: keep-alive\n\n\r\n")
                        self.wfile.flush()
                except OSError:
                    pass
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/api"

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_stream_of_keep_alives_and_nothing_else_ends_at_the_timeout(mode: str) -> None:
    with KeepAliveForever() as base_url:
        cfg = resolve_settings({"base_url": base_url, "timeout": TIMEOUT, "max_retries": MAX_RETRIES}, {},
                               {"TAOTOKEN_API_KEY": KEY}, mode="live")
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}

        async def go_async() -> None:
            async with build_async_client(cfg) as client, client.stream("POST", "v1/chat/completions", json=body) as r:
                await aassemble(r.aiter_bytes())

        start = time.monotonic()
        with pytest.raises(ExchangeFailed) as info:
            if mode == "async":
                asyncio.run(go_async())
            else:
                with build_client(cfg) as client, client.stream("POST", "v1/chat/completions", json=body) as r:
                    assemble(r.iter_bytes())
        elapsed = time.monotonic() - start
    assert info.value.diagnosis.category == "timeout", str(info.value)
    assert "only keep-alive comments" in str(info.value)
    assert isinstance(info.value, httpx.ReadTimeout)  # code that catches httpx's timeouts still catches it
    assert elapsed < TIMEOUT + SLACK_S


def test_the_suite_against_a_hanging_gateway_ends_with_timeouts(pytester: pytest.Pytester,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole bundled suite against a gateway that never answers: bounded, every failure a timeout."""
    for name in ("TAOTOKEN_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_BASE", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                 "http_proxy", "https_proxy", "all_proxy", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TAOTOKEN_API_KEY", KEY)
    report = pytester.path / "report.json"
    with FakeGateway("hang", stall_s=30) as gw:
        start = time.monotonic()
        result = pytester.runpytest("--taotoken-suite", "--taotoken-live", f"--taotoken-base-url={gw.base_url}",
                                    "--taotoken-models=fake-model", "--taotoken-timeout=0.3", "--taotoken-samples=2",
                                    f"--taotoken-report={report}", "-p", "no:cacheprovider")
        elapsed = time.monotonic() - start
    data = json.loads(report.read_text())
    checks = {c["check"]: c for c in data["checks"]}
    assert len(checks) == 12
    assert checks["chat.basic"]["category"] == "timeout", checks["chat.basic"]
    assert checks["chat.stream"]["category"] == "timeout", checks["chat.stream"]
    assert {c["outcome"] for c in checks.values()} <= {"failed", "skipped"}
    assert "INTERNALERROR" not in result.stdout.str()
    # 12 checks, a few requests each, none retried (a timeout is not): far below this unless something hangs.
    assert elapsed < 60, elapsed
