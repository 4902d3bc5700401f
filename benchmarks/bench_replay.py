"""Replay speed: median time per replayed request on a 200-interaction cassette.

Three ways to answer the same 200 chat requests with an ``httpx.Client``, in a shuffled order:

- ``taotoken``: :func:`pytest_taotoken.recording.use_cassette` (index by method, path and canonical
  JSON body; per-key FIFO queues);
- ``mock_transport``: ``httpx.MockTransport`` with a dict lookup (the floor: no cassette at all);
- ``vcrpy``: plain vcrpy on the same cassette file, with its default matchers plus ``body``.

Run ``python benchmarks/bench_replay.py [rounds]``; other code imports :func:`measure`.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import httpx

from pytest_taotoken import _cassette
from pytest_taotoken._cassette import Interaction, Request, Response
from pytest_taotoken.recording import use_cassette

BASE = "https://gateway.example/api"
SIZE = 200
TARGET_MS = 1.0


def _body(n: int) -> dict[str, Any]:
    return {"model": "fake-model", "temperature": 0.7, "max_tokens": 64,
            "messages": [{"role": "system", "content": "You are terse."},
                         {"role": "user", "content": f"Question number {n}: what is {n} + {n}?"}]}


def _reply(n: int) -> bytes:
    return json.dumps({
        "id": f"chatcmpl-{n:08d}", "object": "chat.completion", "created": 1700000000 + n, "model": "fake-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": f"{2 * n}. " + "word " * 40},
                     "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 42, "total_tokens": 62},
    }).encode()


def build_cassette(folder: Path, size: int = SIZE) -> Path:
    """A cassette of ``size`` distinct chat exchanges, in the format both replayers read."""
    items = [
        Interaction(
            Request("POST", f"{BASE}/v1/chat/completions", json.dumps(_body(n)).encode(),
                    {"Content-Type": ["application/json"]}),
            Response(200, "OK", {"Content-Type": ["application/json"]}, _reply(n)),
        )
        for n in range(size)
    ]
    path = folder / "bench.yaml"
    _cassette.write(path, items)
    return path


def _time_requests(client: httpx.Client, order: list[int]) -> list[float]:
    times = []
    for n in order:
        start = time.perf_counter()
        response = client.post("v1/chat/completions", json=_body(n))
        times.append(time.perf_counter() - start)
        assert response.status_code == 200 and response.json()["id"] == f"chatcmpl-{n:08d}"
    return times


@contextmanager
def _taotoken(path: Path) -> Iterator[httpx.Client]:
    with use_cassette(path, "replay"), httpx.Client(base_url=BASE) as client:
        yield client


@contextmanager
def _mock(path: Path) -> Iterator[httpx.Client]:
    replies = {json.dumps(_body(n), sort_keys=True): _reply(n) for n in range(SIZE)}

    def handler(request: httpx.Request) -> httpx.Response:
        key = json.dumps(json.loads(request.content), sort_keys=True)
        return httpx.Response(200, content=replies[key], headers={"Content-Type": "application/json"})

    with httpx.Client(base_url=BASE, transport=httpx.MockTransport(handler)) as client:
        yield client


@contextmanager
def _vcrpy(path: Path) -> Iterator[httpx.Client]:
    import vcr

    recorder = vcr.VCR(record_mode="none", match_on=["method", "scheme", "host", "port", "path", "query", "body"])
    with recorder.use_cassette(str(path)), httpx.Client(base_url=BASE) as client:
        yield client


REPLAYERS: dict[str, Callable[[Path], AbstractContextManager[httpx.Client]]] = {
    "taotoken": _taotoken, "mock_transport": _mock, "vcrpy": _vcrpy,
}


def measure(rounds: int = 3, *, replayers: tuple[str, ...] = ("taotoken", "mock_transport", "vcrpy"),
            seed: int = 0) -> dict[str, Any]:
    """Median milliseconds per request for each replayer, over ``rounds`` passes of the 200 requests.

    Also reports the time to load and index the cassette (``taotoken_load_ms``, once per test in a run).
    """
    rng = random.Random(seed)
    result: dict[str, Any] = {"interactions": SIZE, "rounds": rounds, "target_ms": TARGET_MS}
    with tempfile.TemporaryDirectory() as tmp:
        path = build_cassette(Path(tmp))
        for name in replayers:
            times: list[float] = []
            for _ in range(rounds):
                order = list(range(SIZE))
                rng.shuffle(order)
                with REPLAYERS[name](path) as client:
                    times += _time_requests(client, order)
            result[f"{name}_ms"] = round(statistics.median(times) * 1000, 4)
            result[f"{name}_p95_ms"] = round(sorted(times)[int(len(times) * 0.95)] * 1000, 4)
        loads = []
        for _ in range(max(rounds, 3)):
            _cassette._CACHE.clear()
            start = time.perf_counter()
            _cassette.load(path).queues()
            loads.append(time.perf_counter() - start)
        result["taotoken_load_ms"] = round(statistics.median(loads) * 1000, 3)
    if "taotoken_ms" in result:
        result["meets_target"] = result["taotoken_ms"] < TARGET_MS
    return result


def main(argv: list[str]) -> int:
    rounds = int(argv[1]) if len(argv) > 1 else 5
    result = measure(rounds)
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    return 0 if result.get("meets_target") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
