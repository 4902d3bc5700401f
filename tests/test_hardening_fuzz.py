"""Hardening: no bad input crashes the plugin, and no message holds a secret (Hypothesis).

Each target is fed arbitrary input; only the documented exceptions may come out, each with a message:

- base-URL normalisation -> ``ConfigError`` (unicode hosts, IPv6 literals, userinfo, ports, percent-encoding);
  the userinfo password is in no message, and an accepted root always makes a URL httpx can send to;
- the SSE parser and assembler -> ``StreamError`` / ``ContractViolation``; re-chunking never changes the events,
  and any chunking of a valid stream assembles to the same message;
- contract validation -> ``ContractViolation``, over arbitrary JSON and arbitrary bodies;
- the diagnosis of any response -> a ``Diagnosis`` or None, never an exception, never a piece of the key;
- the doctor over files that hold a key -> no piece of the key in its text or JSON output;
- the cassette loader over truncated and corrupted YAML -> ``CassetteCorrupt`` naming the file and the fix.

The default profile is small (tests/conftest.py); ``--hypothesis-profile=ci`` is the nightly size.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import itertools
import json
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_taotoken import contracts, keys
from pytest_taotoken.diagnosis import Diagnosis, diagnose
from pytest_taotoken.errors import CassetteError, ConfigError, ContractViolation
from pytest_taotoken.settings import resolve_settings
from pytest_taotoken.sse import StreamError, assemble, iter_events, parse_events
from pytest_taotoken.urls import display_url, join, normalize_base_url

FRAGMENT = 8  # a run of this many characters of a secret counts as a leak
NO_FIXTURE_RESET = [HealthCheck.function_scoped_fixture]


def fragments(secret: str) -> set[str]:
    return {secret[i:i + FRAGMENT].lower() for i in range(len(secret) - FRAGMENT + 1)}


def leaks(secret: str, text: str) -> list[str]:
    """The pieces (>= 8 characters, any case) of ``secret`` found in ``text``."""
    low = text.lower()
    return sorted(g for g in fragments(secret) if g in low)


def canary_from(seed: bytes) -> str:
    """A 40-character high-entropy canary (not key-shaped), whatever bytes Hypothesis drew."""
    digest = hashlib.sha256(b"taotoken-canary" + seed).digest()
    return base64.b64encode(digest).decode().replace("+", "x").replace("/", "y")[:40]


@contextlib.contextmanager
def isolated_redactor() -> Iterator[None]:
    """Each example registers a fresh secret; forget it afterwards, so that a later example is not
    protected by an earlier registration, and the process-wide redactor does not grow without bound."""
    redactor = keys.REDACTOR
    with redactor._lock:  # test-only access to the private state
        saved = set(redactor._secrets)
    try:
        yield
    finally:
        with redactor._lock:
            redactor._secrets.clear()
            redactor._secrets.update(saved)
            redactor._pattern = None


# --------------------------------------------------------------------------- base URLs

PASSWORD_BODY = string.ascii_letters + string.digits + "-._~!$&'()*+,;=%"
ascii_label = st.text(alphabet=string.ascii_lowercase + string.digits + "-", min_size=1, max_size=12)
unicode_label = st.text(alphabet=st.characters(categories=("Ll", "Lu", "Lo", "Nd", "Mn")), min_size=1, max_size=8)
hosts = st.one_of(
    st.lists(ascii_label, min_size=1, max_size=3).map(".".join),
    st.lists(unicode_label, min_size=1, max_size=3).map(".".join),  # bücher.example, 例子.测试
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(lambda ip: f"[{ip}]"),
    st.sampled_from(["localhost", "LOCALHOST", "127.0.0.1", "[::1]", "xn--bcher-kva.example", "a..b", "-x-.com",
                     "[::1", "::1", "[fe80::1%25eth0]", "host_name", "h%41st", "exa mple.com", ""]),
)
ports = st.one_of(st.none(), st.integers(0, 70000).map(str), st.sampled_from(["", "abc", "-1", "٣", "08080"]))
segments = st.one_of(
    st.sampled_from(["api", "v1", "V1", "chat", "completions", "models", "openai", "", "%2F", "%7E", "%zz", "a%20b",
                     "é", "%C3%A9", "..", "."]),
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="/?#"), max_size=6),
)


@st.composite
def base_urls(draw: st.DrawFn) -> tuple[str, str | None]:
    """(a base URL as users paste them, the password in its userinfo or None)."""
    scheme = draw(st.sampled_from(["https://", "http://", "HTTPS://", "", "//", "ftp://", "https:/", "https:///"]))
    password: str | None = None
    userinfo = ""
    if draw(st.booleans()):
        user = draw(st.text(alphabet=string.ascii_letters + "%.-", max_size=6))
        # Upper-case markers that no lower-cased host or path can produce: a hit is the password itself.
        password = "QX7" + draw(st.text(alphabet=PASSWORD_BODY, min_size=1, max_size=12)) + "ZK9"
        userinfo = f"{user}:{password}@"
    port = draw(ports)
    netloc = userinfo + draw(hosts) + ("" if port is None else f":{port}")
    path = "/".join(draw(st.lists(segments, max_size=4)))
    url = scheme + netloc + ("/" + path if path else "")
    if draw(st.booleans()):
        url += "?" + draw(st.sampled_from(["utm_source=x", "key=abc", "a=1&b=%20", "", "?"]))
    if draw(st.booleans()):
        url += "#" + draw(st.text(max_size=5))
    return draw(st.sampled_from(["", " ", "\n"])) + url + draw(st.sampled_from(["", "/", " ", "\r\n"])), password


def _messages_of_url(raw: str) -> tuple[list[str], str | None]:
    """Every text normalisation shows for ``raw``, and the root (None when refused)."""
    try:
        result = normalize_base_url(raw, source="TAOTOKEN_BASE_URL")
    except ConfigError as exc:
        assert "Fix:" in str(exc) and exc.field == "base_url", str(exc)
        return [str(exc)], None
    texts = [f"{f.message} {f.fix}" for f in result.findings]
    return [*texts, str(result), display_url(result.root)], result.root


@given(base_urls())
def test_base_url_normalisation_accepts_or_refuses_cleanly(case: tuple[str, str | None]) -> None:
    raw, password = case
    texts, root = _messages_of_url(raw)
    if password is not None:
        for text in texts:
            assert password not in text, text
    if root is None:
        return
    assert "?" not in root and "#" not in root and not root.endswith("/")
    assert normalize_base_url(root).root == root  # idempotent
    # What the client will send to must be a URL httpx accepts: an accepted root never crashes a test later.
    url = httpx.URL(join(root, "chat/completions"))
    assert url.path.endswith("/v1/chat/completions")
    assert url.host


@given(st.text(max_size=120), st.text(alphabet=PASSWORD_BODY, min_size=1, max_size=10), st.text(max_size=40))
def test_arbitrary_text_with_a_password_only_raises_config_error(prefix: str, body: str, suffix: str) -> None:
    password = "QX7" + body + "ZK9"
    for raw in (prefix, f"{prefix}://u:{password}@{suffix}", f"u:{password}@{suffix}{prefix}"):
        texts, _ = _messages_of_url(raw)
        assert all(password not in t for t in texts if "@" in raw), texts
    assert password not in display_url(f"https://user:{password}@{suffix}")


# --------------------------------------------------------------------------- SSE

stream_tokens = st.sampled_from([
    b"data:", b"data: ", b"event: error\n", b"event: message\n", b": keep-alive\n", b"id: 1\n", b"retry: 10\n",
    b"\n", b"\r\n", b"\r", b"\n\n", b"[DONE]", b"{", b"}", b'{"choices":[{"index":0,"delta":{"content":"x"}}]}',
    b'{"error":{"message":"boom"}}', b'"', b"\xef\xbb\xbf", b"\xff\xfe", b"\x00", b"<html>", b"null", b"[]",
])
stream_bytes = st.one_of(st.binary(max_size=400), st.lists(stream_tokens | st.binary(max_size=8), max_size=40).map(b"".join))


def _cuts(draw: st.DataObject, data: bytes) -> list[bytes]:
    points = sorted(set(draw.draw(st.lists(st.integers(0, len(data)), max_size=12))))
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


@given(stream_bytes, st.data())
def test_sse_parser_takes_any_bytes_in_any_chunking(data: bytes, draw: st.DataObject) -> None:
    whole = parse_events(data)
    chunked = list(iter_events(_cuts(draw, data), clock=lambda: 0.0))
    assert chunked == whole
    for event in whole:
        assert isinstance(event.data, str) and event.offset >= 0 and event.line >= 1


@given(stream_bytes, st.data(), st.sampled_from(["compatible", "strict"]))
def test_sse_assembler_raises_only_stream_error_or_contract_violation(data: bytes, draw: st.DataObject,
                                                                      level: str) -> None:
    try:
        result = assemble(_cuts(draw, data), level=level, clock=lambda: 0.0)
    except (StreamError, ContractViolation) as exc:
        assert str(exc).strip()
        return
    assert result.done or any(c.finish_reason for c in result.choices)


@st.composite
def valid_streams(draw: st.DrawFn) -> tuple[bytes, dict[int, str], dict[int, str]]:
    """A valid chat stream (comments, event lines, any line ending), with its expected contents and finish reasons."""
    n = draw(st.integers(1, 3))
    base = {"id": "chatcmpl-fuzz", "object": "chat.completion.chunk", "created": 1700000000, "model": "fake-model"}
    events: list[dict[str, Any]] = []
    contents: dict[int, str] = {}
    reasons: dict[int, str] = {}
    for index in range(n):
        pieces = draw(st.lists(st.text(max_size=12), max_size=5))
        events.append({**base, "choices": [{"index": index, "delta": {"role": "assistant", "content": ""},
                                            "finish_reason": None}]})
        events += [{**base, "choices": [{"index": index, "delta": {"content": p}, "finish_reason": None}]}
                   for p in pieces]
        reason = draw(st.sampled_from(["stop", "length"]))
        events.append({**base, "choices": [{"index": index, "delta": {}, "finish_reason": reason}]})
        contents[index], reasons[index] = "".join(pieces), reason
    if draw(st.booleans()):
        events.append({**base, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}})
    eol = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
    out = b""
    for event in events:
        if draw(st.booleans()):
            out += b": OPENROUTER PROCESSING" + eol + eol
        if draw(st.booleans()):
            out += b"event: message" + eol
        sep = draw(st.sampled_from([b"data: ", b"data:"]))
        out += sep + json.dumps(event, ensure_ascii=draw(st.booleans())).encode() + eol + eol
    out += b"data: [DONE]" + eol + eol
    return out, contents, reasons


@given(valid_streams(), st.data())
def test_any_chunking_of_a_valid_stream_assembles_the_same_message(stream: tuple[bytes, dict[int, str], dict[int, str]],
                                                                   draw: st.DataObject) -> None:
    data, contents, reasons = stream
    result = assemble(_cuts(draw, data), clock=lambda: 0.0)
    assert result.done
    for index, text in contents.items():
        assert (result.message(index).get("content") or "") == text
        assert result.finish_reasons[index] == reasons[index]


# --------------------------------------------------------------------------- contracts

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["id", "object", "created", "model", "choices", "index", "message", "delta",
                                       "role", "content", "finish_reason", "usage", "tool_calls", "function",
                                       "arguments", "name", "type", "error", "data", "code"]) | st.text(max_size=6),
                      children, max_size=5),
    max_leaves=25,
)
VALID_COMPLETION = {"id": "c", "object": "chat.completion", "created": 1700000000, "model": "m",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


@st.composite
def mutated_completions(draw: st.DrawFn) -> Any:
    """A valid completion with one value somewhere replaced by arbitrary JSON (the interesting near misses)."""
    payload = json.loads(json.dumps(VALID_COMPLETION))
    node: Any = payload
    for _ in range(draw(st.integers(0, 3))):
        if isinstance(node, dict) and node:
            key = draw(st.sampled_from(sorted(node)))
            if isinstance(node[key], (dict, list)) and draw(st.booleans()):
                node = node[key]
                continue
            node[key] = draw(json_values)
            return payload
        if isinstance(node, list) and node:
            node[0] = draw(json_values)
            return payload
    return payload


def _validate(kind: str, payload: Any, level: str) -> None:
    try:
        warnings = contracts.validate(kind, payload, level)
    except ContractViolation as exc:
        assert str(exc).strip() and exc.path.startswith("$")
        return
    assert isinstance(warnings, list) and all(isinstance(w, str) for w in warnings)


@given(st.sampled_from(contracts.KINDS), st.sampled_from(contracts.LEVELS),
       st.one_of(json_values, mutated_completions()))
def test_contract_validation_of_any_json_raises_only_contract_violation(kind: str, level: str, payload: Any) -> None:
    _validate(kind, payload, level)


@given(st.sampled_from(contracts.KINDS), st.one_of(st.binary(max_size=200), st.text(max_size=200)))
def test_contract_validation_of_any_body_raises_only_contract_violation(kind: str, body: bytes | str) -> None:
    _validate(kind, body, "compatible")


# --------------------------------------------------------------------------- diagnosis: any response, no key

CONTENT_TYPES = ["application/json", "text/html; charset=utf-8", "text/plain", "text/event-stream", "", "application/xml"]


@st.composite
def responses_with_key(draw: st.DrawFn, key: str) -> tuple[int, str, bytes]:
    """A reply whose body holds the key at any offset, so that every cut the messages make may fall inside it."""
    pad = "x" * draw(st.integers(0, 650))
    where = draw(st.sampled_from(["message", "html", "text", "sse", "bearer", "nested"]))
    if where == "message":
        body = json.dumps({"error": {"message": f"{pad}Incorrect API key provided: {key}. {pad}", "code": "invalid_api_key"}})
    elif where == "nested":
        body = json.dumps({"error": {"message": {"detail": pad + key}, "metadata": {"raw": pad + key}}, "x": key})
    elif where == "html":
        body = f"<html><title>{pad}{key}</title><body>{key}</body></html>"
    elif where == "sse":
        body = f'data: {{"choices":[{{"index":0,"delta":{{"content":"{pad}{key}"}}}}]}}\n\ndata: {pad}{key}\n\n'
    elif where == "bearer":
        body = f"{pad}Authorization: Bearer {key}\n{pad}"
    else:
        body = pad + key
    status = draw(st.sampled_from([200, 400, 401, 403, 404, 405, 422, 429, 500, 502, 504]) | st.integers(100, 599))
    return status, draw(st.sampled_from(CONTENT_TYPES)), body.encode()


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(min_size=8, max_size=8), st.data())
def test_the_diagnosis_of_any_response_never_holds_a_piece_of_the_key(seed: bytes, draw: st.DataObject) -> None:
    key = canary_from(seed)
    with isolated_redactor():
        cfg = resolve_settings({"base_url": "https://gw.example/api", "timeout": 1, "max_retries": 0}, {},
                               {"TAOTOKEN_API_KEY": key}, mode="live")
        status, ctype, body = draw.draw(responses_with_key(key))
        stream = draw.draw(st.booleans())
        request = httpx.Request("POST", "https://gw.example/api/v1/chat/completions",
                                json={"model": "m", "messages": [], "stream": stream},
                                headers={"Authorization": f"Bearer {key}"})
        headers = {"content-type": ctype, "retry-after": draw.draw(st.sampled_from(["", "5", key, "x" * 70 + key]))}
        response = httpx.Response(status, headers=headers, content=body, request=request)
        found = diagnose(response=response, settings=cfg, fetch_models=False)
        if found is None:
            return
        assert isinstance(found, Diagnosis) and found.category and found.summary
        for text in (found.message(), json.dumps(found.as_dict()), repr(found), str(found.as_exception())):
            assert not leaks(key, text), (leaks(key, text), text)


# --------------------------------------------------------------------------- doctor: files that hold a key

#: Each template holds the key where that format keeps one, written so that every wrap below stays valid there.
DOCTOR_FILES: dict[str, str] = {
    ".env": "TAOTOKEN_API_KEY={k}\nOPENAI_BASE_URL={u}\nRL_SAMPLE_MODEL={m}\n",
    "profile.sh": "export TAOTOKEN_API_KEY=\"{k}\"\nexport TAOTOKEN_BASE_URL=\"{u}\"\n",
    "auth.json": '{{"base_url": "{u}", "api_key": "{k}", "model": "{m}"}}',
    "settings.json": '{{"openai.baseUrl": "{u}", "openai.apiKey": "{k}", "openai.model": "{m}"}}',
    "mini-swe-agent.yaml": "model:\n  model_name: {m}\n  model_kwargs:\n    api_base: {u}\n    api_key: {k}\n",
    "rl.toml": '[model]\nbase_url = "{u}"\napi_key = "{k}"\nsample_model = "{m}"\n',
    "config.json": '{{"current": "a", "profiles": [{{"name": "a", "base_url": "{u}", "api_key": "{k}", "model": "{m}"}}]}}',
    "mcp_settings.json": '{{"mcpServers": {{"s": {{"env": {{"OPENAI_API_KEY": "{k}", "OPENAI_BASE_URL": "{u}"}}}}}}}}',
}


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hardening-fuzz")


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(min_size=8, max_size=8), st.sampled_from(sorted(DOCTOR_FILES)), st.data())
def test_the_doctor_never_shows_a_piece_of_a_key_it_read(scratch: Path, seed: bytes, name: str,
                                                        draw: st.DataObject) -> None:
    from pytest_taotoken.doctor import render_text, run_doctor

    key = canary_from(seed)
    wrap = draw.draw(st.sampled_from(["{}", " {} ", "Bearer {}", "'{}'", "{}\\n"]))
    url = draw.draw(st.sampled_from(["https://taotoken.net/api", "{k}", "https://u:{k}@h.example/api/v1",
                                     "https://h.example/api?key={k}", "https://{k}.example/v1", "http://{k}"]))
    model = draw.draw(st.sampled_from(["qwen-max", "{k}", "openai/{k}"]))
    text = DOCTOR_FILES[name].format(k=wrap.format(key), u=url.format(k=key), m=model.format(k=key))
    folder = scratch / seed.hex()
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    with isolated_redactor():
        env = {"TAOTOKEN_BASE_URL": url.format(k=key)} if draw.draw(st.booleans()) else {}
        result = run_doctor([path], env, folder, include_env=True, probe=lambda host, port: False,
                            git=lambda p: "tracked")  # a literal key in a tracked file: one more message
        outputs = [render_text(result, verbose=True), json.dumps(result.to_dict(), ensure_ascii=False)]
        for out in outputs:
            assert not leaks(key, out), (leaks(key, out), out)


# --------------------------------------------------------------------------- cassettes: truncated and corrupted


def _good_cassette_text() -> str:
    from pytest_taotoken import _cassette as c

    sse = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'
    items = [
        c.Interaction(c.Request("POST", "http://127.0.0.1:1/api/v1/chat/completions", b'{"model":"m","messages":[]}',
                                {"content-type": ["application/json"]}),
                      c.Response(200, "OK", {"content-type": ["application/json"]}, b'{"choices":[]}')),
        c.Interaction(c.Request("POST", "http://127.0.0.1:1/api/v1/chat/completions", b'{"stream":true}'),
                      c.Response(200, "OK", {"content-type": ["text/event-stream"]}, sse, (20, len(sse) - 20))),
        c.Interaction(c.Request("GET", "http://127.0.0.1:1/api/v1/models"), c.Response(404, "Not Found", {}, b"\xff\xfe")),
        c.Interaction(c.Request("POST", "http://127.0.0.1:1/api/v1/chat/completions"), None,
                      c.Failure("ReadTimeout", "timed out")),
    ]
    return c.dumps(items)


GOOD_CASSETTE = _good_cassette_text()
_counter = iter(range(10**9))


def _load(folder: Path, data: bytes) -> list[Any] | None:
    """Load ``data`` as a cassette from a fresh file; None when it is refused as corrupt (checked here)."""
    from pytest_taotoken import _cassette as c

    path = folder / f"case-{next(_counter)}.yaml"  # a new name each time: no cache can answer for it
    path.write_bytes(data)
    try:
        return list(c.load(path, display=path.name, fix='pytest --taotoken-record "tests/test_x.py::test_y"').interactions)
    except CassetteError as exc:
        message = str(exc)
        assert path.name in message, message
        assert 'pytest --taotoken-record "tests/test_x.py::test_y"' in message, message
        assert isinstance(exc, AssertionError)  # a test failure, never an internal error
        return None


def test_the_good_cassette_loads(scratch: Path) -> None:
    loaded = _load(scratch, GOOD_CASSETTE.encode())
    assert loaded is not None and len(loaded) == 4


@given(st.integers(0, len(GOOD_CASSETTE.encode()) - 1))
def test_a_truncated_cassette_is_refused_with_its_name_and_the_record_command(scratch: Path, cut: int) -> None:
    data = GOOD_CASSETTE.encode()
    loaded = _load(scratch, data[:cut])
    # ``version: 1`` is written last, so only a cut inside the final newline can still load (and then completely).
    assert loaded is None or len(loaded) == 4


@given(st.data())
def test_a_corrupted_cassette_loads_or_is_refused_never_crashes(scratch: Path, draw: st.DataObject) -> None:
    data = bytearray(GOOD_CASSETTE.encode())
    for _ in range(draw.draw(st.integers(1, 4))):
        at = draw.draw(st.integers(0, len(data)))
        action = draw.draw(st.sampled_from(["flip", "insert", "delete", "yaml"]))
        if action == "flip" and at < len(data):
            data[at] ^= draw.draw(st.integers(1, 255))
        elif action == "insert":
            data[at:at] = draw.draw(st.binary(min_size=1, max_size=8))
        elif action == "delete":
            del data[at:at + draw.draw(st.integers(1, 40))]
        else:
            data[at:at] = draw.draw(st.sampled_from([b"\n- ", b": ", b"!!python/object:os.system", b"&a [*a]", b"*a",
                                                     b"{", b"[[[[[[[[[[", b"\t", b"\x00", b"!!binary ==", b"%YAML 9\n",
                                                     b"---\n", b"version: 2\n"]))
    loaded = _load(scratch, bytes(data))
    assert loaded is None or isinstance(loaded, list)


@given(st.binary(max_size=300))
def test_arbitrary_bytes_as_a_cassette_are_refused_never_crash(scratch: Path, data: bytes) -> None:
    loaded = _load(scratch, data)
    assert loaded is None or isinstance(loaded, list)
