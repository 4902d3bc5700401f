"""The plugin's clients against a real server on 127.0.0.1: retries, Retry-After forms, the cap, stats."""

from __future__ import annotations

import asyncio
import socket
import time

import httpx
import pytest

from pytest_taotoken.client import RETRY_LOG, build_async_client, build_client
from pytest_taotoken.errors import ConfigError, ExchangeFailed
from pytest_taotoken.retry import RetryLog
from pytest_taotoken.settings import Settings, resolve_settings
from pytest_taotoken.testing import FakeGateway, Scenario

KEY = "sk-test-fake-0000000000001a2b"
BODY = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def settings_for(base_url: str, **cli: str) -> Settings:
    return resolve_settings({"base_url": base_url, **cli}, {}, {"TAOTOKEN_API_KEY": KEY}, mode="live")


def limited(fmt: str, value: float | str = 0.05) -> Scenario:
    return Scenario.of("rate_limited", retry_after=value, retry_after_format=fmt)  # type: ignore[arg-type]


def test_each_retry_after_form_is_honoured_then_success() -> None:
    script = [limited("absent"), Scenario.of("server_error", status=503), limited("seconds"), limited("ms"),
              limited("date", 1), "ok"]
    with FakeGateway(script=script) as gw, build_client(settings_for(gw.base_url, max_retries="5")) as client:
        start = time.perf_counter()
        response = client.post("v1/chat/completions", json=BODY)
        elapsed = time.perf_counter() - start
    assert response.status_code == 200
    log: RetryLog = response.extensions[RETRY_LOG]
    assert log.attempts == 6 and log.statuses == [429, 503, 429, 429, 429, 200]
    assert 0.25 <= log.waits[0] <= 0.5 and 0.5 <= log.waits[1] <= 1.0  # exponential backoff with jitter
    assert log.waits[2] == pytest.approx(0.05) and log.waits[3] == pytest.approx(0.05)
    assert 0.0 <= log.waits[4] <= 1.0  # an HTTP date has one-second resolution
    assert elapsed >= sum(log.waits) * 0.9  # the waits were really slept
    assert client.stats.retries == 5 and client.stats.requests == 1
    assert len(gw.requests) == 6
    assert all(r.header("authorization") == f"Bearer {KEY}" for r in gw.requests)


def test_retries_stop_at_max_retries_with_a_rate_limit_diagnosis() -> None:
    with FakeGateway("rate_limited", retry_after=0.01) as gw, build_client(settings_for(gw.base_url)) as client, \
            pytest.raises(ExchangeFailed) as info:
        client.post("v1/chat/completions", json=BODY)
    assert len(gw.requests) == 3  # 1 + max_retries=2
    assert client.stats.retries == 2
    assert "rate_limit" in str(info.value)
    assert KEY not in str(info.value)


@pytest.mark.parametrize(("scenario", "reason"), [
    ("retry_after_huge", "above the 60 s cap"),
    ("retry_after_garbage", "neither seconds nor an HTTP date"),
    ("retry_after_negative", "negative"),
])
def test_capped_or_garbage_retry_after_is_not_retried(scenario: str, reason: str) -> None:
    with FakeGateway(scenario) as gw, build_client(settings_for(gw.base_url)) as client, \
            pytest.raises(ExchangeFailed) as info:
        client.post("v1/chat/completions", json=BODY)
    assert len(gw.requests) == 1
    assert reason in client.stats.last.stop_reason  # type: ignore[union-attr]
    assert reason in str(info.value)


def test_connection_errors_are_retried() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with build_client(settings_for(f"http://127.0.0.1:{port}/api", max_retries="2")) as client:
        client._sleep = lambda _: None
        with pytest.raises(ExchangeFailed) as info:
            client.get("v1/models")
    assert client.stats.attempts == 3
    assert isinstance(info.value.__cause__, httpx.ConnectError)


def test_expected_errors_come_back_as_responses() -> None:
    with FakeGateway("unauthorized") as gw, build_client(settings_for(gw.base_url)) as client:
        response = client.post("v1/chat/completions", json=BODY, extensions={"taotoken.expect_error": True})
    assert response.status_code == 401


def test_async_client_retries_the_same_way() -> None:
    async def run(gw: FakeGateway) -> tuple[int, int]:
        async with build_async_client(settings_for(gw.base_url)) as client:
            response = await client.post("v1/chat/completions", json=BODY)
            return response.status_code, client.stats.retries

    with FakeGateway(script=[limited("ms", 0.02), limited("seconds", 0.02), "ok"]) as gw:
        assert asyncio.run(run(gw)) == (200, 2)


def test_replay_mode_retries_do_not_sleep() -> None:
    settings = settings_for("http://127.0.0.1:9/api").with_changes(mode="replay")
    with build_client(settings) as client:
        assert client.sleep_enabled is False


def test_http_to_a_remote_host_with_a_key_is_refused() -> None:
    with pytest.raises(ConfigError, match="--taotoken-allow-http"):
        build_client(settings_for("http://gateway.example/api"))
    build_client(settings_for("http://gateway.example/api").with_changes(allow_http=True)).close()


def test_key_is_masked_in_repr() -> None:
    with build_client(settings_for("https://taotoken.net/api")) as client:
        assert KEY not in repr(client) and "sk-…1a2b" in repr(client)
