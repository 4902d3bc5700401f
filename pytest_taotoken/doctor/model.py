"""The doctor's data: a value read from a source, what a source yielded, and the whole result.

Data flows one way: :mod:`.sources` reads files and the environment into :class:`SourceRead`
objects holding :class:`ConfigValue` items; :mod:`.checks` turns those into findings; the result
is a :class:`DoctorResult`, rendered as text or as the dict that ``contracts/doctor.schema.json``
describes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from ..findings import Finding
from ..keys import mask_key, redact
from ..urls import display_url

SCHEMA_VERSION = 1

Kind = Literal[
    "environment", "dotenv", "shell", "rl_toml", "swe_yaml", "cursor_settings",
    "auth_json", "profiles_json", "mcp_json", "unknown",
]
FieldName = Literal[
    "base_url", "api_key", "api_key_env", "model", "proxy", "no_proxy", "timeout",
    "temperature", "n_samples", "max_tokens", "concurrency", "max_retries", "provider",
]

#: What each kind of source is, in words, for messages.
KIND_TITLES: dict[str, str] = {
    "environment": "shell environment",
    "dotenv": ".env file",
    "shell": "shell profile",
    "rl_toml": "RL framework TOML",
    "swe_yaml": "mini-SWE-agent YAML",
    "cursor_settings": "Cursor settings.json",
    "auth_json": "agent auth.json",
    "profiles_json": "profile switcher config.json",
    "mcp_json": "MCP settings",
    "unknown": "unrecognised file",
}


_REF_RE = re.compile(r"^\$(?:\{(?:env:)?(?P<braced>[A-Za-z_][A-Za-z0-9_]*)\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))$")


def env_reference(value: Any) -> str | None:
    """``FOO`` for ``$FOO``, ``${FOO}`` or ``${env:FOO}``: a value that names a variable instead of holding one."""
    if not isinstance(value, str):
        return None
    m = _REF_RE.match(value.strip())
    return (m.group("braced") or m.group("bare")) if m else None


@dataclass(frozen=True)
class ConfigValue:
    """One value as written in one place.

    ``client`` is the client family that reads it (a key of :data:`urls.CLIENT_FAMILIES`, or
    ``"taotoken"`` for values this plugin normalises itself); it decides which base-URL form and
    which model-ID form fit. ``shared`` is False for values that are not meant to agree with the
    others (a template file, a profile that is not selected).
    """

    field: FieldName
    value: Any
    name: str
    label: str
    file: str | None = None
    line: int | None = None
    column: int | None = None
    client: str | None = None
    role: str | None = None
    shared: bool = True
    expands_env: bool = False
    literal: bool = True

    @property
    def where(self) -> str:
        """``.env:3`` or ``environment``: where a person goes to change the value."""
        if self.file is None:
            return "environment"
        return f"{self.file}:{self.line}" if self.line else self.file

    @property
    def source(self) -> str:
        """The name of the setting, e.g. ``OPENAI_BASE_URL`` or ``model.model_kwargs.api_base``."""
        return f"environment {self.name}" if self.file is None else self.name

    def shown(self) -> str:
        """The value as it may be printed: keys masked, URL passwords masked, long text cut."""
        if self.field == "api_key":
            if not isinstance(self.value, str):
                return "(not a string)"
            return self.value.strip() if env_reference(self.value) else mask_key(self.value.strip())
        if self.field in ("base_url", "proxy") and isinstance(self.value, str):
            return redact(display_url(self.value.strip()))[:200]
        return redact(str(self.value))[:200]

    def finding(self, code: str, severity: Literal["error", "warning"], message: str, fix: str) -> Finding:
        """A finding located at this value."""
        return Finding(code, severity, redact(message), redact(fix), source=redact(self.source),
                       file=self.file, line=self.line, column=self.column)

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "name": self.name, "value": self.shown(), "file": self.file,
                "line": self.line, "column": self.column, "client": self.client, "role": self.role,
                "shared": self.shared}


@dataclass
class SourceRead:
    """What one source (a file or the environment) yielded: its values and the reader's findings."""

    label: str
    kind: Kind
    file: str | None
    values: list[ConfigValue] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    template: bool = False
    path: str | None = None  # the absolute path, for git and for the pytest items
    defined: dict[str, int] = field(default_factory=dict)  # every NAME= an env file assigns, with its line

    def add(self, value: ConfigValue) -> None:
        self.values.append(value)


class _BySeverity:
    """``errors`` and ``warnings`` of whatever ``findings`` a class holds."""

    findings: list[Finding]

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]


@dataclass
class SourceReport(_BySeverity):
    """One source and every finding located in it (its own and the cross-source ones)."""

    read: SourceRead
    findings: list[Finding] = field(default_factory=list)

    @property
    def status(self) -> str:
        return "error" if self.errors else ("warning" if self.findings else "ok")

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.read.label,
            "kind": self.read.kind,
            "file": self.read.file,
            "template": self.read.template,
            "status": self.status,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "values": [v.to_dict() for v in self.read.values],
        }


@dataclass
class DoctorResult(_BySeverity):
    """Every source checked and every finding, in source order."""

    root: str
    sources: list[SourceReport] = field(default_factory=list)

    @property
    def findings(self) -> list[Finding]:  # type: ignore[override]
        return [f for s in self.sources for f in s.findings]

    @property
    def ok(self) -> bool:
        return not self.errors

    def for_path(self, path: str) -> SourceReport | None:
        """The report of the source read from the absolute ``path`` (or ``"environment"``)."""
        for s in self.sources:
            if (s.read.path or s.read.label) == path:
                return s
        return None

    def to_dict(self) -> dict[str, Any]:
        """The whole result as the dict ``contracts/doctor.schema.json`` describes (keys masked)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": "taotoken doctor",
            "root": self.root,
            "ok": self.ok,
            "summary": {"sources": len(self.sources), "errors": len(self.errors), "warnings": len(self.warnings)},
            "sources": [s.to_dict() for s in self.sources],
            "findings": [f.to_dict() for f in self.findings],
        }
