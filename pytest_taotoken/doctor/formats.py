"""Parsers that remember where each value was written: JSON(C), YAML, TOML and env files.

A finding is only useful if it points at the line to edit, and the standard parsers forget
positions. Each parser here returns the data plus a map from a key path to its 1-based
``(line, column)``, and raises :class:`ParseFailure` (with line and column) on broken text, so
that one broken file becomes one finding while the other files are still checked.
"""

from __future__ import annotations

import bisect
import json
import json.decoder
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

Path_ = tuple[str | int, ...]
Pos = tuple[int, int]
MAX_DEPTH = 200


class ParseFailure(ValueError):
    """The text does not parse; ``line`` and ``column`` are 1-based."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


@dataclass
class Located:
    """Parsed data and where each key path was written."""

    data: Any
    positions: dict[Path_, Pos] = field(default_factory=dict)

    def pos(self, path: Path_) -> Pos:
        """The position of ``path``, or of its nearest written ancestor, or the file's start."""
        while path:
            if path in self.positions:
                return self.positions[path]
            path = path[:-1]
        return (1, 1)


class _Lines:
    """Offset -> (line, column), both 1-based."""

    def __init__(self, text: str) -> None:
        self.starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]

    def at(self, offset: int) -> Pos:
        index = bisect.bisect_right(self.starts, offset) - 1
        return index + 1, offset - self.starts[index] + 1


# ---------------------------------------------------------------- JSON / JSONC

_scanstring: Any = getattr(json.decoder, "scanstring")  # noqa: B009 - public but not in typeshed
_NUMBER_RE = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_WS = " \t\n\r"


class _JSONParser:
    """A small recursive-descent JSON parser that records key positions; JSONC optional."""

    def __init__(self, text: str, *, jsonc: bool) -> None:
        self.text = text
        self.jsonc = jsonc
        self.lines = _Lines(text)
        self.positions: dict[Path_, Pos] = {}

    def fail(self, message: str, offset: int) -> ParseFailure:
        line, column = self.lines.at(min(offset, len(self.text)))
        return ParseFailure(message, line, column)

    def skip(self, i: int) -> int:
        text, n = self.text, len(self.text)
        while i < n:
            ch = text[i]
            if ch in _WS:
                i += 1
            elif self.jsonc and text.startswith("//", i):
                end = text.find("\n", i)
                i = n if end < 0 else end + 1
            elif self.jsonc and text.startswith("/*", i):
                end = text.find("*/", i + 2)
                if end < 0:
                    raise self.fail("unterminated /* comment", i)
                i = end + 2
            else:
                break
        return i

    def parse(self) -> Any:
        i = self.skip(0)
        if i >= len(self.text):
            raise self.fail("the file is empty; expected a JSON object", i)
        value, i = self.value(i, (), 0)
        i = self.skip(i)
        if i < len(self.text):
            raise self.fail("extra data after the JSON value", i)
        return value

    def value(self, i: int, path: Path_, depth: int) -> tuple[Any, int]:
        if depth > MAX_DEPTH:
            raise self.fail("nested too deeply", i)
        text = self.text
        if i >= len(text):
            raise self.fail("unexpected end of file; expected a value", i)
        ch = text[i]
        if ch == "{":
            return self.obj(i, path, depth)
        if ch == "[":
            return self.arr(i, path, depth)
        if ch == '"':
            return self.string(i)
        for word, val in (("true", True), ("false", False), ("null", None)):
            if text.startswith(word, i):
                return val, i + len(word)
        m = _NUMBER_RE.match(text, i)
        if m:
            s = m.group(0)
            return (float(s) if any(c in s for c in ".eE") else int(s)), m.end()
        hint = " (strings need double quotes)" if ch == "'" else ""
        raise self.fail(f"expected a value, found {ch!r}{hint}", i)

    def string(self, i: int) -> tuple[str, int]:
        try:
            text, end = _scanstring(self.text, i + 1, True)
            return str(text), int(end)
        except json.JSONDecodeError as exc:
            raise self.fail(exc.msg.lower(), exc.pos) from None

    def obj(self, i: int, path: Path_, depth: int) -> tuple[dict[str, Any], int]:
        out: dict[str, Any] = {}
        i = self.skip(i + 1)
        if i < len(self.text) and self.text[i] == "}":
            return out, i + 1
        while True:
            if i >= len(self.text) or self.text[i] != '"':
                if self.jsonc and i < len(self.text) and self.text[i] == "}" and out:
                    return out, i + 1  # trailing comma
                found = repr(self.text[i]) if i < len(self.text) else "end of file"
                raise self.fail(f"expected a \"quoted\" key, found {found}", i)
            key_at = i
            key, i = self.string(i)
            i = self.skip(i)
            if i >= len(self.text) or self.text[i] != ":":
                raise self.fail(f"expected ':' after the key {key[:40]!r}", i)
            sub: Path_ = (*path, key)
            self.positions[sub] = self.lines.at(key_at)
            val, i = self.value(self.skip(i + 1), sub, depth + 1)
            out[key] = val
            i = self.skip(i)
            if i < len(self.text) and self.text[i] == ",":
                i = self.skip(i + 1)
                continue
            if i < len(self.text) and self.text[i] == "}":
                return out, i + 1
            raise self.fail("expected ',' or '}' after an object member (is a comma missing?)", i)

    def arr(self, i: int, path: Path_, depth: int) -> tuple[list[Any], int]:
        out: list[Any] = []
        i = self.skip(i + 1)
        if i < len(self.text) and self.text[i] == "]":
            return out, i + 1
        while True:
            if self.jsonc and out and i < len(self.text) and self.text[i] == "]":
                return out, i + 1
            sub: Path_ = (*path, len(out))
            self.positions[sub] = self.lines.at(i)
            val, i = self.value(i, sub, depth + 1)
            out.append(val)
            i = self.skip(i)
            if i < len(self.text) and self.text[i] == ",":
                i = self.skip(i + 1)
                continue
            if i < len(self.text) and self.text[i] == "]":
                return out, i + 1
            raise self.fail("expected ',' or ']' after an array item (is a comma missing?)", i)


def parse_json(text: str, *, jsonc: bool = False) -> Located:
    """Parse JSON (or JSONC: comments and trailing commas, as in editor settings) with positions."""
    parser = _JSONParser(text.removeprefix("\ufeff"), jsonc=jsonc)
    data = parser.parse()
    return Located(data, parser.positions)


# ---------------------------------------------------------------- YAML


def _yaml_positions(root: yaml.Node) -> dict[Path_, Pos]:
    positions: dict[Path_, Pos] = {}
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, Path_]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if id(node) in seen or len(path) > MAX_DEPTH:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else repr(key_node.value)[:40]
                mark = key_node.start_mark
                positions.setdefault((*path, key), (mark.line + 1, mark.column + 1))
                stack.append((value_node, (*path, key)))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                mark = item.start_mark
                positions.setdefault((*path, index), (mark.line + 1, mark.column + 1))
                stack.append((item, (*path, index)))
    return positions


def parse_yaml(text: str) -> Located:
    """Parse one YAML document with the safe loader, keeping the position of each key."""
    loader: yaml.SafeLoader | None = None
    try:
        loader = yaml.SafeLoader(text)  # the reader rejects unprintable characters here already
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise ParseFailure(str(exc.problem or exc.context or "invalid YAML"), line, column) from None
    except yaml.reader.ReaderError as exc:
        line, column = _Lines(text).at(max(0, min(exc.position, len(text))))
        raise ParseFailure(f"unacceptable character {exc.character!r}", line, column) from None
    except yaml.YAMLError as exc:
        raise ParseFailure(str(exc).splitlines()[0] if str(exc) else "invalid YAML", 1, 1) from None
    except RecursionError:
        raise ParseFailure("nested too deeply", 1, 1) from None
    finally:
        if loader is not None:
            loader.dispose()
    return Located(data, _yaml_positions(node) if node is not None else {})


# ---------------------------------------------------------------- TOML

_TOML_ERR_RE = re.compile(r"^(?P<msg>.*?)\s*\(at line (?P<line>\d+), column (?P<col>\d+)\)\s*$", re.S)
_TOML_HEADER_RE = re.compile(r"^\s*(\[\[?)\s*([^\[\]#]+?)\s*\]\]?\s*(?:#.*)?$")
_TOML_BARE = r"(?:\"[^\"]*\"|'[^']*'|[A-Za-z0-9_\-]+)"
_TOML_KEY_RE = re.compile(rf"^(\s*)({_TOML_BARE}(?:\s*\.\s*{_TOML_BARE})*)\s*=")


def _toml_key_parts(dotted: str) -> tuple[str, ...]:
    parts = re.findall(r"\"([^\"]*)\"|'([^']*)'|([A-Za-z0-9_\-]+)", dotted)
    return tuple(a or b or c for a, b, c in parts)


def _toml_positions(text: str) -> dict[Path_, Pos]:
    """A light line scan: table headers and ``key =`` lines (multi-line strings skipped)."""
    positions: dict[Path_, Pos] = {}
    table: Path_ = ()
    arrays: dict[Path_, int] = {}
    in_multiline: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if in_multiline:
            if line.count(in_multiline) % 2 == 1:
                in_multiline = None
            continue
        header = _TOML_HEADER_RE.match(line)
        if header:
            parts = _toml_key_parts(header.group(2))
            if header.group(1) == "[[":
                index = arrays.get(parts, -1) + 1
                arrays[parts] = index
                table = (*parts, index)
            else:
                table = parts
            positions.setdefault(table, (number, line.index("[") + 1))
            continue
        key = _TOML_KEY_RE.match(line)
        if key:
            path = (*table, *_toml_key_parts(key.group(2)))
            positions.setdefault(path, (number, len(key.group(1)) + 1))
            rest = line[key.end():]
            for quote in ('"""', "'''"):
                if rest.count(quote) % 2 == 1:
                    in_multiline = quote
    return positions


def parse_toml(text: str) -> Located:
    """Parse TOML with :mod:`tomllib`; positions come from a line scan, errors from its message."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        m = _TOML_ERR_RE.match(message)
        if m:
            raise ParseFailure(m.group("msg"), int(m.group("line")), int(m.group("col"))) from None
        lines = text.splitlines() or [""]
        cleaned = re.sub(r"\s*\(at end of document\)\s*$", "", message)
        raise ParseFailure(cleaned or "invalid TOML", len(lines), len(lines[-1]) + 1) from None
    except RecursionError:
        raise ParseFailure("nested too deeply", 1, 1) from None
    return Located(data, _toml_positions(text))


# ---------------------------------------------------------------- env files and shell profiles

_ASSIGN_RE = re.compile(r"^(?P<indent>\s*)(?:(?P<export>export|declare\s+-x|typeset\s+-x)\s+)?"
                        r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<eq>\s*=\s*)")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "$": "$", "`": "`"}


@dataclass(frozen=True)
class EnvEntry:
    """One ``NAME=value`` assignment. ``quote`` is the quote character that wrapped the value, if any."""

    name: str
    value: str
    line: int
    column: int
    quote: str | None = None
    exported: bool = False
    dynamic: bool = False  # command substitution: the value is only known when the shell runs


def _unescape(s: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), "\\" + m.group(1)), s)


def _find_closing(text: str, start: int, quote: str) -> int:
    i = start
    while True:
        j = text.find(quote, i)
        if j < 0 or quote == "'":
            return j
        backslashes = 0
        k = j - 1
        while k >= start and text[k] == "\\":
            backslashes += 1
            k -= 1
        if backslashes % 2 == 0:
            return j
        i = j + 1


def iter_env(text: str, *, strict: bool) -> Iterator[EnvEntry | ParseFailure]:
    """Yield the assignments of a ``.env`` file or shell profile, and a :class:`ParseFailure` per bad line.

    ``strict`` (``.env`` files): a line that is not ``NAME=value`` is reported. Shell profiles hold
    other code too, so there such lines are skipped.
    """
    lines = _Lines(text)
    n = len(text)
    i = 0
    while i < n:
        end = text.find("\n", i)
        end = n if end < 0 else end
        line = text[i:end]
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            i = end + 1
            continue
        m = _ASSIGN_RE.match(line)
        if not m:
            if strict:
                ln, col = lines.at(i + len(line) - len(line.lstrip()))
                yield ParseFailure(f"expected NAME=value, found {stripped[:40]!r}", ln, col)
            i = end + 1
            continue
        name = m.group("name")
        vstart = i + m.end()
        ln, col = lines.at(i + len(m.group("indent")) + (len(m.group("export")) + 1 if m.group("export") else 0))
        first = text[vstart] if vstart < n else ""
        if first in ("'", '"'):
            close = _find_closing(text, vstart + 1, first)
            if close < 0:
                qline, qcol = lines.at(vstart)
                yield ParseFailure(f"the value of {name} opens a {first} quote that is never closed", qline, qcol)
                return
            raw = text[vstart + 1:close]
            value = _unescape(raw) if first == '"' else raw
            nxt = text.find("\n", close)
            i = n + 1 if nxt < 0 else nxt + 1
            dynamic = first == '"' and ("$(" in raw or "`" in raw)
            yield EnvEntry(name, value, ln, col, first, bool(m.group("export")), dynamic)
            continue
        raw = text[vstart:end]
        value = re.split(r"\s+#", raw, maxsplit=1)[0].rstrip().rstrip("\r")
        if not strict and re.search(r"\s", value):
            value = value.split()[0] if value.split() else ""
        dynamic = "$(" in value or "`" in value
        yield EnvEntry(name, value, ln, col, None, bool(m.group("export")), dynamic)
        i = end + 1
