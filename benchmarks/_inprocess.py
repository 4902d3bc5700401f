"""The figures measured inside this process: validation, streams, the client, and chat.concurrency.

The payloads have the shape of real OpenAI replies (``tests/payloads/files/openai__chat_text__1.json``
and ``openai__stream_usage__1.sse``), built here so that the benchmark stands on its own.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

import httpx
from _common import FAKE_KEY, Figure, best_per_call, gateway, side_by_side

CHAT_COMPLETION: bytes = json.dumps({
    "choices": [{"finish_reason": "stop", "index": 0, "logprobs": None,
                 "message": {"annotations": [], "content": "The capital of France is Paris.", "refusal": None,
                             "role": "assistant"}}],
    "created": 1752720361, "id": "chatcmpl-Bu8vBIrB8kIWKRyTcpEEPncjhHtMU", "model": "gpt-4o-2024-08-06",
    "object": "chat.completion", "service_tier": "default", "system_fingerprint": "fp_a288987b44",
    "usage": {"completion_tokens": 7, "prompt_tokens": 14, "total_tokens": 21,
              "completion_tokens_details": {"accepted_prediction_tokens": 0, "audio_tokens": 0, "reasoning_tokens": 0,
                                            "rejected_prediction_tokens": 0},
              "prompt_tokens_details": {"audio_tokens": 0, "cached_tokens": 0}},
}).encode()

STREAM_CHUNKS = 2000
NET_CHUNK = 4096  # bytes per network read, as an httpx iter_bytes() hands them over


def stream_body(chunks: int = STREAM_CHUNKS) -> bytes:
    """A valid chat stream of ``chunks`` chunk events (role, content..., finish, usage), then [DONE]."""
    base = {"id": "chatcmpl-AU9UFcBsaey0y8IRFLp3AKYDZdOyo", "object": "chat.completion.chunk", "created": 1731749671,
            "model": "gpt-4o-2024-08-06", "system_fingerprint": "fp_45cf54deae"}

    def event(delta: dict[str, Any], finish: str | None = None, usage: Any = None, choices: bool = True) -> bytes:
        obj = {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
               if choices else [], "usage": usage}
        return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

    events = [event({"role": "assistant", "content": "", "refusal": None})]
    events += [event({"content": f" word{i}"}) for i in range(chunks - 3)]
    events.append(event({}, "stop"))
    events.append(event({}, usage={"prompt_tokens": 9, "completion_tokens": chunks - 3, "total_tokens": chunks + 6},
                        choices=False))
    return b"".join(events) + b"data: [DONE]\n\n"


# ------------------------------------------------------------------------------------------- validate


def validate_ratio(rounds: int) -> Figure:
    from pytest_taotoken import contracts

    fig = Figure("validate_ratio", 5, "json.loads of the same bytes")
    raw = CHAT_COMPLETION
    assert contracts.validate("chat_completion", raw) == [], "the benchmark payload must be valid"
    start = time.perf_counter()
    contracts.validate("chat_completion", json.loads(raw), "strict")  # first use of a level compiles it
    first_ms = (time.perf_counter() - start) * 1000
    parsed = json.loads(raw)
    validate_only: list[float] = []
    vals: list[float] = []
    floors: list[float] = []
    for _ in range(rounds):
        t_val, t_json = side_by_side(lambda: contracts.validate("chat_completion", raw), lambda: json.loads(raw),
                                     2000, 2000)
        fig.rounds.append(t_val / t_json)
        vals.append(t_val)
        floors.append(t_json)
        validate_only.append(best_per_call(lambda: contracts.validate("chat_completion", parsed), 2000, 3))
    fig.details = {
        "payload_bytes": len(raw), "level": "compatible",
        "validate_us": round(statistics.median(vals) * 1e6, 2),
        "json_loads_us": round(statistics.median(floors) * 1e6, 2),
        "validate_parsed_payload_us": round(statistics.median(validate_only) * 1e6, 2),
        "first_call_ms_strict_level": round(first_ms, 2),
    }
    fig.note = "bytes in: parse + error-object check + compiled schema + semantic checks"
    return fig


# ------------------------------------------------------------------------------------------- stream


def stream_ratio(rounds: int) -> Figure:
    from pytest_taotoken import sse

    fig = Figure("stream_ratio", 5, "bytes.splitlines() of the same bytes")
    body = stream_body()
    pieces = [body[i:i + NET_CHUNK] for i in range(0, len(body), NET_CHUNK)]
    result = sse.assemble(body)
    assert len(result.chunks) == STREAM_CHUNKS and result.finish_reasons == {0: "stop"}, "the benchmark stream"

    def naive_json_client() -> list[Any]:
        return [json.loads(line[6:]) for line in body.splitlines() if line.startswith(b"data: {")]

    def httpx_iter_lines() -> list[str]:
        return list(httpx.Response(200, content=iter(pieces)).iter_lines())

    extra: dict[str, list[float]] = {k: [] for k in ("assemble_ms", "splitlines_ms", "assemble_4k_chunks_ms",
                                                      "assemble_no_validation_ms", "httpx_iter_lines_ms",
                                                      "json_loads_each_data_line_ms")}
    for _ in range(rounds):
        t_asm, t_split = side_by_side(lambda: sse.assemble(body), body.splitlines, 1, 100, repeat=3)
        fig.rounds.append(t_asm / t_split)
        extra["assemble_ms"].append(t_asm)
        extra["splitlines_ms"].append(t_split)
        extra["assemble_4k_chunks_ms"].append(best_per_call(lambda: sse.assemble(pieces), 1, 3))
        extra["assemble_no_validation_ms"].append(best_per_call(lambda: sse.assemble(body, validate=False), 1, 3))
        extra["httpx_iter_lines_ms"].append(best_per_call(httpx_iter_lines, 5, 3))
        extra["json_loads_each_data_line_ms"].append(best_per_call(naive_json_client, 3, 3))
    ms = {k: statistics.median(v) * 1000 for k, v in extra.items()}
    fig.details = {"chunks": STREAM_CHUNKS, "bytes": len(body), **{k: round(v, 3) for k, v in ms.items()},
                   "breakdown_us_per_chunk": _stream_breakdown(body),
                   "ratio_vs_httpx_iter_lines": round(ms["assemble_4k_chunks_ms"] / ms["httpx_iter_lines_ms"], 2),
                   "ratio_vs_json_loads_each_data_line": round(ms["assemble_ms"] / ms["json_loads_each_data_line_ms"], 2),
                   "floor_json_loads_vs_splitlines": round(ms["json_loads_each_data_line_ms"] / ms["splitlines_ms"], 2)}
    fig.note = "assemble(): SSE parse + per-chunk contract validation + message assembly"
    return fig


def _stream_breakdown(body: bytes) -> dict[str, float]:
    """Where assemble() spends its time, per chunk, through the public API of each stage."""
    from pytest_taotoken import contracts, semantic, sse

    events = [e for e in sse.parse_events(body) if not e.is_done]
    payloads = [json.loads(e.data) for e in events]

    def fold() -> None:
        asm = sse.StreamAssembler(validate=False)
        for p in payloads:
            asm.feed_chunk(p)

    stages: dict[str, Any] = {
        "sse_parse": lambda: sse.parse_events(body),
        "json_loads": lambda: [json.loads(e.data) for e in events],
        "contracts_validate": lambda: [contracts.validate("chat_completion_chunk", p) for p in payloads],
        "of_which_semantic": lambda: [semantic.check_chunk(p) for p in payloads],
        "fold_no_validation": fold,
    }
    return {name: round(best_per_call(fn, 1, 3) / len(payloads) * 1e6, 2) for name, fn in stages.items()}


# ------------------------------------------------------------------------------------------- client


def _settings(base_url: str, **cli: Any) -> Any:
    from pytest_taotoken.settings import resolve_settings

    return resolve_settings({"base_url": base_url, **cli}, {}, {"TAOTOKEN_API_KEY": FAKE_KEY}, mode="live")


def client_overhead_ratio(rounds: int, requests: int = 150) -> Figure:
    from pytest_taotoken.client import USER_AGENT, build_client

    fig = Figure("client_overhead_ratio", 1.2, "bare httpx.Client, same gateway, same request")
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "Reply with OK."}], "max_tokens": 8,
            "temperature": 0}
    medians: dict[str, list[float]] = {"plugin": [], "bare": []}
    with gateway(0.0) as url:
        settings = _settings(url)
        headers = {"Authorization": f"Bearer {FAKE_KEY}", "User-Agent": USER_AGENT}
        with build_client(settings) as plugin, httpx.Client(base_url=settings.api_root, headers=headers,
                                                            timeout=settings.timeout) as bare:
            clients = {"plugin": plugin, "bare": bare}

            def timed(name: str) -> float:
                start = time.perf_counter()
                response = clients[name].post("v1/chat/completions", json=body)
                elapsed = time.perf_counter() - start
                assert response.status_code == 200, response.text[:200]
                return elapsed

            for name in ("plugin", "bare") * 20:  # warm-up: connections, caches
                timed(name)
            for _ in range(rounds):
                times: dict[str, list[float]] = {"plugin": [], "bare": []}
                for i in range(requests):
                    for name in (("plugin", "bare") if i % 2 else ("bare", "plugin")):
                        times[name].append(timed(name))
                for name, values in times.items():
                    medians[name].append(statistics.median(values))
                fig.rounds.append(statistics.median(times["plugin"]) / statistics.median(times["bare"]))
    fig.details = {"requests_per_round": requests, "latency_s": 0.0,
                   "plugin_ms": round(statistics.median(medians["plugin"]) * 1000, 4),
                   "bare_ms": round(statistics.median(medians["bare"]) * 1000, 4)}
    fig.note = "live mode: retry policy, stats and diagnosis on; no cassette"
    return fig


# ------------------------------------------------------------------------------------------- concurrency


def concurrency_ratio(rounds: int, samples: int = 8, latency: float = 0.2) -> Figure:
    from pytest_taotoken.client import build_client
    from pytest_taotoken.suite import checks  # noqa: F401  (registers the checks)
    from pytest_taotoken.suite.context import CheckContext
    from pytest_taotoken.suite.registry import CHECKS

    fig = Figure("concurrency_ratio", 1.25, f"one request's latency (fault gateway, fixed {latency * 1000:.0f} ms)")
    walls: list[float] = []
    singles: list[float] = []
    with gateway(latency) as url:
        settings = _settings(url, samples=samples, models="fake-model")
        for _ in range(rounds):
            with build_client(settings) as client:
                ctx = CheckContext("chat.concurrency", "fake-model", settings, client)
                try:
                    CHECKS["chat.concurrency"].fn(ctx)
                except AssertionError as exc:  # the check's own verdict (ratio limit 2.0); the figure is ours
                    fig.details.setdefault("check_failures", []).append(str(exc).splitlines()[0][:200])
                wall, single = float(ctx.details["wall_s"]), float(ctx.details["single_latency_s"])
            walls.append(wall)
            singles.append(single)
            fig.rounds.append(wall / single)
    fig.details.update({"samples": samples, "fixed_latency_s": latency,
                        "wall_s": round(statistics.median(walls), 4),
                        "single_latency_s": round(statistics.median(singles), 4),
                        "wall_over_fixed_latency": round(statistics.median(walls) / latency, 4)})
    fig.note = f"the suite's chat.concurrency check, driven directly with {samples} samples"
    return fig
