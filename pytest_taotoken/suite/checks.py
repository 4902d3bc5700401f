"""The bundled checks. Each proves one thing with the fewest tokens, and says the fix when it fails.

Check ids are stable: reports, users and the README depend on them.
"""

from __future__ import annotations

import difflib
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from ..client import EXPECT_ERROR
from ..retry import MAX_WAIT_S, parse_retry_after
from ..urls import client_base_urls, display_url
from .context import CheckContext, body_excerpt, content_of
from .registry import CheckFailed, check

RETRY_AFTER_LIMIT_S = 120.0  # the openai SDK will not wait longer than this
CONCURRENCY_SLACK_S = 0.05


def _validate(kind: str, payload: Any) -> None:
    from ..contracts import validate

    validate(kind, payload)


@check("models.list")
def models_list(ctx: CheckContext) -> None:
    """GET /v1/models: a valid list that holds every configured model."""
    response = ctx.client.get("v1/models", extensions={EXPECT_ERROR: True})
    if response.status_code in (404, 405):
        pytest.skip(f"the gateway does not list models (HTTP {response.status_code} on /v1/models)")
    payload = _json(response)
    if response.status_code != 200 or not isinstance(payload, dict):
        ctx.client.get("v1/models")  # raises ExchangeFailed with the diagnosis (an HTML page: bad_response)
        raise CheckFailed("bad_response", "GET /v1/models did not answer with a JSON object",
                          "check that the base URL is the gateway's API root", f"body: {body_excerpt(response)}")
    _validate("models_list", payload)
    ids = [m.get("id") for m in payload.get("data", []) if isinstance(m, dict)]
    ctx.details["listed"] = len(ids)
    if ctx.model not in ids:
        close = difflib.get_close_matches(ctx.model, [i for i in ids if isinstance(i, str)], n=3, cutoff=0.4)
        hint = f" Closest listed IDs: {', '.join(close)}." if close else ""
        raise CheckFailed("model_not_found", f"model {ctx.model!r} is not in the gateway's /v1/models list ({len(ids)} IDs).",
                          f"use an ID the key can reach.{hint} A local checkpoint name is not a model ID.")


@check("chat.basic")
def chat_basic(ctx: CheckContext) -> None:
    """One short completion: 200, contract valid, non-empty content."""
    with ctx.timer("request"):
        response = ctx.post(ctx.chat_body(max_tokens=16, temperature=0))
    payload = response.json()
    _validate("chat_completion", payload)
    text = content_of(payload)
    ctx.details["content_chars"] = len(text)
    if not text.strip():
        raise CheckFailed("bad_response", "the completion has empty content",
                          "check that the model ID is a chat model and that max_tokens is not swallowed by reasoning",
                          f"body: {body_excerpt(response)}")


LAYOUTS = {"v1": "/v1/chat/completions", "bare": "/chat/completions", "v1v1": "/v1/v1/chat/completions"}


@check("url.layout")
def url_layout(ctx: CheckContext) -> None:
    """Which URL layouts answer: {root}/v1/..., {root}/..., {root}/v1/v1/...; and the base URL per client."""
    root = ctx.settings.api_root.rstrip("/")
    from ..contracts import error_shape

    works: dict[str, bool] = {}
    answers: dict[str, str] = {}
    for name, path in LAYOUTS.items():
        try:
            response = ctx.post(ctx.chat_body(max_tokens=4, temperature=0), url=root + path, expect_error=True)
        except AssertionError as exc:
            works[name] = False
            answers[name] = str(exc).splitlines()[0][:120]
            continue
        payload = _json(response)
        works[name] = response.status_code == 200 and isinstance(payload, dict) and "choices" in payload
        if not works[name]:
            shape = error_shape(payload) if isinstance(payload, dict) else "not JSON"
            answers[name] = f"HTTP {response.status_code}, {shape} error shape"
    ctx.details["layouts"] = works
    ctx.details["failed_layouts"] = answers  # e.g. LiteLLM: /v1/v1 -> HTTP 404, fastapi error shape
    shown = display_url(root)  # a password in the URL's userinfo is masked wherever the URL is shown
    if works["v1"]:
        table = client_base_urls(shown)
    elif works["bare"]:
        # {root}/chat/completions answers: clients that append /chat/completions take the root itself;
        # clients that append /v1/chat/completions cannot reach this gateway.
        table = {k: (shown if v.endswith("/v1") else f"not served ({shown}/v1/chat/completions does not answer)")
                 for k, v in client_base_urls(shown).items()}
    else:
        table = {}
    ctx.details["client_base_urls"] = table
    if not any(works.values()) and not any(a.startswith(("HTTP 404", "HTTP 405")) for a in answers.values()):
        ctx.post(ctx.chat_body(max_tokens=4, temperature=0))  # no layout is missing: raise the real diagnosis
    if not any(works.values()):
        raise CheckFailed("base_url", f"no URL layout under {shown} answers a chat completion",
                          "set the base URL to the gateway's API root (for TaoToken https://taotoken.net/api); "
                          "the plugin appends /v1/chat/completions itself")


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


@check("auth.rejected")
def auth_rejected(ctx: CheckContext) -> None:
    """A wrong key must get 401 or 403 with an error body."""
    wrong = "sk-wrong-" + ctx.token(16)
    response = ctx.post(ctx.chat_body(max_tokens=4), headers={"Authorization": f"Bearer {wrong}"}, expect_error=True)
    ctx.details["status"] = response.status_code
    if response.status_code in (401, 403):
        if not isinstance(_json(response), dict):
            ctx.details["note"] = "rejected without a JSON error body"
        return
    if response.status_code == 200:
        raise CheckFailed("auth", "SECURITY: the gateway answered 200 to a wrong key",
                          "the endpoint does not check keys: put authentication in front of it before it carries a key",
                          f"body: {body_excerpt(response)}")
    raise CheckFailed("auth", f"a wrong key got HTTP {response.status_code}, not 401/403",
                      "a gateway should reject bad keys with 401; clients rely on it to tell auth errors apart",
                      f"body: {body_excerpt(response)}")


@check("model.unknown")
def model_unknown(ctx: CheckContext) -> None:
    """A model ID that cannot exist must get a 4xx with an error body that names the problem."""
    bogus = "taotoken-no-such-model-" + ctx.token(4)
    body = ctx.chat_body(max_tokens=4)
    body["model"] = bogus
    response = ctx.post(body, expect_error=True)
    ctx.details["status"] = response.status_code
    text = response.text.lower()
    if response.status_code == 400:
        ctx.details["finding"] = "unknown model answered 400 (OpenAI answers 404)"
    if 400 <= response.status_code < 500:
        if any(w in text for w in ("model", "not found", "does not exist", "invalid")):
            return
        raise CheckFailed("model_not_found", f"unknown model got HTTP {response.status_code} but the body does not say why",
                          "the gateway should name the unknown model in its error", f"body: {body_excerpt(response)}")
    raise CheckFailed("model_not_found", f"an unknown model ID got HTTP {response.status_code}",
                      "the gateway should answer 404 (or 400) with an error naming the model; a 200 means the model "
                      "ID is ignored or silently rerouted", f"body: {body_excerpt(response)}")


@check("chat.concurrency")
def chat_concurrency(ctx: CheckContext) -> None:
    """`samples` identical requests at once: all succeed, wall time within ratio x single latency."""
    n = ctx.settings.samples
    body = ctx.chat_body(max_tokens=8, temperature=0)
    ctx.post(body)  # warm-up
    singles = []
    for _ in range(2):
        start = time.perf_counter()
        ctx.post(body)
        singles.append(time.perf_counter() - start)
    single = statistics.median(singles)
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=n) as pool:
        responses = list(pool.map(lambda _: ctx.post(body), range(n)))
    wall = time.perf_counter() - start
    for response in responses:
        _validate("chat_completion", response.json())
    ratio_limit = ctx.options.concurrency_ratio
    ratio = wall / single if single > 0 else 0.0
    ctx.details.update({"samples": n, "single_latency_s": round(single, 4), "wall_s": round(wall, 4),
                        "ratio_limit": ratio_limit})
    if not ctx.measuring:
        ctx.details["ratio"] = "not measured in replay"
        return
    ctx.details["ratio"] = round(ratio, 2)
    # A fixed slack keeps thread start-up noise from failing very fast endpoints.
    if wall > ratio_limit * single + CONCURRENCY_SLACK_S:
        raise CheckFailed("concurrency",
                          f"{n} parallel requests took {wall:.2f} s, {ratio:.1f}x one request ({single:.2f} s);"
                          f" the limit is {ratio_limit:g}x: requests are served one at a time",
                          "raise the gateway's or the model server's concurrency (workers, max_num_seqs, rpm "
                          "limits) or sampling will not be parallel; --taotoken-concurrency-ratio sets the limit")


@check("chat.diversity")
def chat_diversity(ctx: CheckContext) -> None:
    """`samples` separate requests at temperature 0.8: at least 2 distinct outputs."""
    temperature = ctx.options.diversity_temperature
    outputs = []
    for _ in range(max(2, ctx.settings.samples)):  # one sample cannot show diversity
        payload = ctx.post(ctx.chat_body("Write one random word.", max_tokens=8, temperature=temperature)).json()
        _validate("chat_completion", payload)
        outputs.append(content_of(payload))
    distinct = len(set(outputs))
    ctx.details.update({"samples": len(outputs), "distinct": distinct, "temperature": temperature})
    if distinct < 2:
        raise CheckFailed("diversity",
                          f"{len(outputs)} samples at temperature {temperature:g} were all identical",
                          "the gateway ignores temperature or caches replies: turn off response caching for "
                          "sampling, or check that temperature is forwarded to the model")


@check("chat.determinism")
def chat_determinism(ctx: CheckContext) -> None:
    """Informational: 2 requests at temperature 0 with a seed; whether they match goes in the report."""
    seed = ctx.rng.randrange(1, 2**31)
    outputs = []
    try:
        for _ in range(2):
            outputs.append(content_of(ctx.post(ctx.chat_body(max_tokens=8, temperature=0, seed=seed)).json()))
    except AssertionError as exc:
        ctx.details["error"] = str(exc).splitlines()[0][:200]
        pytest.skip(f"informational check could not run: {ctx.details['error']}")
    ctx.details.update({"seed": seed, "matched": outputs[0] == outputs[1]})


@check("headers.passthrough")
def headers_passthrough(ctx: CheckContext) -> None:
    """X-RL-Version reaches the model: it comes back in a response header or the content."""
    version = "rl-" + ctx.token(6)
    body = ctx.chat_body(max_tokens=16, temperature=0)
    try:
        response = ctx.post(body, headers={"X-RL-Version": version})
    except AssertionError:
        ctx.post(body)  # without the header: if this works, the header broke the request
        raise CheckFailed("header_passthrough", "the request fails with an X-RL-Version header and works without it",
                          "the gateway rejects custom headers: allow x-* headers or record the version in the request "
                          "body (metadata/user field)") from None
    seen_in = [name for name, value in response.headers.items() if version in value]
    in_content = version in response.text
    ctx.details.update({"version": version, "in_headers": seen_in, "in_content": in_content})
    if not seen_in and not in_content:
        pytest.skip("the endpoint gives no way to see whether X-RL-Version reached the model (not echoed in headers "
                    "or content); record the version in your application's own logs or request metadata")


@check("chat.stream")
def chat_stream(ctx: CheckContext) -> None:
    """stream: true with include_usage: every chunk valid, [DONE] seen, content non-empty, usage reported."""
    from ..sse import assemble

    body = ctx.chat_body(max_tokens=16, temperature=0, stream=True, stream_options={"include_usage": True})
    start = time.perf_counter()
    with ctx.client.stream("POST", "v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            response.read()
            ctx.post(body)  # raises the diagnosis
        result = assemble(response.iter_bytes(), started_at=start)
    ctx.add_usage(result.usage)
    content = result.message(0).get("content")
    text = content if isinstance(content, str) else ""
    ttft = result.time_to_first_token
    ctx.details.update({"chunks": len(result.chunks), "done": result.done, "usage_present": result.usage is not None,
                        "content_chars": len(text),
                        "ttft_s": round(ttft, 4) if (ctx.measuring and ttft is not None) else "not measured in replay"})
    if result.usage is None:
        ctx.details["note"] = "no usage chunk although stream_options.include_usage was sent"
    if not result.done:
        raise CheckFailed("stream", f"the stream ended without 'data: [DONE]' after {len(result.chunks)} chunk(s)",
                          "OpenAI clients wait for [DONE]; put the gateway (e.g. LiteLLM) in front of a server that "
                          "omits it, or fix the server")
    if not text.strip():
        raise CheckFailed("stream", "the stream assembled to empty content",
                          "check that the model streams content deltas (not only reasoning)")


TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city.",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                        "required": ["city"]}}}


@check("chat.tools")
def chat_tools(ctx: CheckContext) -> None:
    """One tool with tool_choice required: tool_calls valid and their arguments parse as JSON."""
    body = ctx.chat_body("What is the weather in Paris? Use the tool.", max_tokens=48, temperature=0,
                         tools=[TOOL], tool_choice="required")
    response = ctx.post(body, expect_error=True)
    if response.status_code == 400 and "tool" in response.text.lower():
        pytest.skip(f"the model refuses tools: {body_excerpt(response, 160)}")
    if response.status_code != 200 or not isinstance(_json(response), dict):
        ctx.post(body)  # raises the diagnosis (an error status, or an HTML page: bad_response)
    payload = response.json()
    _validate("chat_completion", payload)
    calls = (payload["choices"][0].get("message") or {}).get("tool_calls") or []
    ctx.details["tool_calls"] = len(calls)
    if not calls:
        pytest.skip("the model answered without a tool call although tool_choice=required; it may not support tools")
    for call in calls:
        arguments = call.get("function", {}).get("arguments")
        try:
            json.loads(arguments)
        except (TypeError, ValueError):
            raise CheckFailed("contract", f"tool call arguments do not parse as JSON: {str(arguments)[:120]!r}",
                              "the gateway or model must return function.arguments as a JSON string") from None


@check("chat.multiturn")
def chat_multiturn(ctx: CheckContext) -> None:
    """A 5-message agent turn (system, user, assistant tool call, tool result, user): 200 and contract valid."""
    call_id = "call_" + ctx.token(6)
    messages = [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": call_id, "content": '{"temp_c": 18}'},
        {"role": "user", "content": "Answer in one word."},
    ]
    body = {"model": ctx.model, "messages": messages, "max_tokens": 8, "temperature": 0, "tools": [TOOL]}
    payload = ctx.post(body).json()
    _validate("chat_completion", payload)


@check("rate_limit.retry_after", opt_in="taotoken_burst")
def rate_limit_retry_after(ctx: CheckContext) -> None:
    """Opt-in burst: any 429 carries a parseable Retry-After <= 120 s and an error body; retries end in success."""
    n = ctx.options.burst
    body = ctx.chat_body(max_tokens=4, temperature=0)
    raw = httpx.Client(base_url=ctx.client.base_url, headers=dict(ctx.client.headers), timeout=ctx.client.timeout)
    with raw, ThreadPoolExecutor(max_workers=min(n, 32)) as pool:
        responses = list(pool.map(lambda _: raw.post("v1/chat/completions", json=body), range(n)))
    limited = [r for r in responses if r.status_code == 429]
    ctx.extra_requests += n
    ctx.details.update({"burst": n, "rate_limited": len(limited)})
    if not limited:
        pytest.skip(f"no 429 in a burst of {n}: the key's limit is above that (raise --taotoken-burst to probe it)")
    first = limited[0]
    hint = parse_retry_after(first.headers)
    ctx.details["retry_after"] = hint.raw
    if hint.seconds is None:
        raise CheckFailed("rate_limit", f"429 without a usable Retry-After ({hint.error or 'header absent'})",
                          "the gateway should send Retry-After (seconds) with every 429 so clients can back off")
    if hint.seconds > RETRY_AFTER_LIMIT_S:
        raise CheckFailed("rate_limit", f"429 asks to wait {hint.seconds:g} s, above {RETRY_AFTER_LIMIT_S:g} s",
                          "the openai SDK will not wait that long; lower the gateway's window")
    if not isinstance(_json(first), dict):
        raise CheckFailed("rate_limit", "429 without a JSON error body", "send an OpenAI-style error body with 429")
    if hint.seconds <= MAX_WAIT_S:
        ctx.post(body)  # the retrying client must end in success
        ctx.details["recovered"] = True
