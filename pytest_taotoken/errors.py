"""The exceptions pytest-taotoken raises, in one place.

::

    Exception
     ├── TaoTokenError                  base of everything below
     │    ├── ConfigError (ValueError)  a setting is wrong: names the field, its source and the fix
     │    └── CassetteError             a cassette is missing, corrupt or being written by another worker
     └── AssertionError
          ├── ContractViolation         a reply breaks its JSON contract (a test failure, not an error)
          └── ExchangeFailed            a request through the plugin's clients failed; carries a Diagnosis

``ContractViolation`` and ``ExchangeFailed`` are ``AssertionError`` subclasses so that pytest
reports them as test failures with their message, never as internal errors.
"""

from __future__ import annotations

from typing import Any


class TaoTokenError(Exception):
    """Base class of the plugin's own non-assertion errors."""


class ConfigError(TaoTokenError, ValueError):
    """A configuration value is unusable. The message names the field, its source and the fix."""

    def __init__(self, message: str, *, field: str | None = None, source: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.source = source


class CassetteError(TaoTokenError):
    """A cassette cannot be used: missing, corrupt, or locked by another writer."""


class ContractViolation(AssertionError):
    """A payload breaks its contract. ``path`` is the JSON path of the offending value."""

    def __init__(self, message: str, *, kind: str = "", path: str = "$", keyword: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.path = path
        self.keyword = keyword


class ExchangeFailed(AssertionError):
    """A request failed; ``diagnosis`` names the cause and the fix."""

    def __init__(self, message: str, *, diagnosis: Any = None) -> None:
        super().__init__(message)
        self.diagnosis = diagnosis
