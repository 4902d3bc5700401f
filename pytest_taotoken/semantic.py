"""Contract rules that JSON Schema cannot express, and the one place violation messages are built.

The schemas in ``contracts/`` check shapes and types. What needs to look across values lives here:

- an error body where a success was expected (HTTP 200 with ``{"error": ...}``): rejected;
- duplicate choice ``index``: rejected (clients key choices by index and silently drop one);
- ``content: null`` with neither tool calls nor a refusal: rejected, since the caller gets nothing
  (a warning only when ``finish_reason`` is ``length`` or ``content_filter``, which say why);
- tool-call ``arguments`` that do not parse as JSON: rejected (``json.loads`` in every agent loop);
- ``total_tokens != prompt_tokens + completion_tokens``, an unknown ``finish_reason``, ``created``
  in milliseconds, an unusual chunk ``object``: warnings, because working servers do these.

Warnings are returned as strings, never raised: a warning is not a failure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Final

from .errors import ContractViolation
from .keys import redact

STANDARD_FINISH_REASONS: Final = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})
ERROR_SHAPES: Final = ("openai", "azure", "openrouter", "vllm", "fastapi", "tgi", "unknown")

KIND_TITLES: Final = {
    "chat_completion": "chat completion",
    "chat_completion_chunk": "chat completion chunk",
    "error": "error body",
    "models_list": "model list",
}

_MISSING: Final[Any] = object()
_CUT_TITLE: Final = 200
_CUT_SCHEMA: Final = 160
_CUT_VALUE: Final = 200
_MILLISECONDS_AFTER: Final = 10**11  # year 5138 in seconds; 1973 in milliseconds


def cut(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters, with an ellipsis where it was cut.

    Known secrets are masked first: a key cut in half would escape the masking of the whole message.
    """
    text = redact(text)
    text = " ".join(text.split()) if "\n" in text or "\r" in text else text
    return text if len(text) <= limit else text[: limit - 1] + "…"


def json_path(parts: Iterable[str | int]) -> str:
    """``$.choices[0].message`` from ``("choices", 0, "message")``; odd keys are quoted."""
    out = ["$"]
    for part in parts:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif part.isidentifier():
            out.append(f".{part}")
        else:
            out.append(f"[{json.dumps(part, ensure_ascii=False)}]")
    return "".join(out)


def excerpt(value: Any, limit: int = _CUT_VALUE) -> str:
    """A short JSON rendering of ``value`` for a message."""
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=False, default=repr)
    except (TypeError, ValueError):  # pragma: no cover - default=repr makes this unreachable
        text = repr(value)
    return cut(text, limit)


def violation(
    kind: str,
    level: str,
    summary: str,
    *,
    path: Sequence[str | int] | str = (),
    keyword: str = "",
    schema: Any = _MISSING,
    value: Any = _MISSING,
    why: str = "",
    fix: str = "",
) -> ContractViolation:
    """Build the :class:`ContractViolation` every contract failure raises.

    The layout copies Schemathesis: a title, the JSON path, the failing keyword with a short
    excerpt of the schema, the offending value, each cut short; then why the rule exists (the
    schema's description) and the fix. Known secrets are
    masked (``keys.redact``) because bodies echo keys back ("Incorrect API key provided: sk-...").
    """
    where = path if isinstance(path, str) else json_path(path)
    title = KIND_TITLES.get(kind, kind)
    lines = [cut(f"{title} breaks the {level} contract: {summary}", _CUT_TITLE), f"  path:    {where}"]
    if keyword:
        line = f"  keyword: {keyword}"
        if schema is not _MISSING:
            line += f"  schema: {excerpt(schema, _CUT_SCHEMA)}"
        lines.append(line)
    if value is not _MISSING:
        lines.append(f"  value:   {excerpt(value)}")
    if why:
        lines.append(f"  why:     {cut(why, 240)}")
    if fix:
        lines.append(f"  fix:     {cut(fix, 300)}")
    return ContractViolation(redact("\n".join(lines)), kind=kind, path=where, keyword=keyword)


# --- error bodies -------------------------------------------------------------------------------


def error_shape(payload: Any) -> str:
    """Name the error shape of ``payload``: one of :data:`ERROR_SHAPES`.

    - ``openai``: ``{"error": {"message", "type", ...}}`` (also llama.cpp, DeepSeek, Groq, Ollama);
    - ``azure``: ``{"error": {"code", "message"}}`` without ``type``/``param``, an ``innererror``,
      or bare ``{"code"|"statusCode", "message"}``;
    - ``openrouter``: an integer ``code`` and no ``type`` (``metadata``, ``user_id`` beside);
    - ``vllm``: unwrapped ``{"object": "error", "message", "type", "code"}``;
    - ``fastapi``: ``{"detail": ...}`` (LiteLLM's wrong paths, FastAPI-based servers);
    - ``tgi``: ``{"error": "message text"}`` (text-generation-inference, Ollama's native API);
    - ``unknown``: none of these.
    """
    if not isinstance(payload, dict):
        return "unknown"
    err = payload.get("error")
    if isinstance(err, str):
        return "tgi"
    if isinstance(err, dict):
        if "innererror" in err:
            return "azure"
        if "type" not in err and isinstance(err.get("code"), int) and not isinstance(err.get("code"), bool):
            return "openrouter"
        if "type" not in err and "param" not in err:
            return "azure"
        return "openai"
    if payload.get("object") == "error":
        return "vllm"
    if "detail" in payload:
        return "fastapi"
    if "message" in payload and ("code" in payload or "statusCode" in payload):
        return "azure"
    return "unknown"


def _error_message(payload: dict[str, Any]) -> str:
    err = payload.get("error")
    if isinstance(err, str):
        return err
    if isinstance(err, dict):
        return str(err.get("message", err))
    if "detail" in payload:
        return str(payload["detail"])
    return str(payload.get("message", ""))


def reject_error_object(kind: str, payload: Any, level: str) -> None:
    """Raise if a success kind got an error body: the "HTTP 200 with ``{"error": ...}``" failure.

    Clients that check only the status code go on to read ``choices`` and crash with
    ``KeyError: 'choices'``, far from the cause. Checked before the schema so that the message
    names the server's own error text instead of the first missing field.
    """
    if kind == "error" or not isinstance(payload, dict):
        return
    if payload.get("error") is not None:
        where: tuple[str, ...] = ("error",)
    elif payload.get("object") == "error":
        where = ("object",)
    elif "detail" in payload and "choices" not in payload and "data" not in payload:
        where = ("detail",)
    else:
        return
    shape = error_shape(payload)
    title = KIND_TITLES.get(kind, kind)
    in_stream = kind == "chat_completion_chunk"
    summary = (
        f"the server sent an error object inside the stream ({shape} shape): {_error_message(payload)}"
        if in_stream
        else f"an error object ({shape} shape) was returned where a {title} was expected: {_error_message(payload)}"
    )
    fix = (
        "the server failed mid-stream although the HTTP status was 200; read its message above"
        if in_stream
        else "the server answered with an error, possibly under HTTP 200; read its message above, "
        "and make clients check for an 'error' key, not only the status code"
    )
    raise violation(kind, level, summary, path=where, keyword="error-object", value=payload[where[0]], fix=fix)


# --- success bodies -----------------------------------------------------------------------------


def _check_unique_indexes(kind: str, level: str, choices: list[Any]) -> None:
    seen: dict[int, int] = {}
    for i, choice in enumerate(choices):
        if not isinstance(choice, dict):
            continue
        idx = choice.get("index")
        if not isinstance(idx, int):
            continue
        if idx in seen:
            raise violation(
                kind,
                level,
                f"choice index {idx} appears twice (choices[{seen[idx]}] and choices[{i}])",
                path=("choices", i, "index"),
                keyword="uniqueIndex",
                value=idx,
                fix="give each choice its own index; clients key choices by index and drop duplicates",
            )
        seen[idx] = i


def _finish_reason_warning(where: str, reason: Any) -> str | None:
    if isinstance(reason, str) and reason not in STANDARD_FINISH_REASONS:
        return (
            f"{where}.finish_reason is {reason!r}, not one of {sorted(STANDARD_FINISH_REASONS)}; "
            "clients that switch on it treat the reply as unfinished"
        )
    return None


def _check_usage(usage: Any, warnings: list[str]) -> None:
    if not isinstance(usage, dict):
        return
    prompt, completion, total = (usage.get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens"))
    if not (isinstance(prompt, int) and isinstance(completion, int) and isinstance(total, int)):
        return
    if total != prompt + completion:
        warnings.append(
            f"usage.total_tokens is {total}, not prompt_tokens + completion_tokens = {prompt + completion}; "
            "the server probably counts reasoning or cached tokens apart, so cost trackers disagree"
        )


def _check_created(payload: dict[str, Any], warnings: list[str]) -> None:
    created = payload.get("created")
    if isinstance(created, int) and created > _MILLISECONDS_AFTER:
        warnings.append(f"created is {created}, which looks like milliseconds; the spec says Unix seconds")


def _check_tool_calls(kind: str, level: str, calls: list[Any], base: tuple[str | int, ...], warnings: list[str]) -> None:
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        args = fn.get("arguments") if isinstance(fn, dict) else None
        if not isinstance(args, str):
            continue
        where = (*base, "tool_calls", j, "function", "arguments")
        if args == "":
            warnings.append(
                f"{json_path(where)} is an empty string; json.loads fails on it, a call without arguments should send '{{}}'"
            )
            continue
        try:
            parsed = json.loads(args)
        except json.JSONDecodeError as exc:
            raise violation(
                kind,
                level,
                f"tool-call arguments are not valid JSON ({exc.msg} at char {exc.pos})",
                path=where,
                keyword="jsonString",
                value=args,
                fix="arguments must be a JSON text (usually an object); clients json.loads it before calling the tool",
            ) from None
        if not isinstance(parsed, dict):
            warnings.append(f"{json_path(where)} is JSON but not an object; tools expect keyword arguments")


def _has_function_call(message: dict[str, Any]) -> bool:
    fc = message.get("function_call")
    return isinstance(fc, dict) and bool(fc.get("name"))


def _check_message(
    kind: str, level: str, message: dict[str, Any], i: int, finish_reason: Any, warnings: list[str]
) -> None:
    base: tuple[str | int, ...] = ("choices", i, "message")
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        _check_tool_calls(kind, level, calls, base, warnings)
    if message.get("content") is not None:
        return
    if (isinstance(calls, list) and calls) or message.get("refusal") or _has_function_call(message):
        return
    absent = "missing" if "content" not in message else "null"
    if finish_reason in ("length", "content_filter"):
        warnings.append(
            f"{json_path((*base, 'content'))} is {absent} (finish_reason {finish_reason!r}): the caller gets no text"
        )
        return
    raise violation(
        kind,
        level,
        f"message content is {absent}, with neither tool_calls nor a refusal",
        path=(*base, "content"),
        keyword="contentOrToolCalls",
        value=message,
        fix="a reply must carry text, tool calls or a refusal; clients that read .content get None "
        "and crash (e.g. on .strip()); check the model and the server's reasoning/tool parsers",
    )


def _choices(kind: str, level: str, payload: dict[str, Any], warnings: list[str]) -> list[tuple[int, dict[str, Any]]]:
    """The rules every choice list shares (unique indexes, a standard finish_reason); the choices to check further."""
    choices = payload.get("choices")
    if not isinstance(choices, list):
        return []
    if len(choices) > 1:
        _check_unique_indexes(kind, level, choices)
    out = []
    for i, choice in enumerate(choices):
        if isinstance(choice, dict):
            out.append((i, choice))
            note = _finish_reason_warning(f"choices[{i}]", choice.get("finish_reason"))
            if note:
                warnings.append(note)
    return out


def check_chat_completion(payload: Any, level: str = "compatible") -> list[str]:
    """Semantic rules of a non-streamed chat completion; raises or returns warnings."""
    kind = "chat_completion"
    warnings: list[str] = []
    if not isinstance(payload, dict):
        return warnings
    for i, choice in _choices(kind, level, payload, warnings):
        message = choice.get("message")
        if isinstance(message, dict):
            _check_message(kind, level, message, i, choice.get("finish_reason"), warnings)
    _check_usage(payload.get("usage"), warnings)
    _check_created(payload, warnings)
    return warnings


def check_chunk(payload: Any, level: str = "compatible") -> list[str]:
    """Semantic rules of one streamed chunk; raises or returns warnings."""
    kind = "chat_completion_chunk"
    warnings: list[str] = []
    if not isinstance(payload, dict):
        return warnings
    _choices(kind, level, payload, warnings)
    obj = payload.get("object")
    if obj not in ("chat.completion.chunk", "") and obj is not None:
        warnings.append(f"chunk object is {obj!r}, not 'chat.completion.chunk'; strict clients reject the chunk")
    _check_usage(payload.get("usage"), warnings)
    _check_created(payload, warnings)
    return warnings


def check_models_list(payload: Any, level: str = "compatible") -> list[str]:
    """Semantic rules of ``GET /models``: duplicate ids and an empty list are warnings."""
    warnings: list[str] = []
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list):
        return warnings
    if not data:
        warnings.append("the model list is empty: no model can be picked from it")
    seen: set[str] = set()
    dupes: set[str] = set()
    for model in data:
        model_id = model.get("id") if isinstance(model, dict) else None
        if isinstance(model_id, str):
            (dupes if model_id in seen else seen).add(model_id)
    if dupes:
        warnings.append(f"model ids listed more than once: {cut(', '.join(sorted(dupes)), 120)}")
    return warnings


def check_error(payload: Any, level: str = "compatible") -> list[str]:
    """Semantic rules of an error body: an empty message is a warning (users see nothing)."""
    if isinstance(payload, dict) and not _error_message(payload).strip():
        return ["the error message is empty; users will see no reason for the failure"]
    return []


CHECKS: Final = {
    "chat_completion": check_chat_completion,
    "chat_completion_chunk": check_chunk,
    "error": check_error,
    "models_list": check_models_list,
}


def check(kind: str, payload: Any, level: str = "compatible") -> list[str]:
    """Run the semantic rules of ``kind``: raise :class:`ContractViolation` or return the warnings."""
    return CHECKS[kind](payload, level)
