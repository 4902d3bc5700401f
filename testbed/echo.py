"""An OpenAI-shaped upstream that echoes the request headers it received.

It is routed as the LiteLLM model ``echo`` so that a test can prove, through a real proxy,
which client headers reach the upstream (``headers.passthrough``): the reply's content is a JSON
object ``{"headers": {...}, "sample": "..."}`` of the received ``x-*`` headers, and each of them
also comes back as a response header (LiteLLM returns upstream headers to the client prefixed
with ``llm_provider-``).

It behaves like a sampling model where the suite looks: ``sample`` is random unless the request
has ``temperature: 0`` or a ``seed`` (then it is a hash of seed and messages, so repeatable);
with ``tools`` it answers with a ``tool_calls`` reply whose arguments fit the tool's schema.
``--delay-ms`` adds think time (sleep, no CPU), like a real model's generation time: without it
the proxy's own CPU time per request dominates and a concurrency ratio measures the proxy's CPU,
not whether it serialises requests.

Stdlib only, so it runs with any interpreter; bound to 127.0.0.1 only.
Run as ``python -m testbed.echo [--port N] [--delay-ms MS]`` (port 0: a free one; printed).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import secrets
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "echo"
USAGE = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}


def echoed_headers(headers: Any) -> dict[str, str]:
    """The ``x-*`` request headers, lower-cased, minus any that could carry a credential."""
    return {
        k.lower(): v
        for k, v in headers.items()
        if k.lower().startswith("x-") and k.lower() not in {"x-api-key", "x-goog-api-key"}
    }


def sample_tag(req: dict[str, Any]) -> str:
    """Random per request, unless temperature 0 or a seed asks for repeatable output."""
    if req.get("temperature") == 0 or req.get("seed") is not None:
        material = json.dumps([req.get("seed"), req.get("messages")], sort_keys=True)
        return hashlib.sha256(material.encode()).hexdigest()[:12]
    return secrets.token_hex(6)


def tool_call(req: dict[str, Any]) -> dict[str, Any] | None:
    """A call of the chosen (or first) tool with arguments that fit its required properties."""
    tools = [t for t in req.get("tools") or [] if isinstance(t, dict) and t.get("type") == "function"]
    choice = req.get("tool_choice")
    if not tools or choice == "none":
        return None
    fn = tools[0]["function"]
    if isinstance(choice, dict) and choice.get("function", {}).get("name"):
        wanted = choice["function"]["name"]
        fn = next((t["function"] for t in tools if t["function"].get("name") == wanted), fn)
    schema = fn.get("parameters") or {}
    props = schema.get("properties") or {}
    filler = {"string": "echo", "integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}
    args = {name: filler.get(str(props.get(name, {}).get("type")), "echo") for name in schema.get("required") or []}
    return {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
            "function": {"name": fn.get("name", "tool"), "arguments": json.dumps(args)}}


def completion(req: dict[str, Any], content: str, call: dict[str, Any] | None) -> dict[str, Any]:
    """A minimal valid chat.completion object."""
    message: dict[str, Any] = {"role": "assistant", "content": None if call else content}
    if call:
        message["tool_calls"] = [call]
    return {
        "id": f"chatcmpl-echo-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(req.get("model") or MODEL),
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if call else "stop"}],
        "usage": USAGE,
    }


def chunks(req: dict[str, Any], content: str, call: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The same reply as chat.completion.chunk objects: role, content or tool call, finish, usage."""
    base = {"id": f"chatcmpl-echo-{uuid.uuid4().hex[:12]}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": str(req.get("model") or MODEL)}
    body: dict[str, Any] = {"tool_calls": [{"index": 0, **call}]} if call else {"content": content}
    deltas: list[tuple[dict[str, Any], str | None]] = [
        ({"role": "assistant", "content": ""}, None),
        (body, None),
        ({}, "tool_calls" if call else "stop"),
    ]
    out = [{**base, "choices": [{"index": 0, "delta": d, "finish_reason": f}]} for d, f in deltas]
    out.append({**base, "choices": [], "usage": USAGE})
    return out


class EchoHandler(BaseHTTPRequestHandler):
    """Answers GET /v1/models, GET /health and POST .../chat/completions; 404 otherwise."""

    protocol_version = "HTTP/1.1"
    server_version = "testbed-echo/1"
    # Headers and body go out in separate writes: without TCP_NODELAY each reply waits for the
    # client's delayed ACK (about 40 ms on Linux), which would fake a slow upstream.
    disable_nagle_algorithm = True
    delay_s = 0.0

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test bed keeps upstream logs short."""

    def _send_json(self, status: int, body: dict[str, Any], extra: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _not_found(self) -> None:
        self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._send_json(200, {"object": "list", "data": [
                {"id": MODEL, "object": "model", "created": 0, "owned_by": "testbed"}]})
        elif self.path == "/health":
            self._send_json(200, {"status": "ok"})
        else:
            self._not_found()

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._not_found()
            return
        try:
            req = json.loads(raw or b"{}")
            if not isinstance(req, dict):
                raise ValueError("not an object")
        except ValueError:
            self._send_json(400, {"error": {"message": "body is not a JSON object", "type": "invalid_request_error"}})
            return
        seen = echoed_headers(self.headers)
        content = json.dumps({"headers": seen, "sample": sample_tag(req)}, sort_keys=True)
        call = tool_call(req)
        if self.delay_s:
            time.sleep(self.delay_s)
        if not req.get("stream"):
            self._send_json(200, completion(req, content, call), seen)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        for k, v in seen.items():
            self.send_header(k, v)
        self.end_headers()
        for chunk in chunks(req, content, call):
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


def serve(port: int = 0, delay_ms: int = 0) -> ThreadingHTTPServer:
    """Bind the echo server on 127.0.0.1 (``port`` 0: a free one) without starting it."""
    handler = type("Handler", (EchoHandler,), {"delay_s": delay_ms / 1000})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="OpenAI-shaped upstream that echoes x-* headers")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay-ms", type=int, default=0)
    args = parser.parse_args(argv)
    server = serve(args.port, args.delay_ms)
    print(f"echo listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
