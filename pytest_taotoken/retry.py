"""When to retry a request, and how long to wait: pure functions over status, headers and attempt.

Retried: 408, 409, 429, every 5xx, and connection errors (refused, reset, protocol errors). A read
timeout is not retried: a server that hangs would otherwise multiply the wait.

The wait honours, in order, ``retry-after-ms``, ``Retry-After`` in seconds, and ``Retry-After`` as an
HTTP date. A wait above :data:`MAX_WAIT_S`, or a value that cannot be parsed, gets no retry and a
reason that the diagnosis shows. Without a hint the wait backs off exponentially with jitter.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

MAX_WAIT_S = 60.0
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 8.0
RETRY_STATUSES = frozenset({408, 409, 429})


def is_retryable_status(status: int) -> bool:
    return status in RETRY_STATUSES or 500 <= status <= 599


@dataclass(frozen=True)
class RetryAfter:
    """What the server asked for: ``seconds`` is None when absent or unparseable (``error`` says which)."""

    seconds: float | None
    header: str | None = None
    raw: str | None = None
    error: str | None = None


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> RetryAfter:
    """Read ``retry-after-ms``, then ``Retry-After`` (seconds, then HTTP date)."""
    lower = {k.lower(): v for k, v in headers.items()}
    raw_ms = lower.get("retry-after-ms")
    if raw_ms is not None:
        try:
            ms = float(raw_ms.strip())
            if ms >= 0 and ms == ms and ms != float("inf"):
                return RetryAfter(ms / 1000.0, "retry-after-ms", raw_ms)
        except ValueError:
            pass
    raw = lower.get("retry-after")
    if raw is None:
        if raw_ms is not None:
            return RetryAfter(None, "retry-after-ms", raw_ms, f"retry-after-ms {raw_ms[:40]!r} is not a number")
        return RetryAfter(None)
    text = raw.strip()
    try:
        seconds = float(text)
    except ValueError:
        seconds = None
    if seconds is not None:
        if seconds < 0 or seconds != seconds or seconds == float("inf"):
            return RetryAfter(None, "retry-after", raw, f"Retry-After {raw[:40]!r} is negative or not finite")
        return RetryAfter(seconds, "retry-after", raw)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        when = None
    if when is None:
        return RetryAfter(None, "retry-after", raw, f"Retry-After {raw[:40]!r} is neither seconds nor an HTTP date")
    now = time.time() if now is None else now
    return RetryAfter(max(0.0, when.timestamp() - now), "retry-after", raw)


def backoff(attempt: int, rng: random.Random | None = None) -> float:
    """Exponential backoff with full jitter: uniform in [base/2, base] with base = 0.5 s * 2**attempt, capped."""
    base = min(BACKOFF_MAX_S, BACKOFF_BASE_S * (2**attempt))
    return (rng or random).uniform(base / 2, base)


@dataclass(frozen=True)
class Decision:
    retry: bool
    wait: float = 0.0
    reason: str = ""


def decide(status: int | None, headers: Mapping[str, str], attempt: int, max_retries: int) -> Decision:
    """Decide after attempt number ``attempt`` (0-based). ``status`` None means a connection error."""
    if status is not None and not is_retryable_status(status):
        return Decision(False)
    if attempt >= max_retries:
        return Decision(False, reason=f"gave up after {attempt} retr{'y' if attempt == 1 else 'ies'} (max_retries={max_retries})")
    if status is None:
        return Decision(True, backoff(attempt), "connection error")
    hint = parse_retry_after(headers)
    if hint.error:
        return Decision(False, reason=f"not retried: {hint.error}")
    if hint.seconds is None:
        return Decision(True, backoff(attempt), f"HTTP {status} without Retry-After: exponential backoff")
    if hint.seconds > MAX_WAIT_S:
        return Decision(
            False,
            reason=f"not retried: the server asked to wait {hint.seconds:g} s ({hint.header}: {hint.raw}),"
            f" above the {MAX_WAIT_S:g} s cap",
        )
    return Decision(True, hint.seconds, f"HTTP {status}, {hint.header}: {hint.raw}")


@dataclass
class RetryLog:
    """What happened to one logical request: the attempts, the waits and why retrying stopped."""

    attempts: int = 0
    waits: list[float] = field(default_factory=list)
    statuses: list[int | None] = field(default_factory=list)
    stop_reason: str = ""

    @property
    def retries(self) -> int:
        return max(0, self.attempts - 1)
