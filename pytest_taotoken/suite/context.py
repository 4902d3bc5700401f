"""What a check gets: the settings, a client, the model, and helpers that count requests and tokens."""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..client import EXPECT_ERROR, TaoTokenClient
from ..settings import Settings

PROMPT = "Reply with the single word OK."


@dataclass(frozen=True)
class SuiteOptions:
    """The suite's own knobs (CLI only): they shape checks, not the endpoint."""

    concurrency_ratio: float = 2.0
    burst: int = 0
    diversity_temperature: float = 0.8


@dataclass
class CheckContext:
    check: str
    model: str
    settings: Settings
    client: TaoTokenClient
    options: SuiteOptions = field(default_factory=SuiteOptions)
    details: dict[str, Any] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=lambda: {"prompt": 0, "completion": 0})
    extra_requests: int = 0
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        # Live runs use fresh random values; record and replay derive them from the check id so
        # that a recording replays.
        seed: Any = os.urandom(16) if self.settings.mode == "live" else f"{self.check}|{self.model}"
        self.rng = random.Random(seed)

    @property
    def measuring(self) -> bool:
        """Timing criteria hold only against a real endpoint, not in replay."""
        return self.settings.mode != "replay"

    def token(self, nbytes: int = 8) -> str:
        return f"{self.rng.getrandbits(nbytes * 8):0{nbytes * 2}x}"

    def chat_body(self, content: str = PROMPT, *, max_tokens: int = 8, **params: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": [{"role": "user", "content": content}],
                                "max_tokens": max_tokens}
        body.update(params)
        return body

    def post(self, body: dict[str, Any], *, url: str = "chat/completions", headers: dict[str, str] | None = None,
             expect_error: bool = False) -> httpx.Response:
        """POST through the plugin's client; with ``expect_error`` a 4xx/5xx comes back instead of failing."""
        extensions = {EXPECT_ERROR: True} if expect_error else None
        target = url if "://" in url else f"v1/{url.lstrip('/')}"
        response = self.client.post(target, json=body, headers=headers, extensions=extensions)
        self.count_usage(response)
        return response

    def count_usage(self, response: httpx.Response) -> None:
        if response.status_code != 200 or "json" not in response.headers.get("content-type", ""):
            return
        try:
            usage = response.json().get("usage") or {}
        except (ValueError, AttributeError):
            return
        self.add_usage(usage)

    def add_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        for ours, theirs in (("prompt", "prompt_tokens"), ("completion", "completion_tokens")):
            value = usage.get(theirs)
            if isinstance(value, int) and value >= 0:
                self.tokens[ours] += value

    @contextmanager
    def timer(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.details.setdefault("latencies_s", {})[name] = round(time.perf_counter() - start, 4)


def content_of(payload: Any) -> str:
    """The assistant text of a chat completion's first choice ('' when absent); arrays of parts joined."""
    try:
        content = payload["choices"][0]["message"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError):
        return ""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def body_excerpt(response: httpx.Response, limit: int = 200) -> str:
    """The body's first ``limit`` characters, masked before it is cut (half a key would escape the mask)."""
    from ..diagnosis import mask_text

    try:
        text = json.dumps(response.json())
    except ValueError:
        text = response.text
    return mask_text(text)[:limit]
