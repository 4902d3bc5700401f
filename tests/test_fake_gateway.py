"""The fault gateway itself: routes, recording, the valid scenarios' contents, faults that must not hang."""

from __future__ import annotations

import email.utils
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from pytest_taotoken import sse
from pytest_taotoken.testing import SCENARIOS, FakeGateway, Scenario

KEY = "sk-test-fake-0000000000001a2b"
AUTH = {"Authorization": f"Bearer {KEY}"}
HANG_BOUND_S = 10.0  # only catches a hang; the faults end in well under a second


def chat(model: str = "fake-model", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "Say hi"}], **extra}


@pytest.fixture
def gw() -> Iterator[FakeGateway]:
    with FakeGateway() as gateway:
        yield gateway


@pytest.fixture
def http(gw: FakeGateway) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gw.base_url, headers=AUTH, timeout=5, trust_env=False) as client:
        yield client


def post(http: httpx.Client, **extra: Any) -> httpx.Response:
    return http.post("/v1/chat/completions", json=chat(**extra))


def content(response: httpx.Response, index: int = 0) -> str:
    return str(response.json()["choices"][index]["message"]["content"])


# --------------------------------------------------------------------------- lifecycle and routes


def test_addresses_and_lifecycle() -> None:
    gw = FakeGateway()
    with pytest.raises(RuntimeError, match="not started"):
        _ = gw.url
    with gw:
        port = gw.port
        assert gw.url == f"http://127.0.0.1:{port}"
        assert gw.base_url == gw.url + "/api"
        assert gw.start() is gw  # idempotent
    gw.stop()  # idempotent
    with pytest.raises(httpx.ConnectError), httpx.Client(trust_env=False) as client:
        client.get(f"http://127.0.0.1:{port}/v1/models", timeout=2)


def test_every_route_and_the_unknown_ones(gw: FakeGateway, http: httpx.Client) -> None:
    for prefix in (gw.url + "/api/v1", gw.url + "/v1"):
        assert http.post(prefix + "/chat/completions", json=chat()).status_code == 200
        models = http.get(prefix + "/models").json()
        assert [m["id"] for m in models["data"]] == ["fake-model", "fake-model-large"]
    missing = http.post(gw.url + "/api/v1/v1/chat/completions", json=chat())
    assert (missing.status_code, missing.json()) == (404, {"detail": "Not Found"})
    assert http.get(gw.url + "/api/v1/chat/completions").status_code == 405


def test_records_every_request_with_headers_and_masks_the_key_in_repr(gw: FakeGateway, http: httpx.Client) -> None:
    http.post("/v1/chat/completions", json=chat(), headers={"X-RL-Version": "v42"})
    http.get("/v1/models")
    first, second = gw.requests
    assert (first.method, first.path, second.path) == ("POST", "/api/v1/chat/completions", "/api/v1/models")
    assert first.header("x-rl-version") == "v42" and first.header("AUTHORIZATION") == f"Bearer {KEY}"
    assert first.json()["model"] == "fake-model" and first.scenario == "ok"
    assert KEY not in repr(first) and "sk-…1a2b" in repr(first)
    gw.reset()
    assert gw.requests == []


def test_unknown_scenario_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="known: ok, deterministic"):
        FakeGateway("nope")


def test_the_fixture_yields_a_started_gateway(fake_gateway: FakeGateway) -> None:
    with httpx.Client(trust_env=False) as client:
        assert client.get(fake_gateway.base_url + "/v1/models", headers=AUTH).status_code == 200
    assert fake_gateway.scenario.name == "ok"


# --------------------------------------------------------------------------- the ok scenario


def test_ok_samples_at_random_but_repeats_at_temperature_zero_or_with_a_seed(http: httpx.Client) -> None:
    hot = {content(post(http, temperature=1.0)) for _ in range(6)}
    assert len(hot) >= 2
    assert len({content(post(http, temperature=0)) for _ in range(3)}) == 1
    assert len({content(post(http, temperature=1.0, seed=7)) for _ in range(3)}) == 1


def test_ok_gives_n_choices_usage_and_a_valid_contract(http: httpx.Client) -> None:
    from pytest_taotoken import contracts

    body = post(http, n=3, temperature=0.9).json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]
    contracts.validate("chat_completion", body)


def test_ok_honours_max_tokens_with_finish_reason_length(http: httpx.Client) -> None:
    choice = post(http, max_tokens=2).json()["choices"][0]
    assert choice["finish_reason"] == "length" and len(choice["message"]["content"].split()) == 2


def test_ok_calls_the_requested_tool(http: httpx.Client) -> None:
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}
    choice = post(http, tools=[tool], tool_choice="required").json()["choices"][0]
    call = choice["message"]["tool_calls"][0]
    assert choice["finish_reason"] == "tool_calls" and call["function"]["name"] == "get_weather"
    assert httpx.Response(200, content=call["function"]["arguments"]).json() == {"city": "fake", "days": 1}


def test_ok_streams_with_usage_and_done(http: httpx.Client) -> None:
    with http.stream("POST", "/v1/chat/completions",
                     json=chat(stream=True, stream_options={"include_usage": True}, temperature=0)) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        result = sse.assemble(response.iter_bytes())
    assert result.done and result.usage is not None and result.finish_reasons == {0: "stop"}
    assert result.message()["content"] == content(post(http, temperature=0))


def test_ok_streams_tool_calls(http: httpx.Client) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "q": {"type": "string"}}}}}
    response = post(http, stream=True, tools=[tool])
    result = sse.assemble(response.content)
    assert result.message()["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"q": "fake"}'}


def test_ok_echoes_x_rl_version_and_drop_headers_does_not(gw: FakeGateway, http: httpx.Client) -> None:
    assert post(http, temperature=0).headers.get("x-rl-version") is None
    echoed = http.post("/v1/chat/completions", json=chat(), headers={"X-RL-Version": "abc123"})
    assert echoed.headers["x-rl-version"] == "abc123"
    gw.scenario = "drop_headers"
    dropped = http.post("/v1/chat/completions", json=chat(), headers={"X-RL-Version": "abc123"})
    assert dropped.status_code == 200 and "x-rl-version" not in dropped.headers


def test_ok_rejects_unknown_models_and_missing_or_wrong_keys() -> None:
    with FakeGateway(api_key=KEY) as gw, httpx.Client(base_url=gw.base_url, trust_env=False) as client:
        assert client.post("/v1/chat/completions", json=chat()).status_code == 401
        wrong = client.post("/v1/chat/completions", json=chat(), headers={"Authorization": "Bearer sk-other-0000000000009999"})
        assert (wrong.status_code, wrong.json()["error"]["code"]) == (401, "invalid_api_key")
        unknown = client.post("/v1/chat/completions", json=chat("gpt-nope"), headers=AUTH)
        assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "model_not_found")
        assert client.post("/v1/chat/completions", content=b"{not json", headers=AUTH).status_code == 400


def test_deterministic_ignores_temperature(gw: FakeGateway, http: httpx.Client) -> None:
    gw.scenario = "deterministic"
    assert len({content(post(http, temperature=t)) for t in (0, 0.7, 1.0, 1.3)}) == 1


def test_requests_are_served_concurrently_but_serial_takes_one_at_a_time(gw: FakeGateway) -> None:
    def burst() -> int:
        gw.reset()
        with httpx.Client(base_url=gw.base_url, headers=AUTH, trust_env=False) as client:
            threads = [threading.Thread(target=post, args=(client,)) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(HANG_BOUND_S)
        assert len(gw.requests) == 4
        return gw.max_in_flight

    gw.latency = 0.2
    assert burst() >= 2
    gw.scenario = "serial"
    assert burst() == 1


def test_gzip_compresses_and_stays_valid(gw: FakeGateway, http: httpx.Client) -> None:
    gw.scenario = "gzip"
    response = post(http)
    assert response.headers["content-encoding"] == "gzip" and response.json()["choices"]


def test_stream_quirky_has_comments_event_lines_and_crlf_but_parses(gw: FakeGateway, http: httpx.Client) -> None:
    gw.scenario = "stream_quirky"
    response = post(http, stream=True)
    assert b"\r\n" in response.content and b": OPENROUTER PROCESSING" in response.content
    assert b"event: message" in response.content
    result = sse.assemble(response.content)
    assert result.done and result.message()["content"]


# --------------------------------------------------------------------------- scripts and rate limits


def test_a_script_answers_in_order_then_the_scenario_takes_over(gw: FakeGateway, http: httpx.Client) -> None:
    gw.script("unauthorized", "rate_limited", Scenario("fastapi_404"))
    statuses = [post(http).status_code for _ in range(5)]
    assert statuses == [401, 429, 404, 200, 200]
    assert [r.scenario for r in gw.requests] == ["unauthorized", "rate_limited", "fastapi_404", "ok", "ok"]


@pytest.mark.parametrize(("fmt", "header", "check"), [
    ("seconds", "retry-after", lambda v: v == "2"),
    ("ms", "retry-after-ms", lambda v: v == "2000"),
    ("date", "retry-after", lambda v: email.utils.parsedate_to_datetime(v) is not None),
    ("absent", None, None),
])
def test_rate_limited_sends_retry_after_in_every_form_and_recovers(fmt: str, header: str | None, check: Any) -> None:
    with FakeGateway("rate_limited", retry_after=2, retry_after_format=fmt, recover_after=2) as gw, \
            httpx.Client(base_url=gw.base_url, headers=AUTH, trust_env=False) as client:
        first, second, third = (post(client) for _ in range(3))
    assert [first.status_code, second.status_code, third.status_code] == [429, 429, 200]
    assert first.json()["error"]["code"] == "rate_limit_exceeded"
    if header is None:
        assert "retry-after" not in first.headers and "retry-after-ms" not in first.headers
    else:
        assert check(first.headers[header])


@pytest.mark.parametrize(("name", "value"), [
    ("retry_after_huge", "99999"), ("retry_after_negative", "-5"), ("retry_after_garbage", "soon")])
def test_hardening_retry_after_presets_never_recover(gw: FakeGateway, http: httpx.Client, name: str, value: str) -> None:
    gw.scenario = name
    responses = [post(http) for _ in range(3)]
    assert {r.status_code for r in responses} == {429}
    assert responses[0].headers["retry-after"] == value


# --------------------------------------------------------------------------- faults


@pytest.mark.parametrize("name", ["html_200", "error_200", "empty_choices", "unauthorized", "oauth_expired",
                                  "model_not_found", "fastapi_404", "server_error", "bad_gateway_html",
                                  "gateway_timeout_html"])
def test_fault_scenarios_answer_as_documented(gw: FakeGateway, http: httpx.Client, name: str) -> None:
    gw.scenario = name
    response = post(http)
    expected = {"html_200": 200, "error_200": 200, "empty_choices": 200, "unauthorized": 401,
                "oauth_expired": 401, "model_not_found": 404, "fastapi_404": 404, "server_error": 500,
                "bad_gateway_html": 502, "gateway_timeout_html": 504}[name]
    assert response.status_code == expected
    if name == "html_200":
        assert response.text.startswith("<!DOCTYPE html>")
    if name == "empty_choices":
        assert response.json()["choices"] == []
    if name == "unauthorized":
        assert KEY not in response.text and "sk-…1a2b" in response.text


def test_unauthorized_echo_sends_the_key_back_for_leak_tests(gw: FakeGateway, http: httpx.Client) -> None:
    gw.scenario = "unauthorized_echo"
    assert KEY in post(http).text


def test_models_unlisted_hides_the_list_but_serves_chat(gw: FakeGateway, http: httpx.Client) -> None:
    gw.scenario = "models_unlisted"
    assert http.get("/v1/models").status_code == 404
    assert post(http).status_code == 200


@pytest.mark.parametrize(("name", "error"), [
    ("stream_truncated", "truncated"), ("stream_bad_json", "malformed_json"), ("stream_error_event", "error_event"),
    ("empty_choices", "empty")])
def test_stream_faults_are_what_their_names_say(gw: FakeGateway, http: httpx.Client, name: str, error: str) -> None:
    gw.scenario = name
    response = post(http, stream=True)
    assert response.status_code == 200
    with pytest.raises(sse.StreamError) as info:
        sse.assemble(response.content)
    assert info.value.reason == error


@pytest.mark.parametrize(("name", "stream"), [("hang", False), ("stall_body", False), ("stream_stall", True),
                                              ("slow", False)])
def test_stalls_end_in_a_read_timeout(gw: FakeGateway, http: httpx.Client, name: str, stream: bool) -> None:
    gw.scenario = name
    started = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        http.post("/v1/chat/completions", json=chat(stream=stream), timeout=0.3)
    assert time.monotonic() - started < HANG_BOUND_S


@pytest.mark.parametrize(("name", "stream"), [("reset", False), ("stream_reset", True)])
def test_resets_break_the_connection_mid_reply(gw: FakeGateway, http: httpx.Client, name: str, stream: bool) -> None:
    gw.scenario = name
    with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
        post(http, stream=stream)


def test_stop_releases_a_request_that_hangs() -> None:
    gw = FakeGateway("hang").start()
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            with httpx.Client(trust_env=False) as client:
                client.post(gw.base_url + "/v1/chat/completions", json=chat(), headers=AUTH, timeout=60)
        except httpx.HTTPError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    while not gw.requests:
        time.sleep(0.01)
    gw.stop()
    thread.join(HANG_BOUND_S)
    assert not thread.is_alive() and outcome and isinstance(outcome[0], httpx.TransportError)


def test_every_scenario_is_documented_and_constructible() -> None:
    for name in SCENARIOS:
        assert Scenario.of(name).name == name
    assert Scenario.of("retry_after_huge").retry_after == "99999"
