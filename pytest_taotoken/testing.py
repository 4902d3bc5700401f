"""A scriptable, OpenAI-compatible fault gateway on loopback, for testing clients against real faults.

``FakeGateway`` is a real HTTP server (stdlib ``ThreadingHTTPServer``) on 127.0.0.1 and a free port.
It serves ``/api/v1/chat/completions`` and ``/api/v1/models``, and the same under ``/v1``. Every
request is answered by a named scenario (see :data:`SCENARIOS`), or by a script of scenarios taken
in order, and recorded with its headers and body. A real server beats a mock here: timeouts,
resets, chunked streams, gzip and proxies behave as they do in production.

::

    with FakeGateway("rate_limited", recover_after=2) as gw:
        client = httpx.Client(base_url=gw.base_url + "/v1")
        ...
        assert len(gw.requests) == 3

Stalls (``hang``, ``stall_body``, ``stream_stall``, ``slow``) end at ``stop()``, so no test hangs on them.
"""

from __future__ import annotations

import contextlib
import email.utils
import gzip
import hashlib
import json
import random
import secrets
import socket
import struct
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from .keys import mask_key

__all__ = ["DEFAULT_MODELS", "SCENARIOS", "FakeGateway", "RecordedRequest", "Scenario"]

#: Every scenario, with what it does. Streams scenarios only change ``stream: true`` chat requests.
SCENARIOS: dict[str, str] = {
    "ok": "valid replies: random at temperature > 0, repeatable at 0 or with a seed; n choices; tools; streams"
          " with include_usage; X-RL-Version echoed; unknown model -> 404, missing key -> 401"
          " (a wrong key too when api_key= is given)",
    "deterministic": "like ok, but the same text whatever the temperature or seed",
    "drop_headers": "like ok, but custom request headers (X-RL-Version) are not echoed",
    "serial": "like ok, but one request at a time (latency at least 0.05 s), so parallel sampling gets no speed-up",
    "slow": "like ok, after `slow_s` seconds (default 5): beyond a short client timeout",
    "gzip": "like ok, with gzip-compressed JSON bodies (valid)",
    "html_200": "200 text/html web page on every route",
    "error_200": "chat: 200 with {\"error\": ...} (an error wrapped in 200)",
    "empty_choices": "chat: 200 with \"choices\": [] (streams: every chunk has empty choices)",
    "unauthorized": "401 invalid_api_key on every route (key masked in the body)",
    "unauthorized_echo": "401 whose body echoes the full key sent (for leak tests)",
    "oauth_expired": "401 'OAuth token expired' / invalid_grant on every route",
    "model_not_found": "chat: 404 model_not_found; /models still lists the models",
    "fastapi_404": "404 {\"detail\":\"Not Found\"} on every route",
    "models_unlisted": "like ok, but /models is 404 (a gateway that does not list models)",
    "rate_limited": "429 with Retry-After (`retry_after`, `retry_after_format` seconds|ms|date|absent|raw);"
                    " ok after `recover_after` 429s (None: never)",
    "retry_after_huge": "endless 429 with Retry-After: 99999",
    "retry_after_negative": "endless 429 with Retry-After: -5",
    "retry_after_garbage": "endless 429 with Retry-After: soon",
    "server_error": "`status` (default 500) JSON error on every route, e.g. status=503",
    "bad_gateway_html": "502 HTML page from a front proxy on every route",
    "gateway_timeout_html": "504 HTML page from a front proxy on every route",
    "hang": "reads the request and never answers (until `stall_s` or stop())",
    "stall_body": "sends headers and half the body, then stalls",
    "reset": "sends headers and half the body, then resets the connection (RST)",
    "stream_truncated": "stream: content chunks, then the end: no finish_reason, no [DONE]",
    "stream_bad_json": "stream: one chunk with malformed JSON, then the rest and [DONE]",
    "stream_error_event": "stream: a content chunk, then `event: error` with an error object, no [DONE]",
    "stream_quirky": "stream: comment lines, `event: message` lines, CRLF, events split across writes (valid)",
    "stream_stall": "stream: two chunks, then stalls",
    "stream_reset": "stream: two chunks, then resets the connection (RST)",
}

DEFAULT_MODELS: tuple[str, ...] = ("fake-model", "fake-model-large")
CHAT_PATHS = frozenset({"/api/v1/chat/completions", "/v1/chat/completions"})
MODELS_PATHS = frozenset({"/api/v1/models", "/v1/models"})
_PRESETS: dict[str, dict[str, Any]] = {
    "retry_after_huge": {"retry_after": "99999", "retry_after_format": "raw"},
    "retry_after_negative": {"retry_after": "-5", "retry_after_format": "raw"},
    "retry_after_garbage": {"retry_after": "soon", "retry_after_format": "raw"},
}
_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo",
          "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor",
          "whiskey", "xray", "yankee", "zulu")
_HTML_PAGE = (b"<!DOCTYPE html>\n<html><head><title>Welcome</title></head>\n<body><h1>Welcome to the gateway</h1>"
              b"<p>Sign in to manage your API keys.</p></body></html>\n")


def _proxy_page(status: int, reason: str) -> bytes:
    return (f"<html>\r\n<head><title>{status} {reason}</title></head>\r\n<body>\r\n<center><h1>{status} {reason}"
            "</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n").encode()


RetryAfterFormat = Literal["seconds", "ms", "date", "absent", "raw"]


@dataclass(frozen=True)
class Scenario:
    """A named scenario with its parameters; a plain name means the defaults."""

    name: str
    latency: float | None = None
    retry_after: float | str = 1
    retry_after_format: RetryAfterFormat = "seconds"
    recover_after: int | None = None
    slow_s: float = 5.0
    stall_s: float = 60.0
    status: int = 500  # server_error's status

    def __post_init__(self) -> None:
        if self.name not in SCENARIOS:
            raise ValueError(f"unknown scenario {self.name!r}; known: {', '.join(SCENARIOS)}")

    @classmethod
    def of(cls, value: str | Scenario, **params: Any) -> Scenario:
        if isinstance(value, Scenario):
            return replace(value, **params) if params else value
        return cls(value, **{**_PRESETS.get(value, {}), **params})


@dataclass(frozen=True)
class RecordedRequest:
    """One request the gateway saw. ``headers`` keeps the names as sent; ``header()`` looks up any case."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    scenario: str
    at: float = field(default_factory=time.monotonic)

    def header(self, name: str) -> str | None:
        low = name.lower()
        return next((v for k, v in self.headers if k.lower() == low), None)

    def json(self) -> Any:
        return json.loads(self.body or b"null")

    def __repr__(self) -> str:
        auth = self.header("authorization")
        shown = f"Bearer {mask_key(auth[7:])}" if auth and auth.lower().startswith("bearer ") else (
            "(none)" if auth is None else "(set)")
        return f"<RecordedRequest {self.method} {self.path} scenario={self.scenario} auth={shown}>"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128
    gateway: FakeGateway


class FakeGateway:
    """An OpenAI-compatible server on 127.0.0.1 that answers by scenario, records every request.

    ``models``: the IDs served (others get 404 model_not_found in the valid scenarios).
    ``api_key``: if given, only this key is accepted (others get 401); by default any Bearer key is.
    ``latency``: seconds to wait before every answer (settable while running).
    Scenario parameters (``retry_after``, ``recover_after``, ...) may be given as keywords.
    """

    def __init__(
        self,
        scenario: str | Scenario = "ok",
        *,
        script: Iterable[str | Scenario] = (),
        latency: float = 0.0,
        models: Sequence[str] = DEFAULT_MODELS,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        **params: Any,
    ) -> None:
        self.latency = latency
        self.models = tuple(models)
        self.api_key = api_key
        self._host, self._port = host, port
        self._lock = threading.Lock()
        self._serial = threading.Lock()
        self._stop = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._sockets: set[socket.socket] = set()
        self._requests: list[RecordedRequest] = []
        self._script: list[Scenario] = []
        self._counts: dict[int, int] = {}
        self._in_flight = 0
        self.max_in_flight = 0
        self._scenario = Scenario.of(scenario, **params)
        self.script(*script)

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> FakeGateway:
        if self._server is not None:
            return self
        self._stop.clear()
        server = _Server((self._host, self._port), _Handler)
        server.gateway = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"FakeGateway:{server.server_address[1]}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stop.set()
        server.shutdown()
        server.server_close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeGateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- addresses
    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("FakeGateway is not started: call start() or use it as a context manager")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``: the server's origin."""
        return f"http://{self._host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The API root, ``http://127.0.0.1:PORT/api``: what goes in ``--taotoken-base-url``."""
        return f"{self.url}/api"

    # ----------------------------------------------------------------- scenarios
    @property
    def scenario(self) -> Scenario:
        return self._scenario

    @scenario.setter
    def scenario(self, value: str | Scenario) -> None:
        with self._lock:
            self._scenario = Scenario.of(value)
            self._counts.clear()

    def script(self, *steps: str | Scenario) -> FakeGateway:
        """Answer the next requests (any route) with ``steps`` in order, then with ``scenario``."""
        with self._lock:
            self._script = [Scenario.of(s) for s in steps]
        return self

    def reset(self) -> None:
        """Forget recorded requests, the script, the rate-limit counters and the concurrency peak."""
        with self._lock:
            self._requests.clear()
            self._script.clear()
            self._counts.clear()
            self.max_in_flight = 0

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request seen so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    # ----------------------------------------------------------------- internals used by the handler
    def _next(self) -> Scenario:
        with self._lock:
            return self._script.pop(0) if self._script else self._scenario

    def _record(self, req: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(req)

    def _enter(self, sock: socket.socket | None = None, *, add: bool = True) -> None:
        with self._lock:
            if sock is not None:
                (self._sockets.add if add else self._sockets.discard)(sock)
                return
            self._in_flight += 1 if add else -1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)

    def _limited(self, scenario: Scenario) -> bool:
        """True while a rate-limited scenario should still answer 429 (counts per scenario object)."""
        with self._lock:
            count = self._counts.get(id(scenario), 0)
            if scenario.recover_after is not None and count >= scenario.recover_after:
                return False
            self._counts[id(scenario)] = count + 1
            return True

    def _sleep(self, seconds: float) -> bool:
        """Wait, unless the gateway stops first; False when stopping."""
        return not self._stop.wait(seconds) if seconds > 0 else not self._stop.is_set()


# --------------------------------------------------------------------------- replies


def _error(message: str, etype: str, code: Any, param: Any = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": etype, "param": param, "code": code}}


def _rng(body: Mapping[str, Any], index: int, deterministic: bool) -> random.Random:
    temperature = body.get("temperature", 1.0)
    seed = body.get("seed")
    repeatable = deterministic or seed is not None or (isinstance(temperature, (int, float)) and temperature <= 0)
    if not repeatable:
        return random.Random(secrets.randbits(64))
    material = json.dumps([body.get("model"), body.get("messages"), None if deterministic else seed,
                           0 if deterministic or seed is None else index], sort_keys=True, default=str)
    return random.Random(int.from_bytes(hashlib.sha256(material.encode()).digest()[:8], "big"))


def _limit(body: Mapping[str, Any]) -> int | None:
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    return value if isinstance(value, int) and value > 0 else None


def _arguments(tool: Mapping[str, Any]) -> str:
    params = tool.get("function", {}).get("parameters") or {}
    props = params.get("properties") if isinstance(params, dict) else None
    samples: dict[Any, Any] = {"string": "fake", "integer": 1, "number": 1.5, "boolean": True, "array": [],
                               "object": {}}
    args = {k: samples.get(v.get("type") if isinstance(v, dict) else "string", "fake")
            for k, v in (props or {}).items()}
    return json.dumps(args)


def _pick_tool(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    tools = body.get("tools")
    choice = body.get("tool_choice", "auto")
    if not isinstance(tools, list) or not tools or choice == "none":
        return None
    if isinstance(choice, dict):
        name = choice.get("function", {}).get("name")
        for tool in tools:
            if isinstance(tool, dict) and tool.get("function", {}).get("name") == name:
                return tool
    first = tools[0]
    return first if isinstance(first, dict) else None


def _prompt_tokens(body: Mapping[str, Any]) -> int:
    messages = body.get("messages")
    text = json.dumps(messages) if messages is not None else ""
    return max(1, len(text.split()))


@dataclass
class _Choice:
    index: int
    words: list[str]
    finish_reason: str
    tool_call: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        return " ".join(self.words).capitalize() + "." if self.words else ""


def _choices(body: Mapping[str, Any], deterministic: bool) -> list[_Choice]:
    n_raw = body.get("n")
    n = n_raw if isinstance(n_raw, int) and n_raw > 0 else 1
    tool = _pick_tool(body)
    out: list[_Choice] = []
    for i in range(min(n, 16)):
        rng = _rng(body, i, deterministic)
        if tool is not None:
            call = {"id": f"call_{rng.getrandbits(48):012x}", "type": "function",
                    "function": {"name": tool.get("function", {}).get("name", "tool"), "arguments": _arguments(tool)}}
            out.append(_Choice(i, [], "tool_calls", call))
            continue
        natural = rng.randint(6, 12)
        limit = _limit(body)
        count = min(natural, limit) if limit else natural
        words = [rng.choice(_WORDS) for _ in range(count)]
        out.append(_Choice(i, words, "length" if limit is not None and limit < natural else "stop"))
    return out


def _usage(body: Mapping[str, Any], choices: list[_Choice]) -> dict[str, int]:
    prompt = _prompt_tokens(body)
    completion = sum(max(1, len(c.words)) for c in choices)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _completion(body: Mapping[str, Any], choices: list[_Choice]) -> dict[str, Any]:
    def message(c: _Choice) -> dict[str, Any]:
        if c.tool_call is not None:
            return {"role": "assistant", "content": None, "refusal": None, "tool_calls": [c.tool_call]}
        return {"role": "assistant", "content": c.text, "refusal": None}

    return {
        "id": f"chatcmpl-fake{secrets.token_hex(8)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model"),
        "system_fingerprint": "fp_fakegateway",
        "choices": [{"index": c.index, "message": message(c), "logprobs": None, "finish_reason": c.finish_reason}
                    for c in choices],
        "usage": _usage(body, choices),
    }


def _chunks(body: Mapping[str, Any], choices: list[_Choice]) -> list[dict[str, Any]]:
    """The stream's chunk objects, in order: role, content (or tool-call) deltas, finish, usage."""
    include_usage = isinstance(body.get("stream_options"), dict) and body["stream_options"].get("include_usage")
    base = {"id": f"chatcmpl-fake{secrets.token_hex(8)}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": body.get("model"), "system_fingerprint": "fp_fakegateway"}

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        out = {**base, "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        if include_usage:
            out["usage"] = None
        return out

    out: list[dict[str, Any]] = []
    for c in choices:
        out.append(chunk(c.index, {"role": "assistant", "content": "" if c.tool_call is None else None}))
        if c.tool_call is not None:
            args = c.tool_call["function"]["arguments"]
            half = len(args) // 2
            out.append(chunk(c.index, {"tool_calls": [{"index": 0, "id": c.tool_call["id"], "type": "function",
                                                       "function": {"name": c.tool_call["function"]["name"],
                                                                    "arguments": args[:half]}}]}))
            out.append(chunk(c.index, {"tool_calls": [{"index": 0, "function": {"arguments": args[half:]}}]}))
        for i, word in enumerate(c.text.split(" ") if c.text else []):
            out.append(chunk(c.index, {"content": word if i == 0 else " " + word}))
        out.append(chunk(c.index, {}, c.finish_reason))
    if include_usage:
        out.append({**base, "choices": [], "usage": _usage(body, choices)})
    return out


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


# --------------------------------------------------------------------------- the handler


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in separate writes: no 40 ms delayed-ACK stall
    server_version = "FakeGateway/0.1"
    sys_version = ""
    server: _Server

    @property
    def gw(self) -> FakeGateway:
        return self.server.gateway

    def setup(self) -> None:
        super().setup()
        self.gw._enter(self.connection)

    def finish(self) -> None:
        self.gw._enter(self.connection, add=False)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request stderr log."""

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    # ----------------------------------------------------------------- plumbing
    def _read_body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if length and length.isdigit():
            return self.rfile.read(int(length))
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        return b""

    def _send(self, status: int, body: bytes | Any, *, ctype: str = "application/json",
              headers: Mapping[str, str] | None = None, compress: bool = False) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body, ensure_ascii=False).encode("utf-8")
        accepts_gzip = "gzip" in (self.headers.get("Accept-Encoding") or "")
        if compress and accepts_gzip:
            data = gzip.compress(data)
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        if compress and accepts_gzip:
            self.send_header("Content-Encoding", "gzip")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self, headers: Mapping[str, str]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")

    def _reset(self) -> None:
        """Abort the connection with a TCP RST."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass

    def _stall(self, scenario: Scenario) -> None:
        self.close_connection = True
        self.gw._sleep(scenario.stall_s)

    # ----------------------------------------------------------------- dispatch
    def _serve(self) -> None:
        path = self.path.split("?", 1)[0]
        body = self._read_body()
        scenario = self.gw._next()
        self.gw._record(RecordedRequest(self.command, self.path, tuple(self.headers.items()), body, scenario.name))
        try:
            if scenario.name == "serial":
                with self.gw._serial:
                    self._counted(scenario, path, body, max(scenario.latency or self.gw.latency, 0.05))
            else:
                latency = scenario.latency if scenario.latency is not None else self.gw.latency
                self._counted(scenario, path, body, latency)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _counted(self, scenario: Scenario, path: str, body: bytes, latency: float) -> None:
        """Answer, counted in ``max_in_flight`` (inside the lock for ``serial``)."""
        self.gw._enter()
        try:
            self._answer(scenario, path, body, latency)
        finally:
            self.gw._enter(add=False)

    def _answer(self, scenario: Scenario, path: str, raw: bytes, latency: float) -> None:
        if not self.gw._sleep(latency):
            self.close_connection = True
            return
        name = scenario.name
        everywhere = self._everywhere(scenario)
        if everywhere is not None:
            everywhere()
            return
        if path in MODELS_PATHS and self.command == "GET":
            if name == "models_unlisted":
                self._send(404, {"detail": "Not Found"})
            elif self._authorized():
                self._send(200, {"object": "list", "data": [
                    {"id": m, "object": "model", "created": 1700000000, "owned_by": "fake-gateway"}
                    for m in self.gw.models]}, compress=name == "gzip")
            return
        if path not in CHAT_PATHS or self.command != "POST":
            self._send(404 if path not in CHAT_PATHS else 405, {"detail": "Not Found" if path not in CHAT_PATHS
                                                                else "Method Not Allowed"})
            return
        self._chat(scenario, raw)

    def _everywhere(self, scenario: Scenario) -> Any:
        """The handler of scenarios that answer the same on every route, or None."""
        name = scenario.name
        if name == "html_200":
            return lambda: self._send(200, _HTML_PAGE, ctype="text/html; charset=utf-8")
        if name == "fastapi_404":
            return lambda: self._send(404, {"detail": "Not Found"})
        if name in ("unauthorized", "unauthorized_echo"):
            auth = self.headers.get("Authorization") or ""
            key = auth[7:] if auth.lower().startswith("bearer ") else auth
            shown = key if name == "unauthorized_echo" else mask_key(key)
            return lambda: self._send(401, _error(
                f"Incorrect API key provided: {shown}. You can find your API key in the console.",
                "invalid_request_error", "invalid_api_key"))
        if name == "oauth_expired":
            return lambda: self._send(401, _error("OAuth token expired: sign in again", "authentication_error",
                                                  "invalid_grant"))
        if name in ("rate_limited", *_PRESETS) and self.gw._limited(scenario):
            return lambda: self._send(429, _error("Rate limit reached for requests per minute. Please try again.",
                                                  "requests", "rate_limit_exceeded"),
                                      headers={**_retry_after(scenario), "x-ratelimit-remaining-requests": "0"})
        if name == "server_error":
            return lambda: self._send(scenario.status, _error("The server had an error while processing your request.",
                                                  "server_error", None))
        if name == "bad_gateway_html":
            return lambda: self._send(502, _proxy_page(502, "Bad Gateway"), ctype="text/html")
        if name == "gateway_timeout_html":
            return lambda: self._send(504, _proxy_page(504, "Gateway Time-out"), ctype="text/html")
        if name == "hang":
            return lambda: self._stall(scenario)
        if name in ("stall_body", "reset"):
            return lambda: self._half_body(scenario)
        if name == "slow":
            return None if self.gw._sleep(scenario.slow_s) else self._stall_nothing
        return None

    def _stall_nothing(self) -> None:
        self.close_connection = True

    def _half_body(self, scenario: Scenario) -> None:
        data = json.dumps(_error("never seen", "x", None) | {"padding": "x" * 512}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        if scenario.name == "reset":
            self._reset()
        else:
            self._stall(scenario)

    def _authorized(self) -> bool:
        auth = self.headers.get("Authorization")
        if not auth or not auth.lower().startswith("bearer ") or not auth[7:].strip():
            self._send(401, _error("You didn't provide an API key. You need to provide your API key in an"
                                   " Authorization header using Bearer auth.", "invalid_request_error", None))
            return False
        key = auth[7:]
        if self.gw.api_key is not None and key != self.gw.api_key:
            self._send(401, _error(f"Incorrect API key provided: {mask_key(key)}.", "invalid_request_error",
                                   "invalid_api_key"))
            return False
        return True

    def _chat(self, scenario: Scenario, raw: bytes) -> None:
        name = scenario.name
        if not self._authorized():
            return
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            self._send(400, _error("We could not parse the JSON body of your request, or 'messages' is missing.",
                                   "invalid_request_error", None, "messages"))
            return
        model = body.get("model")
        if name == "model_not_found" or model not in self.gw.models:
            self._send(404, _error(f"The model `{model}` does not exist or you do not have access to it.",
                                   "invalid_request_error", "model_not_found"))
            return
        if name == "error_200":
            self._send(200, {"error": {"message": "Provider returned error", "code": 502,
                                       "metadata": {"provider_name": "fake-upstream"}}})
            return
        headers: dict[str, str] = {"x-request-id": f"req_{secrets.token_hex(6)}"}
        if name != "drop_headers":
            headers.update({k: v for k, v in self.headers.items() if k.lower().startswith("x-rl-")})
        choices = _choices(body, deterministic=name == "deterministic")
        if body.get("stream") is True:
            self._stream(scenario, body, choices, headers)
            return
        completion = _completion(body, choices)
        if name == "empty_choices":
            completion["choices"] = []
        self._send(200, completion, headers=headers, compress=name == "gzip")

    def _stream(self, scenario: Scenario, body: Mapping[str, Any], choices: list[_Choice],
                headers: Mapping[str, str]) -> None:
        name = scenario.name
        chunks = _chunks(body, choices)
        self._start_stream(headers)
        if name == "stream_quirky":
            self._quirky(chunks)
            return
        if name == "empty_choices":
            for c in chunks:
                self._chunk(_sse({**c, "choices": []}))
            self._chunk(b"data: [DONE]\n\n")
            self._end_stream()
            return
        if name == "stream_truncated":
            for c in chunks:
                if any(ch.get("finish_reason") for ch in c["choices"]) or not c["choices"]:
                    break
                self._chunk(_sse(c))
            self._end_stream()
            return
        for i, c in enumerate(chunks):
            if i == 2 and name in ("stream_stall", "stream_reset"):
                if name == "stream_reset":
                    self._reset()
                else:
                    self._stall(scenario)
                return
            if i == 2 and name == "stream_error_event":
                self._chunk(b'event: error\ndata: {"error":{"message":"upstream model overloaded",'
                            b'"type":"server_error","code":502}}\n\n')
                self._end_stream()
                return
            if i == 2 and name == "stream_bad_json":
                self._chunk(b'data: {"id":"chatcmpl-broken","choices":[{"index":0,"delta":{"content":"oops"\n\n')
            self._chunk(_sse(c))
        self._chunk(b"data: [DONE]\n\n")
        self._end_stream()

    def _quirky(self, chunks: list[dict[str, Any]]) -> None:
        text = b": keep-alive\r\n\r\n"
        for c in chunks:
            text += b": OPENROUTER PROCESSING\r\n\r\nevent: message\r\n" + _sse(c).replace(b"\n", b"\r\n")
        text += b"data: [DONE]\r\n\r\n"
        step = 37  # writes cut events mid-line, as TCP segments do
        for start in range(0, len(text), step):
            self._chunk(text[start:start + step])
        self._end_stream()


def _retry_after(scenario: Scenario) -> dict[str, str]:
    value, fmt = scenario.retry_after, scenario.retry_after_format
    if fmt == "absent":
        return {}
    if fmt == "raw":
        return {"Retry-After": str(value)}
    seconds = float(value)
    if fmt == "ms":
        return {"retry-after-ms": f"{seconds * 1000:g}"}
    if fmt == "date":
        return {"Retry-After": email.utils.formatdate(time.time() + seconds, usegmt=True)}
    return {"Retry-After": f"{seconds:g}"}
