"""Load the JSON Schema contracts in ``contracts/``, compile each once, and validate payloads.

``validate(kind, payload, level)`` is the whole public surface most callers need::

    warnings = validate("chat_completion", response.content)   # raises ContractViolation

Order of checks, cheapest and most telling first:

1. bytes or text are parsed; HTML or plain text gets a message naming the likely cause (a wrong
   base URL) instead of a JSON decode error;
2. an error body where a success was expected (HTTP 200 with ``{"error": ...}``) is rejected with
   the server's own message (``semantic.reject_error_object``);
3. the schema: a ``fastjsonschema``-compiled function when that package is installed (microseconds),
   else ``jsonschema``. On failure ``jsonschema`` (the reference implementation) re-checks the
   payload to build the message: the slow path runs only for payloads that fail;
4. the semantic rules of ``semantic.py``, which raise or return warnings.

Schemas reference each other by ``$id`` (``urn:pytest-taotoken:contracts:<name>``, where ``:``
inside the name maps to a sub-folder); for ``fastjsonschema`` they are bundled into one document.
Files are found in the installed wheel (``pytest_taotoken/_contracts``) or, from a source tree,
in the repository's ``contracts/``.
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from . import semantic
from .errors import ContractViolation
from .semantic import ERROR_SHAPES, error_shape, excerpt, violation

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator

__all__ = [
    "ERROR_SHAPES",
    "KINDS",
    "LEVELS",
    "bundle",
    "contracts_dir",
    "error_shape",
    "load_schema",
    "parse_body",
    "reference_validator",
    "schema_names",
    "schema_path",
    "validate",
]

KINDS: Final = ("chat_completion", "chat_completion_chunk", "error", "models_list")
LEVELS: Final = ("compatible", "strict")
URN_PREFIX: Final = "urn:pytest-taotoken:contracts:"
SUFFIX: Final = ".schema.json"

_SCHEMA_MAPS: Final = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_SCHEMA_ONE: Final = frozenset(
    {"items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
     "unevaluatedProperties", "unevaluatedItems", "additionalItems"}
)
_SCHEMA_LISTS: Final = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_ANNOTATIONS: Final = frozenset({"$ref", "$comment", "title", "description", "deprecated", "default", "examples"})
_JSON_TYPES: Final = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}
_HTML_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)


# --- finding and loading the schema files -------------------------------------------------------


@functools.cache
def contracts_dir() -> Path:
    """The folder holding the ``*.schema.json`` files: the wheel's copy first, else the source tree's."""
    try:
        packaged = importlib.resources.files("pytest_taotoken") / "_contracts"
        if packaged.is_dir():
            return Path(str(packaged))
    except (ModuleNotFoundError, OSError):  # pragma: no cover - only in broken installs
        pass
    return Path(__file__).resolve().parent.parent / "contracts"


def schema_path(name: str) -> Path:
    """The file of contract ``name``: ``"chat_completion"``, ``"strict/error"``, ``"defs"`` or a file name."""
    rel = name if name.endswith(".json") else name + SUFFIX
    path = contracts_dir() / rel
    if not path.is_file():
        raise FileNotFoundError(f"no contract named {name!r}: {path} does not exist (known: {', '.join(schema_names())})")
    return path


def schema_names() -> list[str]:
    """Every contract name under :func:`contracts_dir`, e.g. ``["chat_completion", ..., "strict/error"]``."""
    root = contracts_dir()
    return sorted(p.relative_to(root).as_posix()[: -len(SUFFIX)] for p in root.rglob("*" + SUFFIX))


@functools.cache
def _raw(name: str) -> dict[str, Any]:
    loaded = json.loads(schema_path(name).read_text(encoding="utf-8"))
    if not isinstance(loaded, dict):
        raise ValueError(f"contract {name!r} is not a JSON object")
    return loaded


def load_schema(name: str) -> dict[str, Any]:
    """A fresh copy of contract ``name`` as stored (callers may mutate it)."""
    return copy.deepcopy(_raw(name))


def _name_of(uri: str) -> str:
    if not uri.startswith(URN_PREFIX):
        raise ValueError(f"contract references {uri!r}, which is not a {URN_PREFIX}<name> id")
    return uri[len(URN_PREFIX) :].replace(":", "/")


def _schema_name(kind: str, level: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown contract kind {kind!r}; expected one of {', '.join(KINDS)}")
    if level not in LEVELS:
        raise ValueError(f"unknown contract level {level!r}; expected one of {', '.join(LEVELS)}")
    return kind if level == "compatible" else f"strict/{kind}"


# --- bundling for fastjsonschema ----------------------------------------------------------------


def _rewrite(schema: Any, fix_ref: Callable[[str], str]) -> Any:
    """Copy ``schema`` with every ``$ref`` passed through ``fix_ref``, walking schema positions only.

    A ``$ref`` with validating siblings is wrapped in ``allOf``: draft-07 engines (fastjsonschema)
    ignore a ``$ref``'s siblings, 2020-12 applies them.
    """
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "$ref":
            out[key] = fix_ref(value)
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _rewrite(sub, fix_ref) for name, sub in value.items()}
        elif key in _SCHEMA_ONE:
            out[key] = _rewrite(value, fix_ref)
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_rewrite(sub, fix_ref) for sub in value]
        else:
            out[key] = value
    if "$ref" in out and set(out) - _ANNOTATIONS - {"$defs", "definitions"}:
        out["allOf"] = [{"$ref": out.pop("$ref")}, *out.get("allOf", [])]
    return out


@functools.cache
def bundle(name: str) -> dict[str, Any]:
    """Contract ``name`` as one self-contained document: referenced files embedded under ``$defs``.

    ``urn:...:defs#/$defs/usage`` becomes ``#/$defs/~ext~defs/$defs/usage``; ``$id``/``$schema``
    are dropped so that no engine changes resolution scope.
    """
    root_uri = URN_PREFIX + name.replace("/", ":")
    prefixes: dict[str, str] = {root_uri: ""}
    pending: list[tuple[str, str]] = []

    def fixer(doc_uri: str) -> Callable[[str], str]:
        def fix(ref: str) -> str:
            base, _, fragment = ref.partition("#")
            target = base or doc_uri
            if target not in prefixes:
                key = "~ext~" + _name_of(target).replace("/", "~")
                prefixes[target] = "/$defs/" + key.replace("~", "~0").replace("/", "~1")
                pending.append((target, key))
            return "#" + prefixes[target] + fragment

        return fix

    root: dict[str, Any] = _rewrite(_raw(name), fixer(root_uri))
    defs = root.setdefault("$defs", {})
    while pending:
        uri, key = pending.pop()
        doc = _rewrite(_raw(_name_of(uri)), fixer(uri))
        doc.pop("$id", None)
        doc.pop("$schema", None)
        defs[key] = doc
    root.pop("$id", None)
    root.pop("$schema", None)
    return root


@functools.cache
def _fast_validator(kind: str, level: str) -> tuple[Callable[[Any], Any], type[Exception]] | None:
    """A fastjsonschema-compiled validator and its failure type; None without fastjsonschema."""
    name = _schema_name(kind, level)
    try:
        import fastjsonschema
    except ImportError:  # pragma: no cover - exercised only where fastjsonschema is absent
        return None
    compiled: Callable[[Any], Any] = fastjsonschema.compile(bundle(name), use_default=False, use_formats=False)
    return compiled, fastjsonschema.JsonSchemaValueException


@functools.cache
def reference_validator(kind: str, level: str = "compatible") -> Validator:
    """The ``jsonschema`` 2020-12 validator of a contract: the reference that builds every message."""
    import jsonschema
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    def retrieve(uri: str) -> Resource[Any]:
        return Resource.from_contents(_raw(_name_of(uri)), default_specification=DRAFT202012)

    validator: Validator = jsonschema.Draft202012Validator(
        _raw(_schema_name(kind, level)),
        registry=Registry(retrieve=retrieve),  # type: ignore[call-arg]
    )
    return validator


# --- messages -----------------------------------------------------------------------------------


def _json_type(value: Any) -> str:
    return "null" if value is None else _JSON_TYPES.get(type(value), type(value).__name__)


def _summary(error: ValidationError) -> tuple[str, list[str | int], Any]:
    """(summary, path, value) for a jsonschema error, worded for people, not for the validator."""
    path: list[str | int] = list(error.absolute_path)
    keyword = error.validator
    expected: Any = error.validator_value
    value: Any = error.instance
    if keyword == "required" and isinstance(value, dict):
        missing = next((p for p in expected if p not in value), expected[0])
        return f"{missing!r} is missing", [*path, missing], value
    if keyword == "type":
        wanted = " or ".join(expected) if isinstance(expected, list) else expected
        return f"expected {wanted}, got {_json_type(value)}", path, value
    if keyword == "minItems" and isinstance(value, list):
        return ("must not be empty" if expected == 1 and not value else f"needs at least {expected} items"), path, value
    if keyword == "maxItems":
        return f"must have at most {expected} items, got {len(value)}", path, value
    if keyword in ("minimum", "exclusiveMinimum"):
        return f"must be {'>=' if keyword == 'minimum' else '>'} {expected}, got {value!r}", path, value
    if keyword == "minLength" and expected == 1:
        return "must not be empty", path, value
    if keyword == "const":
        return f"must be {excerpt(expected, 60)}, got {excerpt(value, 60)}", path, value
    if keyword == "enum":
        return f"must be one of {excerpt(expected, 100)}, got {excerpt(value, 60)}", path, value
    if keyword in ("anyOf", "oneOf"):
        return f"matches none of the allowed shapes ({keyword})", path, value
    return error.message, path, value


def _schema_excerpt(error: ValidationError) -> dict[str, Any]:
    out: dict[str, Any] = {}
    schema = error.schema if isinstance(error.schema, dict) else {}
    if error.validator != "type" and "type" in schema:
        out["type"] = schema["type"]
    out[str(error.validator)] = error.validator_value
    return out


def _why(error: ValidationError) -> str:
    """The failing field's ``description`` in the schema: the contracts document why each rule exists."""
    schema: Any = error.schema if isinstance(error.schema, dict) else {}
    expected: Any = error.validator_value
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = next((p for p in expected if p not in error.instance), None)
        schema = schema.get("properties", {}).get(missing, {})
    text = schema.get("description") if isinstance(schema, dict) else None
    return text if isinstance(text, str) and len(text) < 400 else ""


def _fix(kind: str, level: str) -> str:
    title = semantic.KIND_TITLES[kind]
    if level == "strict":
        return f"the OpenAI spec requires this of a {title}; level='compatible' accepts the variants real servers send"
    return (
        f"clients reading this {title} fail or misbehave here; the compatible level already accepts every "
        "variant seen from real servers, so report it to the server or gateway"
    )


def _schema_violation(kind: str, level: str, payload: Any, fast_error: Exception | None) -> ContractViolation:
    import jsonschema.exceptions

    error = jsonschema.exceptions.best_match(reference_validator(kind, level).iter_errors(payload))
    if error is not None:
        summary, path, value = _summary(error)
        return violation(
            kind, level, summary, path=path, keyword=str(error.validator), schema=_schema_excerpt(error),
            value=value, why=_why(error), fix=_fix(kind, level),
        )
    # The fast engine rejected what the reference accepts: report the fast engine's finding.
    rule = getattr(fast_error, "rule", "") or "schema"
    return violation(
        kind, level, str(fast_error), path=_fast_path(getattr(fast_error, "path", ())), keyword=str(rule),
        schema=getattr(fast_error, "rule_definition", None), value=getattr(fast_error, "value", None),
        fix=_fix(kind, level),
    )


def _fast_path(parts: Iterable[Any]) -> list[str | int]:
    out = [p if isinstance(p, int) else str(p) for p in parts]
    return out[1:] if out[:1] == ["data"] else out


# --- bodies -------------------------------------------------------------------------------------


def parse_body(body: bytes | bytearray | memoryview | str, kind: str = "chat_completion", level: str = "compatible") -> Any:
    """Parse a response body as JSON, or raise a :class:`ContractViolation` that says what came instead.

    An HTML page or plain text where JSON was expected almost always means a wrong base URL (the
    gateway's web site, a missing ``/v1``) or a proxy's error page, so the message says so.
    """
    if isinstance(body, (bytes, bytearray, memoryview)):
        try:
            text = bytes(body).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise violation(
                kind, level, f"the body is not UTF-8 text (byte {exc.start})", keyword="json",
                value=bytes(body)[:60].decode("latin-1"), fix="the server must answer with UTF-8 JSON",
            ) from None
    else:
        text = body
    text = text.removeprefix("\ufeff")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise _not_json(kind, level, text, exc) from None


def _not_json(kind: str, level: str, text: str, exc: ValueError) -> ContractViolation:
    head = text.lstrip()
    title = semantic.KIND_TITLES[kind]
    url_fix = (
        "check the base URL: it should be the API root (ending in /v1, e.g. https://taotoken.net/api/v1), "
        "not the web site or a path that a proxy answers"
    )
    if not head:
        return violation(kind, level, f"the body is empty where a {title} (JSON) was expected", keyword="json",
                         value="", fix="the server closed without a body; " + url_fix)
    if head.startswith("<"):
        found = _HTML_TITLE.search(head)
        name = f" (title: {semantic.cut(found.group(1).strip(), 80)})" if found else ""
        return violation(kind, level, f"an HTML page{name} was returned where JSON was expected; likely a wrong base URL",
                         keyword="json", value=head, fix=url_fix)
    if head.startswith(("data:", "event:", ":")):
        return violation(kind, level, f"an event stream was returned where a single JSON {title} was expected",
                         keyword="json", value=head,
                         fix="the server streamed although stream was not requested, or a stream was validated as one "
                         "body; parse streams with pytest_taotoken.sse")
    if head[0] in "{[":
        line, col = getattr(exc, "lineno", "?"), getattr(exc, "colno", "?")
        return violation(kind, level, f"the body is not valid JSON ({getattr(exc, 'msg', exc)} at line {line} column {col})",
                         keyword="json", value=head, fix="the server or a proxy sent truncated or malformed JSON")
    return violation(kind, level, "text was returned where JSON was expected; likely a wrong base URL or a proxy error page",
                     keyword="json", value=head, fix=url_fix)


def validate(kind: str, payload: Any, level: str = "compatible") -> list[str]:
    """Check ``payload`` against contract ``kind`` at ``level``; return warnings, raise on violation.

    ``kind``: ``chat_completion``, ``chat_completion_chunk``, ``error`` or ``models_list``.
    ``payload``: parsed JSON, or the raw body as bytes/str (parsed here).
    ``level``: ``compatible`` (default, what real servers send) or ``strict`` (the OpenAI spec).
    Raises :class:`~pytest_taotoken.errors.ContractViolation` (an ``AssertionError``) naming the path.
    """
    fast = _fast_validator(kind, level)  # validates kind and level; cached
    if isinstance(payload, (bytes, bytearray, memoryview, str)):
        payload = parse_body(payload, kind, level)
    semantic.reject_error_object(kind, payload, level)
    if fast is not None:
        try:
            fast[0](payload)
        except fast[1] as exc:
            raise _schema_violation(kind, level, payload, exc) from None
    elif not reference_validator(kind, level).is_valid(payload):
        raise _schema_violation(kind, level, payload, None)
    return semantic.check(kind, payload, level)
