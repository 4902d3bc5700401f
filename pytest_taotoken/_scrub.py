"""Remove secrets from everything a cassette stores: headers by name, the key anywhere else.

A cassette is committed to a repository, so nothing of a key may reach it: not the key, and not a
fragment of it either (a server that echoes ``sk-proj-abcd…wxyz`` in a 401 body would otherwise
leak the first and last characters). Known secrets are the key in the settings plus every secret
registered with :func:`pytest_taotoken.keys.register_secret`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .keys import KEY_PLACEHOLDER, REDACTOR

#: Headers dropped from requests and responses before anything is written (lower case).
SECRET_HEADERS = frozenset({
    "authorization", "proxy-authorization", "api-key", "x-api-key", "cookie", "set-cookie",
    "openai-organization", "openai-project",
})
#: A run of at least this many characters of a secret counts as a leak.
FRAGMENT = 8
#: A fragment with fewer distinct characters (``00000000``) would match ordinary text: not treated as secret.
_MIN_DISTINCT = 5


class Scrubber:
    """Replaces secrets, and any run of ``FRAGMENT`` or more of their characters, by the placeholder."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        found = {s for s in (*secrets, *REDACTOR.secrets()) if s and len(s) >= FRAGMENT}
        self.secrets = frozenset(found)
        self._exact: re.Pattern[str] | None = None
        if found:
            ordered = sorted(found, key=len, reverse=True)
            self._exact = re.compile("|".join(re.escape(s) for s in ordered))
        grams = {s[i:i + FRAGMENT] for s in found for i in range(len(s) - FRAGMENT + 1)}
        grams = {g for g in grams if len(set(g)) >= _MIN_DISTINCT}
        self._grams: re.Pattern[str] | None = None
        if grams:
            # A lookahead finds overlapping fragments, so that a run longer than FRAGMENT is covered whole.
            alternatives = "|".join(re.escape(g) for g in sorted(grams))
            self._grams = re.compile(f"(?=({alternatives}))")

    def __bool__(self) -> bool:
        return self._exact is not None

    def text(self, text: str) -> str:
        """``text`` with every secret and secret fragment replaced by ``<TAOTOKEN_API_KEY>``."""
        if self._exact is None or not text:
            return text
        text = self._exact.sub(KEY_PLACEHOLDER, text)  # one pass: a replacement is never rescanned
        if self._grams is None:
            return text
        # Placeholders already written are left alone, whatever secrets were registered.
        return KEY_PLACEHOLDER.join(self._fragments(part) for part in text.split(KEY_PLACEHOLDER))

    def _fragments(self, text: str) -> str:
        assert self._grams is not None
        spans: list[list[int]] = []
        for match in self._grams.finditer(text):
            start, end = match.start(), match.start() + FRAGMENT
            if spans and start <= spans[-1][1]:
                spans[-1][1] = max(spans[-1][1], end)
            else:
                spans.append([start, end])
        for start, end in reversed(spans):
            text = text[:start] + KEY_PLACEHOLDER + text[end:]
        return text

    def data(self, data: bytes) -> bytes:
        """Bytes scrubbed as UTF-8 text, or byte-wise (latin-1) when they are not UTF-8."""
        if not self.secrets or not data:
            return data
        try:
            return self.text(data.decode("utf-8")).encode("utf-8")
        except UnicodeDecodeError:
            return self.text(data.decode("latin-1")).encode("latin-1")

    def contains_secret(self, text: str) -> bool:
        return self.text(text) != text

    def headers(self, headers: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
        """vcrpy's header form (name -> values), without secret headers or headers that hold a secret."""
        out: dict[str, list[str]] = {}
        for name, value in headers:
            if name.lower() in SECRET_HEADERS or self.contains_secret(value) or self.contains_secret(name):
                continue
            out.setdefault(name, []).append(value)
        return out
