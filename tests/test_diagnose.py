"""Diagnosis: every fault gateway scenario and every recorded error body gets the right category and fix."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_taotoken import diagnosis as diagnose_module
from pytest_taotoken.client import EXPECT_ERROR, build_client
from pytest_taotoken.diagnosis import CATEGORIES, Diagnosis, check_response, diagnose, proxy_in_force
from pytest_taotoken.errors import ContractViolation, ExchangeFailed
from pytest_taotoken.retry import RetryLog
from pytest_taotoken.settings import Settings, resolve_settings
from pytest_taotoken.testing import SCENARIOS, FakeGateway

KEY = "sk-test-fake-0000000000001a2b"
PAYLOADS = Path(__file__).parent / "payloads" / "files"
PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture(autouse=True)
def no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests decide the proxy variables themselves, whatever the machine has set."""
    import os

    for name in list(os.environ):
        if name.lower() in PROXY_VARS:
            monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def gw() -> Iterator[FakeGateway]:
    with FakeGateway() as gateway:
        yield gateway


@pytest.fixture
def fresh(gw: FakeGateway) -> FakeGateway:
    gw.reset()
    gw.scenario = "ok"
    return gw


def make_settings(base_url: str, key: str | None = KEY, **cli: Any) -> Settings:
    env = {} if key is None else {"TAOTOKEN_API_KEY": key}
    return resolve_settings({"base_url": base_url, "timeout": 0.4, "max_retries": 0, **cli}, {}, env, mode="live")


def chat(model: str = "fake-model", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, **extra}


def failure(settings: Settings, body: dict[str, Any] | None = None, path: str = "/v1/chat/completions") -> ExchangeFailed:
    with build_client(settings, sleep=False) as client, pytest.raises(ExchangeFailed) as info:
        client.post(path, json=body or chat())
    return info.value


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --------------------------------------------------------------------------- every scenario, through the client

# scenario -> (send stream: true, category, a phrase of the remedy the fix must name)
FAULTS: dict[str, tuple[bool, str, str]] = {
    "html_200": (False, "bad_response", "wrong base URL"),
    "error_200": (False, "bad_response", "wrapped in HTTP 200"),
    "empty_choices": (False, "bad_response", "wrong base URL"),
    "unauthorized": (False, "auth", "TAOTOKEN_API_KEY"),
    "unauthorized_echo": (False, "auth", "passed to the child process"),
    "oauth_expired": (False, "oauth", "API-key mode"),
    "model_not_found": (False, "model_not_found", "closest IDs the gateway lists: fake-model"),
    "fastapi_404": (False, "base_url", "per client family"),
    "rate_limited": (False, "rate_limit", "lower parallel sampling"),
    "retry_after_huge": (False, "rate_limit", "more than the openai SDK honours"),
    "retry_after_negative": (False, "rate_limit", "negative or not finite"),
    "retry_after_garbage": (False, "rate_limit", "neither seconds nor an HTTP date"),
    "server_error": (False, "server_error", "retry later"),
    "bad_gateway_html": (False, "server_error", "report it to the gateway's operator"),
    "gateway_timeout_html": (False, "server_error", "retry later"),
    "slow": (False, "timeout", "at least 120 s"),
    "hang": (False, "timeout", "raise it with --taotoken-timeout"),
    "stall_body": (False, "timeout", "0.4 s (read) from --taotoken-timeout"),
    "reset": (False, "connection", "drops connections"),
    "stream_truncated": (True, "stream", "[DONE]"),
    "stream_bad_json": (True, "stream", "offending line"),
    "stream_error_event": (True, "stream", "inside the HTTP 200 stream"),
    "stream_stall": (True, "timeout", "at least 120 s"),
    "stream_reset": (True, "stream", "connection broke mid-stream"),
}
VALID = ("ok", "stream_quirky", "gzip", "deterministic", "drop_headers", "serial", "models_unlisted")


def test_every_scenario_is_covered_by_a_test() -> None:
    assert set(FAULTS) | set(VALID) == set(SCENARIOS)


@pytest.mark.parametrize("scenario", sorted(FAULTS))
def test_each_fault_scenario_gets_its_category_and_fix(fresh: FakeGateway, scenario: str) -> None:
    stream, category, remedy = FAULTS[scenario]
    fresh.scenario = scenario
    exc = failure(make_settings(fresh.base_url), chat(stream=stream))
    diagnosis = exc.diagnosis
    assert isinstance(diagnosis, Diagnosis)
    assert diagnosis.category == category, diagnosis.message()
    assert remedy in diagnosis.fix, diagnosis.message()
    assert str(exc) == diagnosis.message()
    assert str(exc).startswith(f"[{category}] ")


@pytest.mark.parametrize("scenario", VALID)
@pytest.mark.parametrize("stream", [False, True])
def test_valid_scenarios_give_no_diagnosis(fresh: FakeGateway, scenario: str, stream: bool) -> None:
    fresh.scenario = scenario
    with build_client(make_settings(fresh.base_url), sleep=False) as client:
        response = client.post("/v1/chat/completions", json=chat(stream=stream))
        models = client.get("/v1/models") if scenario != "models_unlisted" else None
    assert response.status_code == 200
    assert diagnose(response=response) is None
    assert models is None or diagnose(response=models) is None


def test_the_message_is_category_summary_then_fix_then_evidence(fresh: FakeGateway) -> None:
    fresh.scenario = "rate_limited"
    message = str(failure(make_settings(fresh.base_url, max_retries=1)))
    lines = message.splitlines()
    assert lines[0].startswith("[rate_limit] HTTP 429 from POST http://127.0.0.1:")
    assert lines[1].startswith("fix: lower parallel sampling")
    assert lines[2] == "evidence:"
    evidence = "\n".join(lines[3:])
    for item in ("request: POST http://127.0.0.1:", "/api/v1/chat/completions", "status: 429 Too Many Requests",
                 "content-type: application/json", "retry-after: 1", "retries: 2 attempts (statuses 429, 429",
                 "body: {\"error\"", "proxy: none"):
        assert item in evidence


def test_as_dict_is_json_ready(fresh: FakeGateway) -> None:
    fresh.scenario = "fastapi_404"
    diagnosis = failure(make_settings(fresh.base_url)).diagnosis
    data = json.loads(json.dumps(diagnosis.as_dict()))
    assert data["category"] == "base_url" and data["evidence"]["status"] == "404 Not Found"
    assert diagnosis.category in CATEGORIES


def test_expect_error_requests_are_not_diagnosed(fresh: FakeGateway) -> None:
    fresh.scenario = "unauthorized"
    with build_client(make_settings(fresh.base_url)) as client:
        response = client.post("/v1/chat/completions", json=chat(), extensions={EXPECT_ERROR: True})
    assert response.status_code == 401


# --------------------------------------------------------------------------- proxy and connection


@pytest.mark.parametrize("var", ["HTTPS_PROXY", "https_proxy", "ALL_PROXY"])
def test_a_dead_https_proxy_is_named_with_its_variable(monkeypatch: pytest.MonkeyPatch, var: str) -> None:
    proxy = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv(var, proxy)
    target = f"https://127.0.0.1:{closed_port()}/api"
    diagnosis = failure(make_settings(target)).diagnosis
    assert diagnosis.category == "proxy", diagnosis.message()
    assert f"unset {var}" in diagnosis.fix and "NO_PROXY" in diagnosis.fix and proxy in diagnosis.fix
    assert diagnosis.evidence["proxy"] == f"{var}={proxy}"


def test_a_dead_http_proxy_is_named_too(monkeypatch: pytest.MonkeyPatch, fresh: FakeGateway) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{closed_port()}")
    diagnosis = failure(make_settings(fresh.base_url)).diagnosis
    assert diagnosis.category == "proxy" and "unset HTTP_PROXY" in diagnosis.fix
    assert fresh.requests == []  # the request never reached the gateway


def test_no_proxy_switches_the_proxy_off(monkeypatch: pytest.MonkeyPatch) -> None:
    proxy = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("HTTPS_PROXY", proxy)
    monkeypatch.setenv("NO_PROXY", "example.com,127.0.0.1")
    assert proxy_in_force("https://127.0.0.1:1/api") is None
    assert proxy_in_force("https://api.example.com/v1") is None
    assert proxy_in_force("https://notexample.com/v1") == ("HTTPS_PROXY", proxy)  # a suffix is not a domain
    assert proxy_in_force("https://taotoken.net/api") == ("HTTPS_PROXY", proxy)
    assert proxy_in_force("http://taotoken.net/api") is None
    diagnosis = failure(make_settings(f"https://127.0.0.1:{closed_port()}/api")).diagnosis
    assert diagnosis.category == "connection"


def test_a_closed_port_without_proxy_is_a_connection_error() -> None:
    port = closed_port()
    diagnosis = failure(make_settings(f"http://127.0.0.1:{port}/api", max_retries=1)).diagnosis
    assert diagnosis.category == "connection", diagnosis.message()
    assert f"nothing accepts connections on 127.0.0.1:{port}" in diagnosis.summary
    assert f"127.0.0.1:{port}" in diagnosis.fix and "after 1 retry" in diagnosis.summary
    assert diagnosis.evidence["proxy"] == "none"


def test_dns_and_tls_failures_are_told_apart() -> None:
    request = httpx.Request("POST", "https://no-such-host.invalid/api/v1/chat/completions")
    dns = diagnose(request=request, exception=httpx.ConnectError("[Errno -2] Name or service not known"))
    tls = diagnose(request=request, exception=httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED] certificate"))
    assert dns is not None and tls is not None
    assert (dns.category, tls.category) == ("connection", "connection")
    assert "does not resolve" in dns.summary and "TLS handshake" in tls.summary


# --------------------------------------------------------------------------- auth details


def test_auth_names_an_unset_variable(fresh: FakeGateway) -> None:
    diagnosis = failure(make_settings(fresh.base_url, key=None)).diagnosis
    assert diagnosis.category == "auth"
    assert "no key was sent: TAOTOKEN_API_KEY is not set" in diagnosis.summary
    assert "export TAOTOKEN_API_KEY=" in diagnosis.fix and "child process" in diagnosis.fix


def test_auth_names_an_empty_variable(fresh: FakeGateway) -> None:
    settings = resolve_settings({"base_url": fresh.base_url}, {}, {"TAOTOKEN_API_KEY": "  "}, mode="live")
    assert "set but empty" in failure(settings).diagnosis.summary


def test_auth_flags_a_placeholder_key() -> None:
    with FakeGateway(api_key=KEY) as gw:
        diagnosis = failure(make_settings(gw.base_url, key="sk-xxxxxxxxxxxxxxxx")).diagnosis
    assert diagnosis.category == "auth" and "placeholder" in diagnosis.summary


def test_auth_flags_a_key_pasted_with_a_newline() -> None:
    with FakeGateway(api_key=KEY) as gw:
        diagnosis = failure(make_settings(gw.base_url, key="sk-test-fake-0000000000009999\n")).diagnosis
    assert diagnosis.category == "auth" and "newline" in diagnosis.summary


def test_auth_flags_a_missing_bearer(fresh: FakeGateway) -> None:
    with httpx.Client(trust_env=False) as client:
        response = client.post(fresh.base_url + "/v1/chat/completions", json=chat(), headers={"Authorization": KEY})
    diagnosis = diagnose(response=response)
    assert diagnosis is not None and diagnosis.category == "auth"
    assert "lacks the 'Bearer ' prefix" in diagnosis.summary and "Authorization: Bearer <key>" in diagnosis.fix


# --------------------------------------------------------------------------- model_not_found details


def test_model_hint_drops_an_extra_openai_prefix(fresh: FakeGateway) -> None:
    diagnosis = failure(make_settings(fresh.base_url), chat("openai/fake-model")).diagnosis
    assert diagnosis.category == "model_not_found"
    assert "drop the 'openai/' prefix (the gateway serves 'fake-model')" in diagnosis.fix
    assert [r.path for r in fresh.requests] == ["/api/v1/chat/completions", "/api/v1/models"]


def test_model_hint_adds_a_missing_openai_prefix() -> None:
    with FakeGateway(models=["openai/gpt-4o-mini"]) as gw:
        diagnosis = failure(make_settings(gw.base_url), chat("gpt-4o-mini")).diagnosis
    assert "openai/openai/gpt-4o-mini" in diagnosis.fix and "openai/gpt-4o-mini" in diagnosis.fix


def test_model_hint_warns_about_a_local_checkpoint_path(fresh: FakeGateway) -> None:
    diagnosis = failure(make_settings(fresh.base_url), chat("/data/ckpt/global_step_100")).diagnosis
    assert "looks like a local checkpoint path" in diagnosis.fix and "not a model ID" in diagnosis.fix


@pytest.mark.parametrize(("model", "local"), [
    ("/data/ckpt/global_step_100", True), ("./outputs/qwen-sft", True), ("C:\\models\\run1", True),
    ("runs/exp1/checkpoint-500", True), ("Qwen/Qwen2.5-7B-Instruct", False), ("openai/gpt-4o-mini", False),
    ("openrouter/anthropic/claude-3.5-sonnet", False), ("deepseek-v3", False)])
def test_local_checkpoint_names_are_recognised(model: str, local: bool) -> None:
    assert diagnose_module.looks_like_local_path(model) is local


def test_model_ids_can_be_given_and_replay_never_fetches(fresh: FakeGateway) -> None:
    with httpx.Client(trust_env=False) as client:
        response = client.post(fresh.base_url + "/v1/chat/completions", json=chat("fake-modle"),
                               headers={"Authorization": f"Bearer {KEY}"})
    given = diagnose(response=response, model_ids=["fake-model", "other"])
    replay = make_settings(fresh.base_url).with_changes(mode="replay")
    offline = diagnose(response=response, settings=replay)
    assert given is not None and "closest IDs the gateway lists: fake-model" in given.fix
    assert offline is not None and "GET http://127.0.0.1" in offline.fix
    assert [r.path for r in fresh.requests] == ["/api/v1/chat/completions"]


# --------------------------------------------------------------------------- base_url details


def test_a_doubled_v1_is_named(fresh: FakeGateway) -> None:
    with httpx.Client(trust_env=False) as client:
        response = client.post(fresh.base_url + "/v1/v1/chat/completions", json=chat())
    diagnosis = diagnose(response=response, settings=make_settings(fresh.base_url + "/v1"))
    assert diagnosis is not None and diagnosis.category == "base_url"
    assert "'/v1/v1'" in diagnosis.summary and f"openai-sdk: {fresh.base_url}/v1" in diagnosis.fix


@pytest.mark.parametrize(("status", "headers", "body"), [
    (404, {"content-type": "text/html"}, b"<html><body>404 page not found</body></html>"),
    (405, {"content-type": "application/json"}, b'{"detail":"Method Not Allowed"}'),
    (301, {"location": "https://taotoken.net/api/"}, b""),
])
def test_html_404_405_and_redirects_point_at_the_base_url(status: int, headers: dict[str, str], body: bytes) -> None:
    request = httpx.Request("POST", "https://taotoken.net/v1/chat/completions")
    diagnosis = diagnose(response=httpx.Response(status, headers=headers, content=body, request=request))
    assert diagnosis is not None and diagnosis.category == "base_url"
    assert "https://taotoken.net/v1/chat/completions" in diagnosis.fix


def test_a_base_url_without_path_or_with_a_query_is_explained() -> None:
    settings = make_settings("https://taotoken.net?utm_source=x")
    request = httpx.Request("POST", "https://taotoken.net/v1/chat/completions")
    response = httpx.Response(404, json={"detail": "Not Found"}, request=request)
    diagnosis = diagnose(response=response, settings=settings)
    assert diagnosis is not None and "query string" in diagnosis.fix and "/api" in diagnosis.fix


# --------------------------------------------------------------------------- bad responses and contracts


def test_json_without_choices_is_the_reading_choices_crash() -> None:
    request = httpx.Request("POST", "https://gw.example/api/v1/chat/completions")
    diagnosis = diagnose(response=httpx.Response(200, json={"id": "x", "object": "chat.completion"}, request=request))
    assert diagnosis is not None and diagnosis.category == "bad_response" and "'choices'" in diagnosis.summary


def test_plain_text_and_empty_bodies_are_bad_responses() -> None:
    request = httpx.Request("POST", "https://gw.example/api/v1/chat/completions")
    for response in (httpx.Response(200, text="upstream error", request=request),
                     httpx.Response(200, content=b"", request=request),
                     httpx.Response(200, json={"object": "list"}, request=httpx.Request("GET", "https://g/v1/models"))):
        found = diagnose(response=response)
        assert found is not None and found.category == "bad_response"


def test_a_reply_that_breaks_the_contract_is_a_contract_failure() -> None:
    request = httpx.Request("POST", "https://gw.example/api/v1/chat/completions")
    body = {"id": "x", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": "zero", "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
    with pytest.raises(ExchangeFailed) as info:
        check_response(httpx.Response(200, json=body, request=request), make_settings("https://gw.example/api"))
    diagnosis = info.value.diagnosis
    assert diagnosis.category == "contract" and "index" in diagnosis.evidence["path"]
    assert "breaks" in diagnosis.evidence["violation"]


def test_a_contract_violation_or_stream_error_as_exception() -> None:
    from pytest_taotoken import sse

    contract = diagnose(exception=ContractViolation("bad", kind="chat_completion_chunk", path="$.choices"))
    with pytest.raises(sse.StreamError) as info:
        sse.assemble(b'data: {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",'
                     b' "choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": null}]}\n\n')
    stream = diagnose(exception=info.value)
    assert contract is not None and contract.category == "contract" and contract.evidence["path"] == "$.choices"
    assert stream is not None and stream.category == "stream"
    assert stream.evidence["offset"] == str(info.value.offset) and "[DONE]" in stream.fix


def test_an_exchange_failed_keeps_its_diagnosis_and_unknown_errors_give_none() -> None:
    original = Diagnosis("auth", "s", "f", {"request": "GET https://x/v1/models"})
    raised = original.as_exception()
    assert isinstance(raised, AssertionError) and str(raised) == "[auth] s\nfix: f\nevidence:\n  request: GET https://x/v1/models"
    assert diagnose(exception=raised) is original
    assert diagnose(exception=KeyError("choices")) is None
    assert diagnose() is None


def test_check_response_is_silent_on_other_paths_and_good_replies() -> None:
    settings = make_settings("https://gw.example/api")
    other = httpx.Response(200, text="<html>", request=httpx.Request("GET", "https://gw.example/api/health"))
    check_response(other, settings)  # raises on a failure
    good = {"id": "x", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
    ok = httpx.Response(200, json=good, request=httpx.Request("POST", "https://gw.example/api/v1/chat/completions"))
    check_response(ok, settings, retry_log=RetryLog(attempts=1))
    assert diagnose(response=ok) is None


# --------------------------------------------------------------------------- rate limits


@pytest.mark.parametrize(("fmt", "phrase"), [
    ("absent", "sent no Retry-After"), ("ms", "(retry-after-ms: 1000)"), ("date", "asked to wait")])
def test_rate_limit_reports_each_retry_after_form(fmt: str, phrase: str) -> None:
    with FakeGateway("rate_limited", retry_after_format=fmt) as gw:
        diagnosis = failure(make_settings(gw.base_url)).diagnosis
    assert diagnosis.category == "rate_limit" and phrase in diagnosis.fix


def test_rate_limit_recovery_ends_in_success_with_retries_counted() -> None:
    with FakeGateway("rate_limited", recover_after=2, retry_after=0) as gw, \
            build_client(make_settings(gw.base_url, max_retries=2), sleep=False) as client:
        response = client.post("/v1/chat/completions", json=chat())
    assert response.status_code == 200 and client.stats.retries == 2


def test_an_exhausted_quota_is_not_worth_waiting_for() -> None:
    body = json.loads((PAYLOADS / "openai__error_429__1.json").read_text())
    request = httpx.Request("POST", "https://gw.example/api/v1/chat/completions")
    found = diagnose(response=httpx.Response(429, json=body, request=request))
    assert found is not None and "quota is exhausted" in found.fix and "quota is used up" in found.summary


# --------------------------------------------------------------------------- recorded error bodies

# file -> (HTTP status it came with, expected category). Statuses from tests/payloads/meta; where the
# recording lost it (issue threads) it is the status the provider documents; the Azure content filter
# error is served with the 400 its body states (its recording says 200).
ERROR_BODIES: dict[str, tuple[int, str]] = {
    "azure_openai__error_400_content_filter__1.json": (400, "bad_request"),
    "azure_openai__error_404_model__1.json": (404, "model_not_found"),
    "azure_openai__error_404_model__2.json": (404, "model_not_found"),
    "azure_openai__error_404_resource__1.json": (404, "base_url"),
    "deepseek__error_context_length__1.json": (400, "bad_request"),
    "groq__error_400__1.json": (400, "bad_request"),
    "groq__error_404_model__1.json": (404, "model_not_found"),
    "groq__stream_error__1.sse": (200, "stream"),
    "llamacpp__error_context_length__1.json": (400, "bad_request"),
    "llamacpp__error_context_length__2.json": (500, "bad_request"),
    "llamacpp__error_context_length__3.json": (500, "bad_request"),
    "ollama__error_404_model__1.json": (404, "model_not_found"),
    "openai__error_400__1.json": (400, "bad_request"),
    "openai__error_400__2.json": (400, "bad_request"),
    "openai__error_400__3.json": (400, "bad_request"),
    "openai__error_400__4.json": (400, "bad_request"),
    "openai__error_400__5.json": (400, "bad_request"),
    "openai__error_400__6.json": (400, "bad_request"),
    "openai__error_401__1.json": (401, "auth"),
    "openai__error_401__2.json": (401, "auth"),
    "openai__error_401__3.json": (401, "auth"),
    "openai__error_401__4.json": (401, "auth"),
    "openai__error_404_model__1.json": (404, "model_not_found"),
    "openai__error_404_model__2.json": (404, "model_not_found"),
    "openai__error_404_model__3.json": (404, "model_not_found"),
    "openai__error_429__1.json": (429, "rate_limit"),
    "openai__error_429__2.json": (429, "rate_limit"),
    "openai__error_429__3.json": (429, "rate_limit"),
    "openai__error_context_length__1.json": (400, "bad_request"),
    "openai__error_context_length__2.json": (400, "bad_request"),
    "openai__error_context_length__3.json": (400, "bad_request"),
    "openai_via_chatanywhere__error_429__1.json": (429, "rate_limit"),
    "openrouter__error_401__1.json": (401, "auth"),
    "openrouter__error_429__1.json": (429, "rate_limit"),
    "openrouter__error_429__2.json": (429, "rate_limit"),
    "openrouter__stream_error__1.sse": (200, "stream"),
    "vllm__error_400__1.json": (400, "bad_request"),
    "vllm__error_context_length__1.json": (400, "bad_request"),
}


def test_the_table_lists_every_error_payload() -> None:
    on_disk = {p.name for p in PAYLOADS.iterdir() if "__error_" in p.name or "__stream_error__" in p.name}
    assert on_disk == set(ERROR_BODIES)


@pytest.mark.parametrize("name", sorted(ERROR_BODIES))
def test_each_recorded_error_body_is_classified(name: str) -> None:
    status, category = ERROR_BODIES[name]
    ctype = "text/event-stream" if name.endswith(".sse") else "application/json"
    request = httpx.Request("POST", "https://gw.example/api/v1/chat/completions",
                            json=chat(stream=name.endswith(".sse")))
    response = httpx.Response(status, headers={"content-type": ctype}, content=(PAYLOADS / name).read_bytes(),
                              request=request)
    with pytest.raises(ExchangeFailed) as info:
        check_response(response, make_settings("https://gw.example/api").with_changes(mode="replay"))
    assert info.value.diagnosis.category == category, str(info.value)
    if "context_length" in name:
        assert "shorten the prompt" in info.value.diagnosis.fix


# --------------------------------------------------------------------------- no key in any message


CANARY = "CANARY-7d1f0e9a8b2c4d6e5f30"


def _assert_no_canary(text: str) -> None:
    for start in range(len(CANARY) - 7):
        assert CANARY[start:start + 8] not in text, text


@pytest.mark.parametrize("scenario", sorted(FAULTS))
def test_no_key_appears_in_any_message(fresh: FakeGateway, scenario: str) -> None:
    stream, _, _ = FAULTS[scenario]
    fresh.scenario = scenario
    exc = failure(make_settings(fresh.base_url, key=CANARY), chat(stream=stream))
    for text in (str(exc), repr(exc), exc.diagnosis.message(), json.dumps(exc.diagnosis.as_dict()),
                 repr(exc.diagnosis)):
        _assert_no_canary(text)


def test_key_shaped_strings_are_masked_even_when_unregistered() -> None:
    unregistered = "sk-proj-abcdefghijklmnop9876"
    request = httpx.Request("POST", "https://gw.example/api/v1/chat/completions",
                            headers={"Authorization": f"Bearer {unregistered}"})
    response = httpx.Response(401, json={"error": {"message": f"Incorrect API key provided: {unregistered}"}},
                              request=request)
    found = diagnose(response=response)
    assert found is not None and unregistered not in found.message() and "sk-…9876" in found.message()
    assert diagnose_module.mask_text(f"Authorization: Bearer {unregistered}") == "Authorization: Bearer sk-…9876"
