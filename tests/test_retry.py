"""The retry policy as a table: which statuses retry, how Retry-After forms are read, the cap."""

from __future__ import annotations

import email.utils

import pytest

from pytest_taotoken.retry import MAX_WAIT_S, backoff, decide, parse_retry_after

NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("headers", "seconds", "error"),
    [
        ({}, None, None),
        ({"Retry-After": "3"}, 3.0, None),
        ({"retry-after": " 0.25 "}, 0.25, None),
        ({"retry-after-ms": "1500"}, 1.5, None),
        ({"retry-after-ms": "200", "Retry-After": "9"}, 0.2, None),  # ms wins
        ({"retry-after-ms": "soon", "Retry-After": "2"}, 2.0, None),
        ({"Retry-After": email.utils.formatdate(NOW + 7, usegmt=True)}, 7.0, None),
        ({"Retry-After": email.utils.formatdate(NOW - 30, usegmt=True)}, 0.0, None),
        ({"Retry-After": "-4"}, None, "negative"),
        ({"Retry-After": "nan"}, None, "not finite"),
        ({"Retry-After": "tomorrow-ish"}, None, "neither seconds nor an HTTP date"),
        ({"retry-after-ms": "x"}, None, "is not a number"),
    ],
)
def test_parse_retry_after(headers: dict[str, str], seconds: float | None, error: str | None) -> None:
    hint = parse_retry_after(headers, now=NOW)
    if seconds is None:
        assert hint.seconds is None
    else:
        assert hint.seconds == pytest.approx(seconds, abs=1.0 if "GMT" in str(headers) else 1e-9)
    assert (error is None and hint.error is None) or (error is not None and error in str(hint.error))


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504, 599])
def test_retryable_statuses_retry(status: int) -> None:
    assert decide(status, {}, 0, 2).retry


@pytest.mark.parametrize("status", [200, 400, 401, 403, 404, 422])
def test_other_statuses_do_not(status: int) -> None:
    assert not decide(status, {}, 0, 2).retry


def test_max_retries_is_a_budget() -> None:
    assert decide(503, {}, 1, 2).retry
    stop = decide(503, {}, 2, 2)
    assert not stop.retry and "max_retries=2" in stop.reason
    assert not decide(503, {}, 0, 0).retry


def test_wait_above_cap_and_garbage_are_not_retried_with_a_reason() -> None:
    above = decide(429, {"Retry-After": "99999"}, 0, 2)
    assert not above.retry and f"above the {MAX_WAIT_S:g} s cap" in above.reason
    garbage = decide(429, {"Retry-After": "later"}, 0, 2)
    assert not garbage.retry and "neither seconds nor an HTTP date" in garbage.reason


def test_honoured_wait_and_backoff_bounds() -> None:
    assert decide(429, {"Retry-After": "2"}, 0, 2).wait == 2.0
    for attempt in range(8):
        wait = backoff(attempt)
        assert 0 < wait <= 8.0
    assert decide(None, {}, 0, 2).retry  # connection error
