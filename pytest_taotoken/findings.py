"""A finding: one thing wrong (or suspicious) about a configured value, with the fix."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    """``code`` is stable (tests, reports and users match on it); the rest is for people."""

    code: str
    severity: Severity
    message: str
    fix: str
    source: str | None = None
    file: str | None = None
    line: int | None = None
    column: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}: " if self.file and self.line else (f"{self.file}: " if self.file else "")
        src = f" (from {self.source})" if self.source else ""
        return f"{where}{self.severity} {self.code}: {self.message}{src}. Fix: {self.fix}"
