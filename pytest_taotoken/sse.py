"""Server-sent events: an incremental parser, and the assembly of a streamed chat completion.

The parser follows the HTML ``text/event-stream`` specification, because that is what clients
implement: ``:`` comment lines (``: OPENROUTER PROCESSING``), ``event:``/``id:``/``retry:`` fields,
LF, CRLF or CR line endings, multi-line ``data``, no space after the colon, a UTF-8 BOM. It works
on byte chunks of any size (an ``httpx`` ``iter_bytes()``), so that an event is reported as soon
as its closing blank line arrives and time to first token can be measured. Re-chunking the same
bytes never changes the events.

One deliberate departure: an event left open at the end of the stream (no closing blank line)
is still dispatched, marked ``terminated=False``, because recorders drop the final newline; a
spec-conforming client would lose it, so the assembler warns about it.

:class:`StreamAssembler` validates each chunk against the ``chat_completion_chunk`` contract and
builds the final message per choice: content concatenated, tool-call deltas merged by ``index``
(a delta without ``index`` is a whole call), ``finish_reason`` per choice, ``usage`` from the usage
chunk (``choices: []``, or LiteLLM's ``[{"index": 0, "delta": {}}]``). An ``event: error`` or an
error object inside the 200 stream, a stream that ends with neither ``[DONE]`` nor a
``finish_reason``, and a body that is not an event stream are reported by :meth:`StreamResult.check`
as :class:`StreamError`; malformed chunk JSON raises at once, with its byte offset and line.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from . import contracts, semantic
from .errors import ContractViolation
from .keys import redact

__all__ = [
    "SSEEvent",
    "SSEParser",
    "StreamAssembler",
    "StreamChoice",
    "StreamError",
    "StreamResult",
    "aassemble",
    "aiter_events",
    "assemble",
    "iter_events",
    "parse_events",
]

Clock = Callable[[], float]
DONE: Final = "[DONE]"
_LINE_END = re.compile(rb"\r\n|\r|\n")
_BOM: Final = b"\xef\xbb\xbf"
_TOKEN_FIELDS: Final = ("content", "reasoning_content", "reasoning", "refusal", "tool_calls", "function_call")


class StreamError(AssertionError):
    """A stream that cannot be used. ``reason`` is one of:

    ``malformed_json`` (a data event is not JSON), ``error_event`` (the server sent an error inside
    the stream; ``error`` holds it), ``truncated`` (neither ``[DONE]`` nor a ``finish_reason``),
    ``not_sse`` (the body is not an event stream), ``empty`` (no chunk with choices).
    ``offset`` is the byte offset and ``line`` the 1-based line number where the problem is seen.
    """

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        offset: int | None = None,
        line: int | None = None,
        error: Any = None,
    ) -> None:
        super().__init__(redact(message))
        self.reason = reason
        self.offset = offset
        self.line = line
        self.error = error


@dataclass(slots=True)  # created once per event on the hot path: slots, and no frozen __setattr__ detour
class SSEEvent:
    """One dispatched event. ``offset``/``line`` locate its first field line in the byte stream."""

    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None
    offset: int = 0
    line: int = 1
    terminated: bool = True
    received_at: float = field(default=0.0, compare=False)

    @property
    def is_done(self) -> bool:
        """``data: [DONE]``, OpenAI's end-of-stream sentinel."""
        return self.data.strip() == DONE


class SSEParser:
    """Incremental ``text/event-stream`` parser: :meth:`feed` bytes, then :meth:`close`.

    ``comments`` keeps ``(offset, text)`` of comment lines (keep-alives); ``ignored`` keeps lines
    whose field name is unknown, which is how a JSON or HTML body shows up when a stream was expected.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._base = 0  # absolute offset of _buf[0]
        self._scan = 0  # where in _buf to look for the next line end
        self._lines = 0  # lines completed so far
        self._data: list[str] = []
        self._type = ""
        self._last_id: str | None = None
        self._retry: int | None = None
        self._start: tuple[int, int] | None = None
        self._closed = False
        self.comments: list[tuple[int, str]] = []
        self.ignored: list[tuple[int, str]] = []
        self.bytes_seen = 0

    def feed(self, chunk: bytes | bytearray | memoryview, now: float = 0.0) -> list[SSEEvent]:
        """Parse ``chunk``; return the events it completes, stamped ``received_at=now``."""
        if self._closed:
            raise ValueError("SSEParser.feed() after close()")
        self._buf += chunk
        self.bytes_seen += len(chunk)
        return self._drain(now, final=False)

    def close(self, now: float = 0.0) -> list[SSEEvent]:
        """End of stream: parse a last unterminated line, dispatch an open event (``terminated=False``)."""
        if self._closed:
            return []
        self._closed = True
        events = self._drain(now, final=True)
        if self._buf:
            self._line(bytes(self._buf), self._base, now, events)
            self._base += len(self._buf)
            self._buf.clear()
            self._scan = 0
        if self._data:
            self._dispatch(now, events, terminated=False)
        return events

    def _drain(self, now: float, *, final: bool) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        buf = self._buf
        pos = 0
        while True:
            # Bytes before _scan hold no line end: a long line fed byte by byte stays linear.
            m = _LINE_END.search(buf, max(pos, self._scan))
            if m is None:
                self._scan = len(buf)
                break
            if m.group() == b"\r" and m.end() == len(buf) and not final:
                self._scan = m.start()  # a CR at the end may be the first half of CRLF
                break
            self._line(bytes(buf[pos : m.start()]), self._base + pos, now, events)
            pos = m.end()
        if pos:
            del buf[:pos]
            self._base += pos
            self._scan = max(0, self._scan - pos)
        return events

    def _line(self, raw: bytes, offset: int, now: float, events: list[SSEEvent]) -> None:
        self._lines += 1
        if offset == 0 and raw.startswith(_BOM):
            raw = raw[len(_BOM) :]
        if not raw:
            self._dispatch(now, events, terminated=True)
            return
        text = raw.decode("utf-8", errors="replace")
        if text.startswith(":"):
            self.comments.append((offset, text[1:].strip()))
            return
        name, colon, value = text.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if self._start is None:
            self._start = (offset, self._lines)
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._type = value
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self._retry = int(value)
        else:
            self.ignored.append((offset, semantic.cut(text, 120)))

    def _dispatch(self, now: float, events: list[SSEEvent], *, terminated: bool) -> None:
        start, data, kind, retry = self._start, self._data, self._type, self._retry
        self._start, self._data, self._type, self._retry = None, [], "", None
        if not data:
            return  # the spec drops events without data (also a lone "event: error")
        offset, line = start if start is not None else (0, 1)
        events.append(
            SSEEvent(
                data="\n".join(data),
                event=kind or "message",
                id=self._last_id,
                retry=retry,
                offset=offset,
                line=line,
                terminated=terminated,
                received_at=now,
            )
        )


def _as_chunks(source: bytes | bytearray | Iterable[bytes]) -> Iterable[bytes]:
    return [bytes(source)] if isinstance(source, (bytes, bytearray)) else source


def iter_events(
    source: bytes | bytearray | Iterable[bytes], *, parser: SSEParser | None = None, clock: Clock = time.perf_counter
) -> Iterator[SSEEvent]:
    """Events of a byte stream (e.g. ``response.iter_bytes()``), each as soon as it is complete."""
    p = parser if parser is not None else SSEParser()
    for chunk in _as_chunks(source):
        yield from p.feed(chunk, clock())
    yield from p.close(clock())


async def aiter_events(
    source: AsyncIterable[bytes], *, parser: SSEParser | None = None, clock: Clock = time.perf_counter
) -> AsyncIterator[SSEEvent]:
    """The async twin of :func:`iter_events` (e.g. ``response.aiter_bytes()``)."""
    p = parser if parser is not None else SSEParser()
    async for chunk in source:
        for event in p.feed(chunk, clock()):
            yield event
    for event in p.close(clock()):
        yield event


def parse_events(body: bytes | str) -> list[SSEEvent]:
    """All events of a complete body."""
    return list(iter_events(body.encode("utf-8") if isinstance(body, str) else body, clock=lambda: 0.0))


# --- assembly -----------------------------------------------------------------------------------


@dataclass
class StreamChoice:
    """What one choice of a stream adds up to."""

    index: int
    role: str | None = None
    content: str | None = None
    reasoning: str | None = None
    refusal: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    _by_index: dict[int, dict[str, Any]] = field(default_factory=dict, repr=False, compare=False)
    _open_call: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def message(self) -> dict[str, Any]:
        """The assembled assistant message, shaped like a non-streamed ``choices[].message``."""
        msg: dict[str, Any] = {"role": self.role or "assistant", "content": self.content}
        if self.refusal is not None:
            msg["refusal"] = self.refusal
        if self.reasoning is not None:
            msg["reasoning_content"] = self.reasoning
        if self.tool_calls:
            msg["tool_calls"] = self.tool_calls
        return msg


def _append(current: str | None, piece: Any) -> str | None:
    if isinstance(piece, str):
        return piece if current is None else current + piece
    return current


def _part_texts(parts: list[Any]) -> Iterator[tuple[str, str]]:
    """(``content``|``reasoning``, text) of array content parts (Mistral's text/thinking parts)."""
    for part in parts:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "thinking" or "thinking" in part:
            inner = part.get("thinking")
            if isinstance(inner, str):
                yield "reasoning", inner
            elif isinstance(inner, list):
                for sub in inner:
                    if isinstance(sub, dict) and isinstance(sub.get("text"), str):
                        yield "reasoning", sub["text"]
        elif isinstance(part.get("text"), str):
            yield "content", part["text"]


def _merge_delta(choice: StreamChoice, delta: dict[str, Any]) -> bool:
    """Fold one delta into ``choice``; True when it carried a token (for time to first token)."""
    token = any(delta.get(k) for k in _TOKEN_FIELDS)
    role = delta.get("role")
    if isinstance(role, str) and role:
        choice.role = role
    content = delta.get("content")
    if isinstance(content, list):
        for where, text in _part_texts(content):
            if where == "content":
                choice.content = _append(choice.content, text)
            else:
                choice.reasoning = _append(choice.reasoning, text)
    else:
        choice.content = _append(choice.content, content)
    choice.reasoning = _append(choice.reasoning, delta.get("reasoning_content"))
    choice.reasoning = _append(choice.reasoning, delta.get("reasoning"))
    choice.refusal = _append(choice.refusal, delta.get("refusal"))
    calls = delta.get("tool_calls")
    if isinstance(calls, list):
        for call_delta in calls:
            if isinstance(call_delta, dict):
                _merge_tool_call(choice, call_delta)
    return token


def _merge_tool_call(choice: StreamChoice, delta: dict[str, Any]) -> None:
    raw_fn = delta.get("function")
    fn: dict[str, Any] = raw_fn if isinstance(raw_fn, dict) else {}
    index = delta.get("index")
    call: dict[str, Any] | None
    if isinstance(index, int) and not isinstance(index, bool):
        call = choice._by_index.get(index)
        if call is None:
            call = choice._by_index[index] = _new_call()
            choice.tool_calls.append(call)
        choice._open_call = None
    else:
        # No index: a whole call (Mistral, Ollama, Gemini); an id-less, name-less fragment right
        # after one continues it.
        call = choice._open_call
        if call is None or delta.get("id") or fn.get("name"):
            call = choice._open_call = _new_call()
            choice.tool_calls.append(call)
    if isinstance(delta.get("id"), str) and delta["id"]:
        call["id"] = delta["id"]
    if isinstance(delta.get("type"), str) and delta["type"]:
        call["type"] = delta["type"]
    if isinstance(fn.get("name"), str) and fn["name"] and not call["function"]["name"]:
        call["function"]["name"] = fn["name"]
    if isinstance(fn.get("arguments"), str):
        call["function"]["arguments"] += fn["arguments"]


def _new_call() -> dict[str, Any]:
    return {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}


@dataclass
class StreamResult:
    """A parsed and assembled stream, with its timings (``time.perf_counter`` seconds)."""

    events: list[SSEEvent] = field(default_factory=list)
    chunks: list[dict[str, Any]] = field(default_factory=list)
    choices: list[StreamChoice] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    done: bool = False
    error: Any = None
    error_event: SSEEvent | None = None
    warnings: list[str] = field(default_factory=list)
    comments: int = 0
    ignored_lines: list[tuple[int, str]] = field(default_factory=list)
    bytes_received: int = 0
    id: str | None = None
    model: str | None = None
    created: int | None = None
    system_fingerprint: str | None = None
    started_at: float | None = None
    first_event_at: float | None = None
    first_token_at: float | None = None
    finished_at: float | None = None

    @property
    def finish_reasons(self) -> dict[int, str | None]:
        return {c.index: c.finish_reason for c in self.choices}

    @property
    def truncated(self) -> bool:
        """Ended with neither ``[DONE]`` nor any ``finish_reason``, and without an error event."""
        return (
            self.error is None
            and bool(self.events or self.chunks)
            and not self.done
            and not any(c.finish_reason for c in self.choices)
        )

    @property
    def time_to_first_token(self) -> float | None:
        """Seconds from ``started_at`` to the first event that carried a token."""
        if self.started_at is None or self.first_token_at is None:
            return None
        return self.first_token_at - self.started_at

    def message(self, index: int = 0) -> dict[str, Any]:
        """The assembled message of choice ``index``."""
        for choice in self.choices:
            if choice.index == index:
                return choice.message()
        raise KeyError(f"the stream has no choice with index {index} (indexes: {[c.index for c in self.choices]})")

    def to_completion(self) -> dict[str, Any]:
        """The stream as a non-streamed ``chat.completion`` body, to validate with the same contract."""
        body: dict[str, Any] = {
            "id": self.id or "",
            "object": "chat.completion",
            "created": self.created or 0,
            "model": self.model or "",
            "choices": [
                {"index": c.index, "message": c.message(), "finish_reason": c.finish_reason, "logprobs": None}
                for c in self.choices
            ],
        }
        if self.usage is not None:
            body["usage"] = self.usage
        if self.system_fingerprint is not None:
            body["system_fingerprint"] = self.system_fingerprint
        return body

    def check(self) -> None:
        """Raise :class:`StreamError` if the stream failed, was cut short, or was not a stream."""
        if self.error is not None:
            ev = self.error_event
            shape = semantic.error_shape(self.error)
            text = semantic.excerpt(self.error.get("error", self.error) if isinstance(self.error, dict) else self.error)
            where = f" at byte {ev.offset} (line {ev.line})" if ev else ""
            raise StreamError(
                f"the server sent an error inside the stream{where} ({shape} shape): {text}\n"
                "  the HTTP status was 200, so clients that check only the status read a broken stream;\n"
                "  fix: read the server's message above (a rejected tool call, a token limit, an upstream failure)",
                reason="error_event",
                offset=ev.offset if ev else None,
                line=ev.line if ev else None,
                error=self.error,
            )
        if not self.events and not self.chunks:
            first = self.ignored_lines[0] if self.ignored_lines else None
            what = f": it starts with {first[1]!r}" if first else " (the body is empty)"
            raise StreamError(
                f"the body is not a text/event-stream{what}\n"
                "  fix: a streamed request must be answered with 'data: {...}' events; a JSON or HTML body here "
                "means the server ignored stream=true, answered with an error, or the base URL is wrong",
                reason="not_sse",
                offset=first[0] if first else 0,
                line=None,
            )
        if self.truncated:
            last = self.events[-1] if self.events else None
            where = f" (last event at byte {last.offset}, line {last.line})" if last else ""
            raise StreamError(
                f"the stream was cut short: it ended after {len(self.chunks)} chunk(s) and {self.bytes_received} bytes{where} "
                "with neither 'data: [DONE]' nor a finish_reason\n"
                "  fix: look for a proxy or load-balancer timeout, a server crash, or a client timeout shorter than the reply",
                reason="truncated",
                offset=(last.offset if last else self.bytes_received),
                line=last.line if last else None,
            )
        if not self.choices:
            raise StreamError(
                f"the stream carried no choices ({len(self.chunks)} chunk(s)): the caller gets no message\n"
                "  fix: check that the model produced output and that the server fills choices[].delta",
                reason="empty",
                offset=self.events[-1].offset if self.events else 0,
                line=self.events[-1].line if self.events else None,
            )


class StreamAssembler:
    """Fold events (or already parsed chunks) into a :class:`StreamResult`.

    ``validate``: check each chunk against the ``chat_completion_chunk`` contract at ``level``.
    ``started_at``: when the request was sent (``time.perf_counter()``), for time to first token.
    """

    def __init__(
        self,
        *,
        level: str = "compatible",
        validate: bool = True,
        started_at: float | None = None,
        clock: Clock = time.perf_counter,
    ) -> None:
        self.level = level
        self.validate = validate
        self.clock = clock
        self.parser = SSEParser()
        self.result = StreamResult(started_at=clock() if started_at is None else started_at)
        self._choices: dict[int, StreamChoice] = {}
        self._warned: set[str] = set()

    def _warn(self, text: str) -> None:
        if text not in self._warned:
            self._warned.add(text)
            self.result.warnings.append(text)

    def feed_bytes(self, chunk: bytes | bytearray) -> list[SSEEvent]:
        """Parse ``chunk`` and fold every event it completes; return those events."""
        events = self.parser.feed(chunk, self.clock())
        for event in events:
            self.feed_event(event)
        return events

    def feed_event(self, event: SSEEvent) -> dict[str, Any] | None:
        """Fold one event; return its chunk (None for ``[DONE]``, errors and foreign events)."""
        res = self.result
        res.events.append(event)
        if res.first_event_at is None:
            res.first_event_at = event.received_at
        res.finished_at = event.received_at
        if not event.terminated:
            self._warn(
                f"the last event (line {event.line}) is not closed by a blank line; spec-conforming clients drop it"
            )
        if event.is_done:
            res.done = True
            return None
        if res.done:
            self._warn("events arrive after 'data: [DONE]'; clients stop reading at [DONE] and miss them")
        if event.event == "error":
            if res.error is None:
                res.error, res.error_event = _loads_or_text(event.data), event
            return None
        try:
            payload = json.loads(event.data)
        except ValueError as exc:
            raise StreamError(
                f"malformed chunk JSON at byte {event.offset} (line {event.line}): {getattr(exc, 'msg', exc)}\n"
                f"  data: {semantic.cut(event.data, 160)}\n"
                "  fix: every data event of a chat stream must be one JSON object; look for a proxy that splits "
                "or rewrites events, or a server writing several objects in one event",
                reason="malformed_json",
                offset=event.offset,
                line=event.line,
            ) from None
        if _is_error(payload):
            if res.error is None:
                res.error, res.error_event = payload, event
            return None
        if event.event != "message":
            self._warn(f"ignored events of type {event.event!r}; OpenAI streams send only data events")
            return None
        return self.feed_chunk(payload, event=event)

    def feed_chunk(self, payload: Any, *, event: SSEEvent | None = None) -> dict[str, Any] | None:
        """Fold one parsed chunk (e.g. a line of a recorded ``.jsonl``), validating it first."""
        res = self.result
        if _is_error(payload):
            if res.error is None:
                res.error, res.error_event = payload, event
            return None
        if self.validate and not (self.level == "compatible" and is_plain_delta(payload)):
            try:
                for note in contracts.validate("chat_completion_chunk", payload, self.level):
                    self._warn(note)
            except ContractViolation as exc:
                if event is None:
                    raise
                raise ContractViolation(
                    f"{exc}\n  in: stream event at byte {event.offset} (line {event.line})",
                    kind=exc.kind, path=exc.path, keyword=exc.keyword,
                ) from None
        if not isinstance(payload, dict):
            return None
        res.chunks.append(payload)
        for key in ("id", "model", "system_fingerprint"):
            if getattr(res, key) is None and isinstance(payload.get(key), str) and payload[key]:
                setattr(res, key, payload[key])
        if res.created is None and isinstance(payload.get("created"), int) and payload["created"]:
            res.created = payload["created"]
        if isinstance(payload.get("usage"), dict):
            res.usage = payload["usage"]
        for choice_payload in payload.get("choices") or ():
            if isinstance(choice_payload, dict):
                self._fold_choice(choice_payload, event)
        return payload

    def _fold_choice(self, payload: dict[str, Any], event: SSEEvent | None) -> None:
        index = payload.get("index", 0)
        if not isinstance(index, int):
            return
        choice = self._choices.get(index)
        if choice is None:
            choice = self._choices[index] = StreamChoice(index=index)
            self.result.choices.append(choice)
            self.result.choices.sort(key=lambda c: c.index)
        delta = payload.get("delta")
        if isinstance(delta, dict) and _merge_delta(choice, delta) and self.result.first_token_at is None:
            self.result.first_token_at = event.received_at if event is not None else self.clock()
        reason = payload.get("finish_reason")
        if isinstance(reason, str) and reason:
            choice.finish_reason = reason

    def finish(self, *, check: bool = False) -> StreamResult:
        """Close the parser, fold what it still held, and return the result; ``check``: :meth:`StreamResult.check` it."""
        for event in self.parser.close(self.clock()):
            self.feed_event(event)
        res = self.result
        res.comments = len(self.parser.comments)
        res.ignored_lines = list(self.parser.ignored)
        res.bytes_received = self.parser.bytes_seen
        if res.finished_at is None:
            res.finished_at = self.clock()
        if res.chunks and not res.done and res.error is None and not res.truncated:
            self._warn("the stream ended without 'data: [DONE]'; clients that wait for it hang until the connection closes")
        if res.done and any(c.finish_reason is None for c in res.choices) and res.error is None:
            missing = [c.index for c in res.choices if c.finish_reason is None]
            self._warn(f"no finish_reason for choice(s) {missing}; clients cannot tell a complete reply from a cut one")
        for choice in res.choices:
            for j, call in enumerate(choice.tool_calls):
                if not call["id"]:
                    self._warn(f"choice {choice.index} tool call {j} has no id; the tool result cannot be sent back by id")
        if check:
            res.check()
        return res


def _loads_or_text(data: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return data


_PLAIN_TOP = frozenset({"id", "object", "created", "model", "system_fingerprint", "service_tier", "choices", "usage"})
_PLAIN_CHOICE = frozenset({"index", "delta", "finish_reason", "logprobs"})
_OPTIONAL_TEXT = (str, type(None))


def is_plain_delta(payload: Any) -> bool:
    """True for the common chunk that carries one text delta and nothing else.

    A strict subset of what the ``compatible`` chunk contract accepts without a warning (a test
    checks it against the schema over every recorded chunk), so the hot path can skip the schema for
    the thousands of such chunks a stream holds; anything unusual still goes through it.
    """
    if type(payload) is not dict or payload.get("object") != "chat.completion.chunk" or not payload.keys() <= _PLAIN_TOP:
        return False
    created = payload.get("created")
    if created is not None and (type(created) is not int or not 0 <= created < 10**11):
        return False
    if payload.get("usage") is not None or not all(
        isinstance(payload.get(k), _OPTIONAL_TEXT) for k in ("id", "model", "system_fingerprint", "service_tier")
    ):
        return False
    choices = payload.get("choices")
    if type(choices) is not list or len(choices) != 1:
        return False
    choice = choices[0]
    if type(choice) is not dict or not choice.keys() <= _PLAIN_CHOICE:
        return False
    index, delta = choice.get("index"), choice.get("delta")
    if type(index) is not int or index < 0 or choice.get("finish_reason") is not None or choice.get("logprobs") is not None:
        return False
    return (
        type(delta) is dict
        and delta.keys() <= {"content", "role"}
        and type(delta.get("content")) is str
        and delta.get("role", "assistant") == "assistant"
    )


def _is_error(payload: Any) -> bool:
    return isinstance(payload, dict) and (payload.get("error") is not None or payload.get("object") == "error")


def assemble(
    source: bytes | bytearray | Iterable[bytes],
    *,
    level: str = "compatible",
    validate: bool = True,
    started_at: float | None = None,
    check: bool = True,
    clock: Clock = time.perf_counter,
) -> StreamResult:
    """Parse and assemble a whole stream; with ``check`` (default) raise :class:`StreamError` on failure."""
    asm = StreamAssembler(level=level, validate=validate, started_at=started_at, clock=clock)
    for chunk in _as_chunks(source):
        asm.feed_bytes(chunk)
    return asm.finish(check=check)


async def aassemble(
    source: AsyncIterable[bytes],
    *,
    level: str = "compatible",
    validate: bool = True,
    started_at: float | None = None,
    check: bool = True,
    clock: Clock = time.perf_counter,
) -> StreamResult:
    """The async twin of :func:`assemble` (e.g. ``response.aiter_bytes()``)."""
    asm = StreamAssembler(level=level, validate=validate, started_at=started_at, clock=clock)
    async for chunk in source:
        asm.feed_bytes(chunk)
    return asm.finish(check=check)
