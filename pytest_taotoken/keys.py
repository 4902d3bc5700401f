"""API-key hygiene: masking, cleaning and placeholder detection, and a redactor for known secrets.

A key is never printed. Its only printable form is ``mask_key(key)``: ``sk-…`` plus the last four
characters. Every secret the plugin has seen is registered with :data:`REDACTOR`, and every text
that leaves the plugin (messages, reports, cassettes, logs) goes through :func:`redact`.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Iterable

from .findings import Finding

MASK_PREFIX = "sk-…"
KEY_PLACEHOLDER = "<TAOTOKEN_API_KEY>"

_PLACEHOLDER_RE = re.compile(
    r"""^(
        sk-x{3,}.*                      # sk-xxxxxx
      | sk-\.{3}.*                      # sk-...
      | sk-[*•]{3,}.*                   # sk-*****
      | .*your[_\- ]?(api[_\- ]?)?key.* # YOUR_API_KEY, your-key-here, sk-your-key
      | .*你的.*                         # sk-你的密钥
      | <.*>                            # <your key>
      | \$\{?[A-Z_]+\}?                 # $OPENAI_API_KEY left unexpanded
      | x{4,}
      | changeme | replace[_\-]?me | placeholder | dummy | none | null | todo
      | sk-?(test|fake|example|placeholder)
    )$""",
    re.IGNORECASE | re.VERBOSE,
)


_ESCAPED_END_RE = re.compile(r"(?:\\[nrt])+\s*$")


def mask_key(key: str | None) -> str:
    """``sk-…1a2b``; ``(unset)`` for no key. Short keys show nothing of themselves."""
    if not key:
        return "(unset)"
    if len(key) < 12:
        return MASK_PREFIX
    return MASK_PREFIX + key[-4:]


def fingerprint(key: str) -> str:
    """A short, non-reversible identity for comparing keys between sources without printing them."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def is_placeholder(key: str) -> bool:
    """True for the values people leave in templates: ``sk-xxxxxx``, ``YOUR_API_KEY``, ``sk-你的...``."""
    return bool(_PLACEHOLDER_RE.match(key.strip().strip("\"'")))


def clean_key(raw: str, *, source: str = "the key") -> tuple[str, list[Finding]]:
    """Strip what users paste around a key (whitespace, newline, quotes, ``Bearer``) with a finding each."""
    findings: list[Finding] = []
    key = raw
    escaped = _ESCAPED_END_RE.search(key)
    if escaped:  # keys never hold a backslash: this is an escape copied from JSON or an `echo`
        findings.append(
            Finding(
                "key.whitespace",
                "warning",
                f"the key in {source} ends in a literal '{escaped.group(0).strip()}' (a backslash escape copied from a"
                " JSON string or an echo); the server would see a different key and answer 401",
                f"remove it where {source} is set",
                source=source,
            )
        )
        key = key[: escaped.start()]
    if key != key.strip():
        what = "a newline" if ("\n" in key or "\r" in key) else "surrounding whitespace"
        findings.append(
            Finding(
                "key.whitespace",
                "warning",
                f"the key in {source} has {what}; the server would see a different key and answer 401",
                f"remove it where {source} is set (e.g. `export {source}=\"$(printf %s \"$KEY\" | tr -d '[:space:]')\"`)",
                source=source,
            )
        )
        key = key.strip()
    if len(key) >= 2 and key[0] == key[-1] and key[0] in "\"'":
        findings.append(
            Finding(
                "key.quotes",
                "warning",
                f"the key in {source} is wrapped in quotes, which become part of the key",
                f"set {source} without the quotes",
                source=source,
            )
        )
        key = key[1:-1].strip()
    if key.lower().startswith("bearer "):
        findings.append(
            Finding(
                "key.bearer",
                "warning",
                f"the key in {source} starts with 'Bearer '; the client adds that itself",
                f"set {source} to the bare key",
                source=source,
            )
        )
        key = key[7:].strip()
    if any(ch.isspace() for ch in key):
        findings.append(
            Finding(
                "key.inner_whitespace",
                "error",
                f"the key in {source} contains whitespace inside it; it was probably pasted across lines",
                f"copy the key again in one piece into {source}",
                source=source,
            )
        )
    return key, findings


class Redactor:
    """Replaces every registered secret in a text. Thread-safe; secrets shorter than 8 chars are ignored."""

    def __init__(self) -> None:
        self._secrets: set[str] = set()
        self._lock = threading.Lock()
        self._pattern: re.Pattern[str] | None = None

    def add(self, *secrets: str | None) -> None:
        with self._lock:
            for s in secrets:
                if s and len(s) >= 8 and s not in self._secrets:
                    self._secrets.add(s)
                    self._pattern = None

    def secrets(self) -> frozenset[str]:
        return frozenset(self._secrets)

    def redact(self, text: str, replacement: str | None = None) -> str:
        if not self._secrets or not text:
            return text
        pattern = self._pattern
        if pattern is None:
            with self._lock:
                alts = sorted(self._secrets, key=len, reverse=True)
                # Any case: hosts are lowercased, so a key pasted as a base URL comes back lowercased.
                pattern = self._pattern = re.compile("|".join(re.escape(s) for s in alts), re.IGNORECASE)
        if replacement is not None:
            return pattern.sub(replacement, text)
        return pattern.sub(lambda m: mask_key(m.group(0)), text)


REDACTOR = Redactor()


def register_secret(*secrets: str | None) -> None:
    """Remember a secret so that :func:`redact` removes it from any text."""
    REDACTOR.add(*secrets)


def redact(text: str, extra: Iterable[str | None] = (), replacement: str | None = None) -> str:
    """``text`` with every known secret (and ``extra``) replaced by its masked form (or ``replacement``)."""
    if extra:
        REDACTOR.add(*extra)
    return REDACTOR.redact(text, replacement)
