"""The SSE parser and stream assembly, on every recorded transcript and on hand-made edge cases."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_taotoken import contracts
from pytest_taotoken.errors import ContractViolation
from pytest_taotoken.sse import (
    SSEEvent,
    SSEParser,
    StreamAssembler,
    StreamError,
    aassemble,
    aiter_events,
    assemble,
    iter_events,
    parse_events,
)

FILES = Path(__file__).parent / "payloads" / "files"
SSE_FILES = sorted(p.name for p in FILES.glob("*.sse"))
JSONL_FILES = sorted(p.name for p in FILES.glob("*.jsonl"))
ERROR_STREAMS = {
    "groq__stream_error__1.sse": "Tool call validation failed",
    "openrouter__stream_error__1.sse": "Token limit reached",
}


def body(name: str) -> bytes:
    return (FILES / name).read_bytes()


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c for c in cuts if 0 < c < len(data)})
    return [data[a:b] for a, b in itertools.pairwise([0, *points, len(data)])]


def key(events: list[SSEEvent]) -> list[tuple[str, str, str | None, int | None]]:
    return [(e.data, e.event, e.id, e.retry) for e in events]


# --- every transcript ---------------------------------------------------------------------------


def test_the_catalogue_has_the_transcripts() -> None:
    assert len(SSE_FILES) == 51
    assert len(JSONL_FILES) == 9


@pytest.mark.parametrize("name", SSE_FILES)
def test_every_transcript_parses_and_assembles(name: str) -> None:
    result = assemble(body(name), check=False)
    assert result.events, "every transcript holds events"
    assert all(e.event in ("message", "error") for e in result.events)
    assert result.bytes_received == len(body(name))
    if name in ERROR_STREAMS:
        with pytest.raises(StreamError) as info:
            result.check()
        assert info.value.reason == "error_event"
        assert ERROR_STREAMS[name] in str(info.value)
        assert result.error_event is not None and info.value.offset == result.error_event.offset
        return
    result.check()
    assert result.choices
    assert all(c.finish_reason for c in result.choices) or result.done
    # The assembled reply satisfies the non-streamed contract: text, tool calls or a refusal.
    contracts.validate("chat_completion", result.to_completion())


@pytest.mark.parametrize("name", JSONL_FILES)
def test_every_recorded_chunk_list_assembles(name: str) -> None:
    asm = StreamAssembler()
    for line in body(name).splitlines():
        if line.strip():
            asm.feed_chunk(json.loads(line))
    result = asm.finish()
    assert result.choices and all(c.finish_reason for c in result.choices)
    contracts.validate("chat_completion", result.to_completion())


@given(st.sampled_from(SSE_FILES), st.data())
def test_random_rechunking_gives_the_same_events(name: str, draw: st.DataObject) -> None:
    data = body(name)
    cuts = draw.draw(st.lists(st.integers(1, len(data) - 1), max_size=60))
    whole = list(iter_events([data]))
    pieces = list(iter_events(chunked(data, cuts)))
    assert pieces == whole  # data, type, id, retry, offset, line, terminated
    assert key(pieces) == key(whole)


@given(st.sampled_from(SSE_FILES), st.sampled_from([b"\r\n", b"\r"]), st.data())
def test_line_endings_do_not_change_the_events(name: str, ending: bytes, draw: st.DataObject) -> None:
    data = body(name).replace(b"\r\n", b"\n")
    converted = data.replace(b"\n", ending)
    cuts = draw.draw(st.lists(st.integers(1, len(converted) - 1), max_size=40))
    assert key(list(iter_events(chunked(converted, cuts)))) == key(list(iter_events([data])))


@pytest.mark.parametrize("name", ["perplexity__stream_text__2.sse", "openrouter__stream_error__1.sse", *ERROR_STREAMS])
def test_one_byte_at_a_time_gives_the_same_events(name: str) -> None:
    data = body(name)
    assert list(iter_events(data[i : i + 1] for i in range(len(data)))) == list(iter_events(data))


@given(st.lists(st.integers(1, 4000), max_size=30))
def test_byte_at_a_time_and_random_chunks_assemble_the_same_message(cuts: list[int]) -> None:
    data = body("openai__stream_tool_calls__2.sse")
    assert assemble(chunked(data, cuts)).to_completion() == assemble(data).to_completion()


# --- the parser, per the specification ----------------------------------------------------------


def test_comments_are_kept_apart_and_not_dispatched() -> None:
    parser = SSEParser()
    events = parser.feed(b": OPENROUTER PROCESSING\n\n: ping\ndata: x\n\n") + parser.close()
    assert [e.data for e in events] == ["x"]
    assert [c[1] for c in parser.comments] == ["OPENROUTER PROCESSING", "ping"]


def test_fields_event_id_retry() -> None:
    [ev] = parse_events(b"event: error\nid: 7\nretry: 1500\ndata: {}\n\n")
    assert (ev.event, ev.id, ev.retry, ev.data) == ("error", "7", 1500, "{}")


def test_last_event_id_persists_and_bad_values_are_ignored() -> None:
    events = parse_events(b"id: a\ndata: 1\n\ndata: 2\n\nid: b\x00c\nretry: 1s\ndata: 3\n\n")
    assert [(e.id, e.retry) for e in events] == [("a", None), ("a", None), ("a", None)]


def test_multi_line_data_no_space_and_field_without_colon() -> None:
    [ev] = parse_events(b"data:first\ndata:  second\ndata\n\n")
    assert ev.data == "first\n second\n"


def test_line_endings_lf_crlf_cr_and_a_bom() -> None:
    lf, crlf, cr, bom = b"data: a\n\ndata: b\n\n", b"data: a\r\n\r\ndata: b\r\n\r\n", b"data: a\r\rdata: b\r\r", b"\xef\xbb\xbf"
    for text in (lf, crlf, cr, bom + lf):
        assert [e.data for e in parse_events(text)] == ["a", "b"], text


def test_a_cr_at_a_chunk_boundary_waits_for_its_lf() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\n") == []
    events = parser.feed(b"\r") + parser.feed(b"\ndata: b\r\n\r\n")
    assert [e.data for e in events] == ["a", "b"]
    assert [e.line for e in events] == [1, 3]


def test_an_event_without_data_is_not_dispatched() -> None:
    assert parse_events(b"event: ping\n\nevent: error\n\n") == []


def test_offsets_and_lines_locate_each_event() -> None:
    data = b": hi\n\ndata: one\n\nevent: x\ndata: two\n\n"
    events = parse_events(data)
    assert [(e.offset, e.line) for e in events] == [(data.index(b"data: one"), 3), (data.index(b"event: x"), 5)]


def test_an_unterminated_last_event_is_flushed_and_marked() -> None:
    events = parse_events(b"data: 1\n\ndata: [DONE]")
    assert [(e.data, e.terminated) for e in events] == [("1", True), ("[DONE]", False)]
    assert events[1].is_done


def test_unknown_fields_are_remembered() -> None:
    parser = SSEParser()
    parser.feed(b'{"error": "nope"}\n')
    parser.close()
    assert parser.ignored == [(0, '{"error": "nope"}')]


def test_feed_after_close_is_refused() -> None:
    parser = SSEParser()
    parser.close()
    with pytest.raises(ValueError, match="after close"):
        parser.feed(b"data: x\n\n")
    assert parser.close() == []


# --- assembly -----------------------------------------------------------------------------------


def test_content_is_concatenated_per_choice() -> None:
    result = assemble(body("openai__stream_multi_choice__1.sse"))
    assert [c.index for c in result.choices] == [0, 1]
    assert all(c.content and c.finish_reason == "stop" for c in result.choices)
    assert result.choices[0].content != result.choices[1].content


def test_tool_call_deltas_are_merged_by_index() -> None:
    calls = assemble(body("openai__stream_tool_calls__2.sse")).message()["tool_calls"]
    assert len(calls) == 2
    assert all(c["id"].startswith("call_") and c["function"]["name"] == "get_current_weather" for c in calls)
    assert [json.loads(c["function"]["arguments"])["location"] for c in calls] == ["Seattle, WA", "San Francisco, CA"]


def test_tool_calls_without_index_are_whole_calls() -> None:
    result = assemble(body("mistral__stream_tool_calls__2.sse"))
    calls = result.message()["tool_calls"]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("plus", {"a": 1, "b": 2}),
        ("minus", {"a": 2, "b": 1}),
    ]


def test_an_index_less_fragment_continues_the_previous_call() -> None:
    asm = StreamAssembler()
    for delta in (
        {"tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": '{"a":'}}]},
        {"tool_calls": [{"function": {"arguments": " 1}"}}]},
        {"tool_calls": [{"id": "c2", "function": {"name": "g", "arguments": "{}"}}]},
    ):
        asm.feed_chunk({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]})
    asm.feed_chunk({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    calls = asm.finish().message()["tool_calls"]
    assert [(c["id"], c["function"]["arguments"]) for c in calls] == [("c1", '{"a": 1}'), ("c2", "{}")]


def test_a_gemini_call_without_id_is_warned_about() -> None:
    result = assemble(body("google_gemini_openai__stream_tool_calls__1.sse"))
    assert result.finish_reasons == {0: "stop"}
    assert any("has no id" in w for w in result.warnings)


@pytest.mark.parametrize(
    ("name", "usage_choices"),
    [("openai__stream_usage__1.sse", []), ("litellm_proxy__stream_usage__1.sse", [{"index": 0, "delta": {}}])],
)
def test_the_usage_chunk_is_picked_up(name: str, usage_choices: list[Any]) -> None:
    result = assemble(body(name))
    assert result.usage is not None and result.usage["total_tokens"] > 0
    usage_chunks = [c for c in result.chunks if c.get("usage")]
    assert usage_chunks[-1]["choices"] == usage_choices
    assert result.to_completion()["usage"] == result.usage


def test_reasoning_is_assembled_apart_from_content() -> None:
    message = assemble(body("deepseek__stream_reasoning__1.sse")).message()
    assert message["content"].startswith("Hello there!")
    assert message["reasoning_content"]


def test_array_content_parts_split_into_text_and_thinking() -> None:
    asm = StreamAssembler()
    for content in ([{"type": "thinking", "thinking": [{"type": "text", "text": "hm"}]}], [{"type": "text", "text": "4"}]):
        asm.feed_chunk({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": content}}]})
    asm.feed_chunk({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    assert asm.finish().message() == {"role": "assistant", "content": "4", "reasoning_content": "hm"}


def test_a_refusal_is_assembled() -> None:
    message = assemble(body("openai__stream_refusal__1.sse")).message()
    assert message["content"] is None and message["refusal"]


def _cut_before_finish(data: bytes) -> bytes:
    return data[: data.index(b'"finish_reason":"stop"')].rsplit(b"\n\n", 1)[0] + b"\n\n"


def test_a_stream_without_done_or_finish_reason_is_truncated() -> None:
    data = _cut_before_finish(body("openai__stream_text__1.sse"))
    result = assemble(data, check=False)
    assert result.truncated
    with pytest.raises(StreamError, match="cut short") as info:
        result.check()
    assert info.value.reason == "truncated"
    assert info.value.offset == result.events[-1].offset


def test_a_finish_reason_without_done_is_a_warning() -> None:
    result = assemble(body("perplexity__stream_text__2.sse"))
    assert not result.done and not result.truncated
    assert any("without 'data: [DONE]'" in w for w in result.warnings)


def test_done_without_finish_reason_is_a_warning() -> None:
    result = assemble(body("litellm_proxy__stream_multi_choice__1.sse"))
    assert any("no finish_reason for choice(s) [1]" in w for w in result.warnings)


def test_malformed_chunk_json_reports_offset_and_line() -> None:
    good = body("openai__stream_text__1.sse")
    bad_line = b'data: {"id": "x", "choices": [\n\n'
    data = good[:0] + b": keep-alive\n\n" + bad_line + good
    with pytest.raises(StreamError) as info:
        assemble(data)
    assert (info.value.reason, info.value.offset, info.value.line) == ("malformed_json", data.index(bad_line), 3)
    assert f"at byte {data.index(bad_line)} (line 3)" in str(info.value)


def test_a_chunk_violation_names_the_event() -> None:
    data = b'data: {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": 5}}]}\n\n'
    with pytest.raises(ContractViolation) as info:
        assemble(data)
    assert info.value.path == "$.choices[0].delta.content"
    assert "stream event at byte 0 (line 1)" in str(info.value)


def test_validation_can_be_turned_off() -> None:
    data = b'data: {"object": "x", "choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": "stop"}]}\n\n'
    assert assemble(data, validate=False).message()["content"] == "a"


def test_an_event_error_line_without_json_is_still_an_error() -> None:
    with pytest.raises(StreamError, match="overloaded") as info:
        assemble(b"event: error\ndata: overloaded\n\n")
    assert info.value.reason == "error_event" and info.value.error == "overloaded"


def test_the_groq_error_event_carries_the_error_and_its_place() -> None:
    data = body("groq__stream_error__1.sse")
    with pytest.raises(StreamError) as info:
        assemble(data)
    assert info.value.error["error"]["code"] == "tool_use_failed"
    assert info.value.offset == data.index(b"event: error")


@pytest.mark.parametrize(
    "data",
    [
        b'{"error": {"message": "bad key"}}',
        b"<html><body>502 Bad Gateway</body></html>",
        b"",
        body("openai_spec_example__stream_text__1.txt"),
    ],
)
def test_a_body_that_is_not_an_event_stream(data: bytes) -> None:
    with pytest.raises(StreamError, match="not a text/event-stream") as info:
        assemble(data)
    assert info.value.reason == "not_sse"


def test_a_stream_with_only_done_is_empty() -> None:
    with pytest.raises(StreamError, match="no choices") as info:
        assemble(b"data: [DONE]\n\n")
    assert info.value.reason == "empty"


def test_events_after_done_are_warned_about() -> None:
    data = body("openai__stream_text__5.sse") + b'data: {"object": "chat.completion.chunk", "choices": []}\n\n'
    assert any("after 'data: [DONE]'" in w for w in assemble(data).warnings)


def test_a_foreign_event_type_is_ignored_with_a_warning() -> None:
    data = b"event: ping\ndata: {}\n\n" + body("openai__stream_text__5.sse")
    result = assemble(data)
    assert any("'ping'" in w for w in result.warnings)
    assert result.message()["content"] == "six"


def test_message_of_a_missing_choice() -> None:
    with pytest.raises(KeyError, match="indexes: \\[0\\]"):
        assemble(body("openai__stream_text__5.sse")).message(3)


# --- timing, sync and async byte iterators ------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_time_to_first_token_is_measured_per_event() -> None:
    lines = body("openai__stream_text__1.sse").split(b"\n\n")
    clock = FakeClock()
    result = assemble((line + b"\n\n" for line in lines if line), clock=clock, started_at=100.0)
    first_content = next(i for i, e in enumerate(result.events) if '"content":"' in e.data and '"content":""' not in e.data)
    assert result.first_event_at == result.events[0].received_at
    assert result.first_token_at == result.events[first_content].received_at
    assert result.time_to_first_token == result.first_token_at - 100.0
    assert result.finished_at is not None and result.finished_at >= result.first_token_at


def test_iter_events_accepts_whole_bytes_and_iterators() -> None:
    data = body("openai__stream_text__4.sse")
    assert list(iter_events(data)) == list(iter_events(iter([data[:5], data[5:]])))


async def _agen(pieces: list[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        await asyncio.sleep(0)
        yield piece


def test_async_parsing_and_assembly_match_sync() -> None:
    data = body("openai__stream_multi_choice__2.sse")
    pieces = chunked(data, list(range(7, len(data), 97)))

    async def run() -> tuple[list[SSEEvent], dict[str, Any]]:
        events = [e async for e in aiter_events(_agen(pieces))]
        result = await aassemble(_agen(pieces))
        return events, result.to_completion()

    events, completion = asyncio.run(run())
    assert events == list(iter_events(data))
    assert completion == assemble(data).to_completion()


def test_works_on_an_httpx_streamed_response() -> None:
    data = body("groq__stream_tool_calls__1.sse")

    def pieces() -> Iterator[bytes]:
        yield from chunked(data, list(range(13, len(data), 211)))

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=pieces())

    with (
        httpx.Client(transport=httpx.MockTransport(handler)) as client,
        client.stream("POST", "http://127.0.0.1/v1/chat/completions") as response,
    ):
        result = assemble(response.iter_bytes())
    assert result.finish_reasons == {0: "tool_calls"}
    assert result.message()["tool_calls"][0]["function"]["name"] == "get_something_by_name"


# --- the fast path for plain text deltas is a subset of the contract -------------------------------

def _recorded_chunks() -> list[Any]:
    from pytest_taotoken.sse import parse_events

    chunks: list[Any] = []
    for path in sorted(FILES.iterdir()):
        if path.suffix == ".jsonl":
            lines = path.read_text(encoding="utf-8").splitlines()
        elif path.suffix == ".sse":
            lines = [e.data for e in parse_events(path.read_bytes()) if not e.is_done]
        else:
            continue
        for line in lines:
            with contextlib.suppress(ValueError):
                chunks.append(json.loads(line))
    return chunks


def _accepted_without_warning(chunk: Any) -> bool:
    try:
        return contracts.validate("chat_completion_chunk", chunk) == []
    except ContractViolation:
        return False


def test_plain_delta_fast_path_only_takes_chunks_the_contract_accepts() -> None:
    from pytest_taotoken.sse import is_plain_delta

    chunks = _recorded_chunks()
    plain = [c for c in chunks if is_plain_delta(c)]
    assert len(chunks) > 1000 and len(plain) > 300  # the fast path is the common case
    assert all(_accepted_without_warning(c) for c in plain)


_values = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**12), st.text(max_size=5), st.just([]), st.just({}))


@given(st.fixed_dictionaries(
    {"id": _values, "object": st.sampled_from(["chat.completion.chunk", "chat.completion", ""]), "created": _values,
     "model": _values, "choices": st.lists(st.fixed_dictionaries(
         {"index": _values, "delta": st.one_of(_values, st.fixed_dictionaries(
             {"content": _values}, optional={"role": st.sampled_from(["assistant", "user", None])})),
          "finish_reason": _values}), max_size=2)},
    optional={"usage": _values, "system_fingerprint": _values, "extra": _values}))
def test_plain_delta_fast_path_property(chunk: dict[str, Any]) -> None:
    from pytest_taotoken.sse import is_plain_delta

    if is_plain_delta(chunk):
        assert _accepted_without_warning(chunk), chunk
