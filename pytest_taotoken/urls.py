"""Base-URL normalisation and joining: pure functions, no network.

Users paste every variant of a base URL: with ``/v1``, with ``/v1/chat/completions``, with a
``?utm_source=`` tail, without a scheme. :func:`normalize_base_url` turns any of them into the
*API root* (the part before ``/v1``) plus findings that say what was wrong and why it matters.
:func:`join` builds request URLs from the root, and :func:`client_base_urls` says what each client
family wants in its own base-URL field.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import SplitResult, urlsplit, urlunsplit

from .errors import ConfigError
from .findings import Finding

DEFAULT_BASE_URL = "https://taotoken.net/api"
_DEFAULT_PORTS = {"http": 80, "https": 443}
_ENDPOINT_SUFFIXES = ("/chat/completions", "/completions", "/models", "/embeddings", "/responses")
_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_TRAILING_RE = re.compile(r"[/\s]+$")  # slashes and any whitespace (unicode too: strip() would take it later)
_USERINFO_LIKE_RE = re.compile(r"(^|[/\\\s])([^/\\\s:@]*):([^/\\\s@]*)@")
_BROKEN_HTTP_SCHEME_RE = re.compile(r"^https?(?::(?!//)|[;/\\]|//)", re.IGNORECASE)  # https:/x, https//x, http;//x


@dataclass(frozen=True)
class NormalizedURL:
    """The API root (no trailing slash, no ``/v1``, no query) and what was changed to get it."""

    root: str
    findings: tuple[Finding, ...] = field(default=())

    @property
    def host(self) -> str:
        return urlsplit(self.root).hostname or ""

    def __str__(self) -> str:
        return display_url(self.root)


def display_url(url: str) -> str:
    """The URL with any password in its userinfo and every query value masked, for messages.

    Malformed values are masked too (``user:pass@host`` without a scheme, ``https:/user:pass@host``,
    ``user:pass@`` that a typo moved into the path): whatever looks like ``name:password@`` loses its password.
    """
    try:
        parts = urlsplit(url)
        if parts.password is not None:
            netloc = parts.netloc.rsplit("@", 1)[1]
            user = parts.username or ""
            url = urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))
        if parts.query:  # ?key=sk-... is how some gateways take a key
            masked = "&".join(f"{pair.partition('=')[0]}=***" if "=" in pair else "***" for pair in parts.query.split("&"))
            url = urlunsplit(urlsplit(url)._replace(query=masked))
    except ValueError:
        return "<unparseable URL>"
    return _USERINFO_LIKE_RE.sub(lambda m: f"{m.group(1)}{m.group(2)}:***@", url)


def no_proxy_exempts(host: str, entries: str | Iterable[str]) -> bool:
    """True if ``NO_PROXY`` (a comma-separated string, or its entries) exempts ``host`` from the proxy.

    Read as curl reads it: ``*`` for every host, ``example.com`` or ``.example.com`` for the domain and
    its subdomains, a port ignored, IPs and CIDR ranges. httpx, which the plugin's clients use, agrees
    except that it ignores CIDR ranges and takes ``.example.com`` for subdomains only. The doctor and
    the diagnosis share this one reading, so they never disagree about whether a proxy applies.
    """
    if isinstance(entries, str):
        entries = entries.split(",")
    host = host.lower().strip("[]")
    for entry in entries:
        e = entry.strip().lower()
        if not e:
            continue
        if e == "*":
            return True
        e = re.sub(r"^[a-z0-9+.\-]+://", "", e)
        if e.count(":") == 1:
            e = e.rsplit(":", 1)[0]
        e = e.strip("[]").lstrip("*").lstrip(".")
        if e and (host == e or host.endswith("." + e)):
            return True
        try:
            if ipaddress.ip_address(host) in ipaddress.ip_network(e, strict=False):
                return True
        except ValueError:
            continue
    return False


def is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _fail(raw: str, why: str, fix: str, source: str | None) -> ConfigError:
    src = f" (from {source})" if source else ""
    return ConfigError(
        f"base_url{src} {why}: {display_url(raw)[:200]!r}. Fix: {fix}", field="base_url", source=source
    )


def _finding(code: str, sev: str, message: str, fix: str, source: str | None) -> Finding:
    return Finding(code, "error" if sev == "error" else "warning", message, fix, source=source)


def normalize_base_url(raw: str, *, source: str | None = None) -> NormalizedURL:
    """Return the API root of ``raw`` and the findings; raise :class:`ConfigError` if it is unusable."""
    if not isinstance(raw, str):
        raise _fail(str(raw), "is not a string", "give the base URL as text, e.g. https://taotoken.net/api", source)
    findings: list[Finding] = []
    text = raw.strip()
    if text != raw:
        findings.append(
            _finding(
                "base_url.whitespace",
                "warning",
                "the base URL has surrounding whitespace or a newline",
                "remove it where the value is set",
                source,
            )
        )
    if not text:
        raise _fail(raw, "is empty", f"set it to the gateway's API root, e.g. {DEFAULT_BASE_URL}", source)
    bad = next((i for i, ch in enumerate(text) if ord(ch) < 0x20 or ord(ch) == 0x7F), None)
    if bad is not None:
        raise _fail(raw, f"has a control character ({text[bad]!r}) at position {bad + 1}",
                    "remove it where the value is set (it was probably pasted along with the URL)", source)
    if _BROKEN_HTTP_SCHEME_RE.match(text):
        raise _fail(raw, "has a malformed scheme (write 'https://' with a colon and two slashes)",
                    "write the scheme as https://, e.g. https://taotoken.net/api", source)
    if not _SCHEME_RE.match(text):
        if text.startswith("//"):
            text = text[2:]
        text = "https://" + text
        findings.append(
            _finding(
                "base_url.no_scheme",
                "warning",
                "the base URL has no scheme; https:// was assumed",
                "write the scheme explicitly, e.g. https://taotoken.net/api",
                source,
            )
        )
    try:
        parts = urlsplit(text)
        port = parts.port
        host = parts.hostname
    except ValueError as exc:
        raise _fail(raw, f"cannot be parsed ({exc})", "check for typos, e.g. a stray ':' or '[' in the host", source) from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise _fail(
            raw, f"uses the scheme {scheme!r}", "use an http:// or https:// URL such as https://taotoken.net/api", source
        )
    if not host:
        raise _fail(raw, "has no host", "write the full URL, e.g. https://taotoken.net/api", source)
    if any(ch.isspace() for ch in host) or any(ch in host for ch in "/\\?#@"):
        raise _fail(raw, "has an invalid host", "check the host part of the URL for typos", source)
    if parts.query:
        # Names only: a query may carry a key (``?key=...``), and a value cut short would escape redaction.
        names = "&".join(f"{display_url(p.split('=', 1)[0])[:20]}=…" if "=" in p else "…"
                         for p in parts.query.split("&")[:4])
        findings.append(
            _finding(
                "base_url.query",
                "warning",
                f"the base URL carries a query string ('?{names}'), e.g. a tracking tail pasted from a browser;"
                " clients would append paths after it and break the request",
                "drop everything from '?' on",
                source,
            )
        )
    if parts.password is not None:
        findings.append(
            _finding(
                "base_url.userinfo",
                "warning",
                f"the base URL carries a password in its userinfo (…:***@{host[:80]}): httpx sends it as Basic auth in place"
                " of the key's Bearer header, so the key is never sent",
                "remove 'user:password@' from the base URL; the key belongs in the environment variable",
                source,
            )
        )
    if parts.fragment:
        findings.append(
            _finding("base_url.fragment", "warning", "the base URL carries a '#' fragment", "drop everything from '#' on", source)
        )
    path = _TRAILING_RE.sub("", re.sub(r"/{2,}", "/", parts.path))  # a blank before '?' is a paste slip
    stripped: list[str] = []
    while True:
        lowered = path.lower()
        for suffix in (*_ENDPOINT_SUFFIXES, "/v1"):
            if lowered.endswith(suffix):
                stripped.append(path[-len(suffix):])
                path = _TRAILING_RE.sub("", path[: -len(suffix)])
                break
        else:
            break
    if stripped:
        tail = "".join(reversed(stripped))
        findings.append(
            _finding(
                "base_url.v1_suffix",
                "warning",
                f"the base URL ends in '{tail}'; clients that append '/v1' themselves would request"
                " '/v1/v1/...' (or a doubled endpoint path) and get a 404",
                "give the API root without the suffix; clients that need '/v1' get it from the per-client table",
                source,
            )
        )
    if not path and not is_loopback(host):  # a local proxy (LiteLLM on :4000) serves at its root
        findings.append(
            _finding(
                "base_url.no_path",
                "warning",
                "the base URL has no path; a homepage URL is rarely the API root (TaoToken's is https://taotoken.net/api)",
                "use the API root your gateway documents, e.g. https://taotoken.net/api",
                source,
            )
        )
    if scheme == "http" and not is_loopback(host):
        findings.append(
            _finding(
                "base_url.insecure_http",
                "warning",
                "the base URL uses http:// for a non-loopback host; the key would travel in clear",
                "use https://",
                source,
            )
        )
    hostname = host.lower()
    if ":" in hostname:  # IPv6 literal
        hostname = f"[{hostname}]"
    netloc = hostname
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        netloc = f"{hostname}:{port}"
    if "@" in parts.netloc:
        netloc = parts.netloc.rsplit("@", 1)[0] + "@" + netloc
    root = urlunsplit(SplitResult(scheme, netloc, path, "", ""))
    _check_httpx_accepts(raw, root, hostname, source)
    return NormalizedURL(root, tuple(findings))


def _check_httpx_accepts(raw: str, root: str, host: str, source: str | None) -> None:
    """Refuse a host that urlsplit takes but httpx will not send to (invalid IDNA such as 'ſ' or a zero-width
    joiner, an IPv4 address above 255, a bad IPv6 literal), so that it fails at start-up with the fix, not
    at the first request. httpx is imported only for such hosts: plain ASCII names cost nothing."""
    if host.isascii() and not re.fullmatch(r"[0-9.]+|\[.*\]", host):
        return
    import httpx

    try:
        httpx.URL(root)
    except (httpx.InvalidURL, ValueError, UnicodeError) as exc:
        raise _fail(raw, f"has a host that cannot be used ({str(exc)[:120]})",
                    "check the host for typos; give an internationalised host in its xn-- (punycode) form", source) from None


def join(root: str, path: str) -> str:
    """``{root}/v1/{path}``: never ``//``, never ``/v1/v1``, never a query, whatever ``path`` holds."""
    root = root.rstrip("/")
    clean = re.split(r"[?#]", path, maxsplit=1)[0]
    segments: list[str] = []
    for seg in clean.split("/"):
        previous = segments[-1].lower() if segments else "v1"
        if seg and not (seg.lower() == "v1" and previous == "v1"):
            segments.append(seg)
    if segments and segments[0].lower() == "v1":
        segments.pop(0)
    return f"{root}/v1/" + "/".join(segments) if segments else f"{root}/v1"


#: What each client family appends to the base URL it is given.
CLIENT_FAMILIES: dict[str, tuple[str, str]] = {
    "openai-sdk": ("v1", "OpenAI Python SDK (base_url=): appends only /chat/completions"),
    "openai-node": ("v1", "OpenAI Node SDK (baseURL): appends only /chat/completions"),
    "litellm": ("v1", "LiteLLM openai/ provider (api_base): appends only /chat/completions; model 'openai/<id>'"),
    "mini-swe-agent": ("v1", "mini-SWE-agent model_kwargs.api_base (LiteLLM underneath): model_name 'openai/<id>'"),
    "cursor": ("v1", "Cursor 'Override OpenAI Base URL' (openai.baseUrl): appends /chat/completions"),
    "curl": ("root", "curl and clients following the TaoToken docs: append /v1/chat/completions"),
}


def client_base_urls(root: str) -> dict[str, str]:
    """The value to paste into each client family's base-URL field, derived from the API root."""
    root = root.rstrip("/")
    return {name: (f"{root}/v1" if kind == "v1" else root) for name, (kind, _) in CLIENT_FAMILIES.items()}
