"""Name the cause and the fix of a failed exchange: one :class:`Diagnosis` per failure.

A user whose training job dies sees ``401``, ``404``, ``KeyError: 'choices'`` or ``local proxy
failed`` and has to work out which of a handful of causes it was. :func:`diagnose` looks at what the
plugin can see (the request, the response or the exception, the settings, the retries made, the
proxy variables in force) and returns one category from :data:`CATEGORIES` with a fix.

The category names are a fixed vocabulary (reports, tests and other tools depend on them)::

    auth  oauth  base_url  model_not_found  bad_response  proxy  rate_limit  timeout
    server_error  connection  contract  stream  bad_request

``bad_request`` extends the issue's table: a 4xx the gateway gave for the request's content (a
context-length overflow, an unsupported parameter) fits none of the other names, and its fix
(change the request) differs from all of theirs.

The clients call :func:`check_response` after every non-streamed reply and
:func:`failure_for_exception` for transport errors; both are cheap on the success path.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from .errors import ContractViolation, ExchangeFailed
from .keys import is_placeholder, mask_key, redact
from .retry import RetryLog, parse_retry_after
from .urls import client_base_urls, display_url, no_proxy_exempts

if TYPE_CHECKING:
    from .settings import Settings

__all__ = [
    "CATEGORIES",
    "SDK_MAX_RETRY_AFTER_S",
    "Diagnosis",
    "check_response",
    "diagnose",
    "failure_for_exception",
    "looks_like_local_path",
    "mask_text",
    "proxy_in_force",
]

CATEGORIES: tuple[str, ...] = (
    "auth", "oauth", "base_url", "model_not_found", "bad_response", "proxy", "rate_limit", "timeout",
    "server_error", "connection", "contract", "stream", "bad_request",
)

#: The openai SDK (like every Stainless-generated SDK) obeys a Retry-After only when 0 < value <= 60 s;
#: above that it silently falls back to its own short backoff. (The issue says 120 s; the SDK's code says 60.)
SDK_MAX_RETRY_AFTER_S = 60.0
BODY_EXCERPT_CHARS = 200
BODY_EXCERPT_LINES = 5
MODELS_FETCH_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Diagnosis:
    """One named cause of a failed exchange. ``evidence`` is ordered and already masked."""

    category: str
    summary: str
    fix: str
    evidence: Mapping[str, str] = field(default_factory=dict)

    def message(self) -> str:
        """Category and one-line summary, then the fix, then the evidence (keys always masked)."""
        lines = [f"[{self.category}] {self.summary}", f"fix: {self.fix}"]
        if self.evidence:
            lines.append("evidence:")
            for name, value in self.evidence.items():
                head, *rest = str(value).splitlines() or [""]
                lines.append(f"  {name}: {head}")
                lines.extend(f"    {line}" for line in rest)
        return redact("\n".join(lines))

    def as_dict(self) -> dict[str, Any]:
        """For the JSON report: the same fields, JSON-ready."""
        return {"category": self.category, "summary": self.summary, "fix": self.fix, "evidence": dict(self.evidence)}

    def as_exception(self) -> ExchangeFailed:
        """The test failure to raise: an ``AssertionError`` whose message is :meth:`message`."""
        return ExchangeFailed(self.message(), diagnosis=self)

    def __str__(self) -> str:
        return self.message()


# --------------------------------------------------------------------------- masking

_KEYLIKE_RE = re.compile(r"\b(?:sk|pk|rk|tt)-[A-Za-z0-9_\-]{8,}")
_BEARER_RE = re.compile(r"(?i)(bearer\s+)([^\s\"',;]{8,})")


def mask_text(text: str, settings: Settings | None = None) -> str:
    """``text`` with every registered secret, the settings' key and anything key-shaped masked."""
    extra = (settings.api_key,) if settings is not None and settings.api_key else ()
    text = redact(text, extra)
    text = _BEARER_RE.sub(lambda m: m.group(1) + mask_key(m.group(2)), text)
    return _KEYLIKE_RE.sub(lambda m: mask_key(m.group(0)), text)


# --------------------------------------------------------------------------- proxies


def _env_proxy_vars(env: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """``{"https_proxy": (VARNAME, value), ...}``: lower-case names win over other spellings, like urllib."""
    found: dict[str, tuple[str, str]] = {}
    for name, value in env.items():
        low = name.lower()
        if low in ("http_proxy", "https_proxy", "all_proxy", "no_proxy") and value and (
            low not in found or name == low
        ):
            found[low] = (name, value)
    return found


def proxy_in_force(url: httpx.URL | str, env: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """``(variable, value)`` of the environment proxy httpx uses for ``url``, or None.

    Mirrors httpx's ``trust_env`` rules: ``{scheme}_proxy`` before ``all_proxy``, any spelling of the
    name, and ``NO_PROXY`` (``*``, hosts, domain suffixes, IPs) switching it off.
    """
    url = httpx.URL(str(url))
    found = _env_proxy_vars(os.environ if env is None else env)
    if "no_proxy" in found and no_proxy_exempts(url.host, found["no_proxy"][1]):
        return None
    for key in (f"{url.scheme}_proxy", "all_proxy"):
        if key in found:
            return found[key]
    return None


def _proxy_evidence(url: httpx.URL | None) -> str:
    if url is None:
        return "unknown"
    proxy = proxy_in_force(url)
    return f"{proxy[0]}={display_url(proxy[1])}" if proxy else "none"


# --------------------------------------------------------------------------- evidence


@dataclass
class _Exchange:
    """What one failed exchange shows, gathered once."""

    request: httpx.Request | None
    response: httpx.Response | None
    settings: Settings | None
    retry_log: RetryLog | None
    body: str = ""
    payload: Any = None
    message: str = ""
    code: str = ""
    etype: str = ""
    param: str = ""

    @property
    def status(self) -> int | None:
        return self.response.status_code if self.response is not None else None

    @property
    def url(self) -> httpx.URL | None:
        return self.request.url if self.request is not None else None

    @property
    def content_type(self) -> str:
        return self.response.headers.get("content-type", "") if self.response is not None else ""

    @property
    def haystack(self) -> str:
        return " ".join((self.message, self.code, self.etype, self.body[:2000])).lower()

    def mask(self, text: str) -> str:
        return mask_text(text, self.settings)

    def where(self) -> str:
        if self.request is None:
            return "the request"
        return f"{self.request.method} {self.mask(display_url(str(self.request.url)))}"

    def requested_model(self) -> str | None:
        if self.request is None:
            return None
        try:
            body = json.loads(self.request.content or b"{}")
        except (ValueError, httpx.RequestNotRead, UnicodeDecodeError):
            return None
        model = body.get("model") if isinstance(body, dict) else None
        return model if isinstance(model, str) else None

    def requested_stream(self) -> bool:
        if self.request is None:
            return False
        try:
            body = json.loads(self.request.content or b"{}")
        except (ValueError, httpx.RequestNotRead, UnicodeDecodeError):
            return False
        return isinstance(body, dict) and body.get("stream") is True

    def evidence(self, **extra: str) -> dict[str, str]:
        ev: dict[str, str] = {}
        if self.request is not None:
            ev["request"] = self.where()
        if self.response is not None:
            ev["status"] = f"{self.response.status_code} {self.response.reason_phrase}".strip()
            ev["content-type"] = self.content_type or "(none)"
            ev["retry-after"] = _retry_after_text(self.response.headers)
            request_id = _request_id(self.response.headers)
            if request_id:
                ev["request-id"] = request_id
        if self.retry_log is not None and self.retry_log.attempts > 1:
            ev["retries"] = _retries_text(self.retry_log)
        elif self.retry_log is not None and self.retry_log.stop_reason.startswith("not retried"):
            ev["retries"] = self.retry_log.stop_reason
        if self.response is not None:
            ev["body"] = _body_excerpt(self.body) if self.body else "(empty)"
        ev["proxy"] = _proxy_evidence(self.url)
        ev.update(extra)
        return {k: self.mask(v) for k, v in ev.items()}


def _read_body(response: httpx.Response) -> str:
    try:
        return response.text
    except httpx.ResponseNotRead:
        return ""
    except (LookupError, ValueError):
        return response.content.decode("utf-8", "replace")


def _body_excerpt(body: str, chars: int = BODY_EXCERPT_CHARS) -> str:
    """The first lines of the body, leading padding dropped and cut short (OpenRouter pads ~3 kB of blanks)."""
    text = body.lstrip()
    lines = [line.rstrip() for line in text.splitlines()[:BODY_EXCERPT_LINES]]
    out = "\n".join(lines)
    if len(out) > chars:
        out = out[:chars] + "…"
    elif len(text) > len(out) + 1:
        out += "\n…"
    return out


def _retry_after_text(headers: httpx.Headers) -> str:
    values = []
    if "retry-after" in headers:
        values.append(headers["retry-after"][:60])
    if "retry-after-ms" in headers:
        values.append(f"{headers['retry-after-ms'][:30]} (retry-after-ms)")
    return ", ".join(values) if values else "(none)"


def _request_id(headers: httpx.Headers) -> str:
    for name in ("x-request-id", "request-id", "x-litellm-call-id", "cf-ray", "apim-request-id"):
        if name in headers:
            return f"{name}: {headers[name][:80]}"
    return ""


def _retries_text(log: RetryLog) -> str:
    statuses = ", ".join("connection error" if s is None else str(s) for s in log.statuses)
    waits = ", ".join(f"{w:.3g} s" for w in log.waits) or "none"
    text = f"{log.attempts} attempts (statuses {statuses}; waits {waits})"
    return f"{text}; {log.stop_reason}" if log.stop_reason else text


def _error_fields(payload: Any) -> tuple[str, str, str, str]:
    """(message, code, type, param) from the error shapes gateways use: OpenAI, vLLM, FastAPI, Azure, bare strings."""
    if not isinstance(payload, dict):
        return "", "", "", ""
    err: Any = payload.get("error", payload)
    if isinstance(err, str):
        return err, "", "", ""
    if not isinstance(err, dict):
        return "", "", "", ""
    message = err.get("message") or err.get("detail") or err.get("msg") or ""
    if not isinstance(message, str):
        message = json.dumps(message)[:500]
    metadata = err.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("raw"), str):
        message = f"{message} ({metadata['raw']})"

    def text(name: str) -> str:
        value = err.get(name)
        return "" if value is None else str(value)

    return message, text("code"), text("type"), text("param")


def _gather(request: httpx.Request | None, response: httpx.Response | None, settings: Settings | None,
            retry_log: RetryLog | None) -> _Exchange:
    ex = _Exchange(request, response, settings, retry_log)
    if response is not None:
        # Masked before anything is cut from it: a key cut in half would escape the masking.
        ex.body = ex.mask(_read_body(response))
        if ex.body.lstrip().startswith(("{", "[")):
            try:
                ex.payload = json.loads(ex.body)
            except ValueError:
                ex.payload = None
        ex.message, ex.code, ex.etype, ex.param = _error_fields(ex.payload)
    return ex


# --------------------------------------------------------------------------- patterns

_OAUTH_RE = re.compile(r"oauth|invalid_grant|(access|refresh|id)[ _]token (has )?expired|token (has )?expired")
_AUTH_RE = re.compile(
    r"invalid_api_key|invalid[ _]api[ _]key|incorrect api key|api key (is )?(invalid|not valid|missing)"
    r"|no (cookie )?auth(entication)? credentials|unauthori[sz]ed|authentication (failed|error)|you didn't provide an api key"
)
_MODEL_RE = re.compile(
    r"model_not_found|deploymentnotfound|(invalid|unknown|no such|unsupported) model"
    r"|model[^.\n]{0,80}?(does not exist|doesn't exist|not found|is not (available|supported|a valid)|not exist)"
)
_CONTEXT_RE = re.compile(
    r"context[_ ]length|context size|maximum context|context window|exceed_context_size|too many tokens in"
)
_QUOTA_RE = re.compile(r"insufficient_quota|exceeded your current quota|quota|billing|credits?")
_CHECKPOINT_RE = re.compile(r"checkpoint|ckpt|global_step|safetensors|\.bin$|\.pt$|/step[_-]?\d+", re.IGNORECASE)


def looks_like_local_path(model: str) -> bool:
    """True for names that are files or training outputs, not served model IDs."""
    return (
        model.startswith(("/", "./", "../", "~", "file:"))
        or bool(re.match(r"^[A-Za-z]:[\\/]", model))
        or "\\" in model
        or model.count("/") >= 3
        or bool(_CHECKPOINT_RE.search(model))
    )


# --------------------------------------------------------------------------- categories


def _api_root(ex: _Exchange) -> str:
    """The API root, for messages: a password or query value in it is masked."""
    return display_url(_raw_api_root(ex))


def _raw_api_root(ex: _Exchange) -> str:
    if ex.settings is not None:
        return ex.settings.api_root
    if ex.url is None:
        return ""
    path = ex.url.path
    cut = path.find("/v1/")
    root_path = path[:cut] if cut >= 0 else path.rsplit("/", 2)[0]
    return str(ex.url.copy_with(path=root_path or "/", query=None)).rstrip("/")


def _key_var(settings: Settings | None) -> str:
    if settings is None:
        return "TAOTOKEN_API_KEY"
    return settings.sources.get("api_key", settings.key_env)


def _auth(ex: _Exchange) -> Diagnosis:
    settings = ex.settings
    var = _key_var(settings)
    header = ex.request.headers.get("authorization") if ex.request is not None else None
    causes: list[str] = []
    if not header:
        if settings is not None and var in settings.empty_env:
            causes.append(f"no key was sent: {var} is set but empty")
        else:
            causes.append(f"no key was sent: {var} is not set in this process")
        fix = f"export {var}=<your key> in the shell that runs the tests"
    elif not header.lower().startswith("bearer "):
        causes.append("the Authorization header lacks the 'Bearer ' prefix")
        fix = "send `Authorization: Bearer <key>`; OpenAI-compatible gateways accept no other form"
    else:
        key = header[7:].strip()
        if (settings is not None and settings.api_key and is_placeholder(settings.api_key)) or is_placeholder(key):
            causes.append(f"the key in {var} ({mask_key(key)}) is a placeholder, not a real key")
            fix = f"export {var}=<your real key> from the gateway's console"
        else:
            fix = (f"check that the key in {var} ({mask_key(key)}) is current and belongs to this gateway"
                   " (an OpenAI key does not work on another gateway, and vice versa); copy it again from the"
                   " gateway's console")
        if settings is not None:
            for finding in settings.findings:
                if finding.code.startswith("key."):
                    causes.append(finding.message)
                    fix = f"{finding.fix}; then {fix}"
        if key != key.strip() or any(ch.isspace() or ch in "\"'" for ch in key):
            causes.append("the key sent contains whitespace, a newline or quotes")
    if ex.status == 403:
        causes.append("HTTP 403: the key was recognised but may not use this model or resource")
    fix += (f". In containers, CI jobs and xdist/Ray workers, check that {var} is passed to the child process"
            f" (e.g. `docker run -e {var}`)")
    cause = "; ".join(causes) if causes else f"the key from {var} was not accepted"
    status = f"HTTP {ex.status}" if ex.status else "the request"
    detail = f" ({ex.message[:120]})" if ex.message else ""
    evidence = ex.evidence(key=f"{mask_key(header[7:].strip()) if header else '(none sent)'} from {var}")
    return Diagnosis("auth", ex.mask(f"{status} from {ex.where()}: {cause}{detail}"), ex.mask(fix), evidence)


def _oauth(ex: _Exchange) -> Diagnosis:
    var = _key_var(ex.settings)
    summary = f"HTTP {ex.status} from {ex.where()}: an OAuth token was rejected ({ex.message[:120] or 'expired'})"
    fix = (f"switch the tool to API-key mode and give it the key from {var}; do not mix an OAuth login and API"
           " keys (log out of the tool's OAuth session, or unset the OAuth token it reads)")
    return Diagnosis("oauth", ex.mask(summary), ex.mask(fix), ex.evidence())


def _base_url(ex: _Exchange, why: str) -> Diagnosis:
    root = _api_root(ex)
    requested = ex.mask(display_url(str(ex.url))) if ex.url is not None else "(unknown)"
    per_family = ", ".join(f"{name}: {url}" for name, url in client_base_urls(root).items()) if root else ""
    fix_parts = [f"the URL requested was {requested}"]
    if ex.url is not None and "/v1/v1" in ex.url.path:
        fix_parts.append("it contains '/v1/v1': the base URL already ends in /v1 and the client appends another")
    if ex.settings is not None:
        fix_parts.extend(f.message for f in ex.settings.findings if f.code.startswith("base_url."))
    if root and httpx.URL(root).path in ("", "/"):
        fix_parts.append("the base URL has no path; gateways usually serve the API under a prefix such as /api"
                         " (TaoToken: https://taotoken.net/api)")
    fix = "; ".join(fix_parts) + (f". Use the API root {root} — per client family: {per_family}" if root else "")
    return Diagnosis("base_url", ex.mask(f"{why} for {ex.where()}"), ex.mask(fix), ex.evidence(**{"api root": root}))


def _closest(model: str, ids: Sequence[str]) -> list[str]:
    tail = model.rsplit("/", 1)[-1].lower()
    same_tail = [i for i in ids if i.rsplit("/", 1)[-1].lower() == tail]
    close = difflib.get_close_matches(model, ids, n=5, cutoff=0.4)
    close += difflib.get_close_matches(tail, [i.rsplit("/", 1)[-1] for i in ids], n=3, cutoff=0.5)
    by_tail = {i.rsplit("/", 1)[-1]: i for i in ids}
    out: list[str] = []
    for name in [*same_tail, *close]:
        full = name if name in ids else by_tail.get(name, name)
        if full not in out and full != model:
            out.append(full)
    return out[:5]


def _fetch_model_ids(ex: _Exchange) -> list[str] | None:
    """GET the models list with the same key, briefly; None when it cannot be had (replay never fetches)."""
    settings, request = ex.settings, ex.request
    if settings is None or request is None or settings.mode == "replay":
        return None
    path = request.url.path
    base = path.rsplit("/chat/completions", 1)[0] if path.endswith("/chat/completions") else None
    url = str(request.url.copy_with(path=f"{base}/models", query=None)) if base else f"{settings.api_root}/v1/models"
    headers = {k: v for k, v in request.headers.items() if k.lower() in ("authorization", "user-agent")}
    try:
        with httpx.Client(timeout=min(MODELS_FETCH_TIMEOUT_S, settings.timeout)) as client:
            reply = client.get(url, headers=headers)
        data = reply.json().get("data") if reply.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    if not isinstance(data, list):
        return None
    return [item["id"] for item in data if isinstance(item, dict) and isinstance(item.get("id"), str)]


def _model_not_found(ex: _Exchange, model_ids: Sequence[str] | None, fetch: bool) -> Diagnosis:
    model = ex.requested_model()
    match = re.search(r"model[ `'\"]+([^`'\"\s]+)[`'\"]", ex.message, re.IGNORECASE)
    if model is None and match:
        model = match.group(1)
    shown = f"'{model}'" if model else "the requested model"
    ids = list(model_ids) if model_ids is not None else (_fetch_model_ids(ex) if fetch else None)
    parts: list[str] = []
    if model and ids is not None:
        closest = _closest(model, ids)
        if closest:
            parts.append("closest IDs the gateway lists: " + ", ".join(closest))
        else:
            parts.append(f"the gateway lists {len(ids)} models, none close to {shown}: "
                         + ", ".join(ids[:8]) + (", …" if len(ids) > 8 else ""))
    elif ids is None:
        parts.append("list the IDs the key may use with GET {root}/v1/models".replace("{root}", _api_root(ex)))
    if model and model.startswith("openai/"):
        bare = model[len("openai/"):]
        known = ids is not None and bare in ids
        parts.append(f"drop the 'openai/' prefix{' (the gateway serves ' + repr(bare) + ')' if known else ''}:"
                     " it is LiteLLM's provider prefix, which LiteLLM strips but this client sent as part of the ID")
    elif model and ids is not None and f"openai/{model}" in ids:
        parts.append(f"the gateway's ID is 'openai/{model}'; with LiteLLM write 'openai/openai/{model}', since"
                     " LiteLLM strips one 'openai/' prefix")
    else:
        parts.append("check for a missing or extra 'openai/' prefix: LiteLLM and mini-SWE-agent want"
                     " 'openai/<id>' and send '<id>'; a raw client must send the bare '<id>'")
    local = bool(model) and looks_like_local_path(model or "")
    parts.append(("the name looks like a local checkpoint path: " if local else "")
                 + "a local checkpoint name is not a model ID; use the ID the gateway serves"
                 " (for vLLM, its --served-model-name)")
    summary = f"HTTP {ex.status} from {ex.where()}: the gateway does not serve the model {shown}"
    if ex.message:
        summary += f" ({ex.message[:120]})"
    return Diagnosis("model_not_found", ex.mask(summary), ex.mask("; ".join(parts)),
                     ex.evidence(model=model or "(unknown)"))


def _rate_limit(ex: _Exchange) -> Diagnosis:
    headers = ex.response.headers if ex.response is not None else httpx.Headers()
    hint = parse_retry_after(headers)
    notes: list[str] = []
    if hint.error:
        notes.append(f"the server's {hint.error}: clients cannot honour it")
    elif hint.seconds is None:
        notes.append("the server sent no Retry-After: clients fall back to their own backoff")
    elif hint.seconds > SDK_MAX_RETRY_AFTER_S:
        notes.append(f"the server asked to wait {hint.seconds:g} s ({hint.header}: {hint.raw}), more than the"
                     f" openai SDK honours ({SDK_MAX_RETRY_AFTER_S:g} s): it retries sooner and is refused again")
    else:
        notes.append(f"the server asked to wait {hint.seconds:g} s ({hint.header}: {hint.raw})")
    log = ex.retry_log
    retries = log.retries if log is not None else 0
    quota = bool(_QUOTA_RE.search(ex.haystack))
    summary = (f"HTTP 429 from {ex.where()}"
               + (f" after {retries} retr{'y' if retries == 1 else 'ies'}" if retries else "")
               + (": the key's quota is used up" if quota else ": too many requests")
               + (f" ({ex.message[:120]})" if ex.message else ""))
    fix = ("lower parallel sampling (--taotoken-samples, n_samples, concurrent workers) or the request rate, or"
           " check the key's quota and billing on the gateway's console")
    if quota:
        fix = "the quota is exhausted, so waiting will not help: top up or use another key; otherwise " + fix
    fix += "; " + "; ".join(notes)
    if log is not None and log.stop_reason:
        fix += f"; retrying stopped: {log.stop_reason}"
    return Diagnosis("rate_limit", ex.mask(summary), ex.mask(fix), ex.evidence())


def _bad_request(ex: _Exchange) -> Diagnosis:
    if _CONTEXT_RE.search(ex.haystack):
        what = "the prompt and max_tokens exceed the model's context"
        fix = ("shorten the prompt (truncate the history of long multi-turn rollouts) or lower max_tokens;"
               " check the model's context length on the gateway")
        if ex.status and ex.status >= 500:
            what += f" (reported as HTTP {ex.status}, but retrying will not help)"
    else:
        what = "the gateway refused the request's content"
        param = f" '{ex.param}'" if ex.param else ""
        fix = (f"change the parameter{param} the error names; the gateway (or the model behind it) does not accept"
               " it as sent")
    summary = f"HTTP {ex.status} from {ex.where()}: {what}" + (f" ({ex.message[:160]})" if ex.message else "")
    return Diagnosis("bad_request", ex.mask(summary), ex.mask(fix), ex.evidence())


def _server_error(ex: _Exchange) -> Diagnosis:
    html = "html" in ex.content_type.lower() or ex.body.lstrip()[:15].lower().startswith(("<!doctype", "<html"))
    origin = "an HTML error page from a front proxy (the gateway behind it failed or timed out)" if html else (
        "the gateway failed")
    retries = ex.retry_log.retries if ex.retry_log is not None else 0
    summary = (f"HTTP {ex.status} from {ex.where()}: {origin}"
               + (f", after {retries} retr{'y' if retries == 1 else 'ies'}" if retries else "")
               + (f" ({ex.message[:120]})" if ex.message else ""))
    rid = _request_id(ex.response.headers) if ex.response is not None else ""
    fix = ("retry later; if the error persists, report it to the gateway's operator"
           + (f" with the {rid}" if rid else " with the time of the request"))
    return Diagnosis("server_error", ex.mask(summary), ex.mask(fix), ex.evidence())


def _bad_response(ex: _Exchange, what: str) -> Diagnosis:
    root = _api_root(ex)
    excerpt = ex.body.lstrip()[:BODY_EXCERPT_CHARS]
    summary = f"HTTP {ex.status} from {ex.where()} but {what}"
    fix = ("usually a wrong base URL answered by a web page (check that "
           f"{root or 'the base URL'} is the gateway's API root, not its homepage), or an error the gateway"
           f" wrapped in HTTP 200. The body begins: {excerpt!r}")
    return Diagnosis("bad_response", ex.mask(summary), ex.mask(fix), ex.evidence())


def _from_status(ex: _Exchange, model_ids: Sequence[str] | None, fetch_models: bool) -> Diagnosis:
    status = ex.status or 0
    hay = ex.haystack
    if status in (400, 401, 403) and _OAUTH_RE.search(hay):
        return _oauth(ex)
    if status == 429:
        return _rate_limit(ex)
    if status in (401, 403) or (status == 400 and _AUTH_RE.search(hay)):
        return _auth(ex)
    if status in (400, 403, 404, 422) and _MODEL_RE.search(hay):
        return _model_not_found(ex, model_ids, fetch_models)
    if _CONTEXT_RE.search(hay):
        return _bad_request(ex)
    if ex.url is not None and "/v1/v1" in ex.url.path:
        return _base_url(ex, f"HTTP {status}: the path contains '/v1/v1'")
    if status in (404, 405):
        kind = "an HTML page" if "html" in ex.content_type else (
            "FastAPI's {\"detail\":\"Not Found\"}" if '"detail"' in ex.body[:80] else "no such API path")
        return _base_url(ex, f"HTTP {status} ({kind})")
    if 300 <= status < 400:
        location = ex.response.headers.get("location", "") if ex.response is not None else ""
        return _base_url(ex, f"HTTP {status}: the server redirects to {location or '(no Location)'}")
    if status == 408:
        return _timeout(ex, None, f"HTTP 408 from {ex.where()}: the server timed out waiting for the request")
    if status >= 500:
        return _server_error(ex)
    return _bad_request(ex)


# --------------------------------------------------------------------------- success path checks


def _endpoint(path: str) -> str | None:
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/models"):
        return "models"
    return None


def _validate(kind: str, payload: Any) -> ContractViolation | None:
    """The contract's verdict, or None while the contracts module is absent."""
    try:
        from . import contracts
    except ImportError:
        return None
    try:
        contracts.validate(kind, payload)
    except ContractViolation as exc:
        return exc
    return None


def _contract(ex: _Exchange, violation: ContractViolation) -> Diagnosis:
    text = ex.mask(str(violation))  # masked before any cut below
    summary = f"the reply from {ex.where()} breaks the {violation.kind or 'response'} contract at {violation.path}"
    fix = (f"{text.splitlines()[0][:300] if text else 'see the violation'}; report it to the gateway's operator,"
           " or relax the contract only if every client you use tolerates it")
    ev = ex.evidence(violation=text[:600], path=violation.path or "$")
    for attr in ("offset", "line"):
        value = getattr(violation, attr, None)
        if value is not None:
            ev[attr] = ex.mask(str(value))[:200]
    return Diagnosis("contract", ex.mask(summary), ex.mask(fix), ev)


def _check_success(ex: _Exchange, kind: str) -> Diagnosis | None:
    ctype = ex.content_type.lower()
    body = ex.body
    if "event-stream" in ctype:
        return _check_stream_body(ex) if kind == "chat" else _bad_response(ex, "the body is an event stream")
    stripped = body.lstrip()
    if not stripped:
        return _bad_response(ex, "the body is empty")
    if "html" in ctype or stripped[:15].lower().startswith(("<!doctype", "<html")):
        return _bad_response(ex, "the body is an HTML page, not JSON")
    payload = ex.payload
    if payload is None:
        return _bad_response(ex, f"the body is not JSON ({ctype or 'no content type'})")
    if not isinstance(payload, dict):
        return _bad_response(ex, f"the body is a JSON {type(payload).__name__}, not an object")
    if "error" in payload or payload.get("object") == "error":
        inner = f": {ex.message[:160]}" if ex.message else ""
        return _bad_response(ex, f"the body is an error wrapped in HTTP 200{inner}")
    if kind == "chat":
        choices = payload.get("choices")
        if choices is None:
            return _bad_response(ex, "the JSON has no 'choices' (the \"reading 'choices'\" crash)")
        if choices == []:
            return _bad_response(ex, "'choices' is empty")
        violation = _validate("chat_completion", payload)
    else:
        if not isinstance(payload.get("data"), list):
            return _bad_response(ex, "the models list has no 'data' array")
        violation = _validate("models_list", payload)
    return _contract(ex, violation) if violation is not None else None


def _check_stream_body(ex: _Exchange) -> Diagnosis | None:
    """A stream read in full (``stream: true`` sent without ``client.stream``): parse it like a stream."""
    try:
        from . import sse
    except ImportError:
        return None
    content = ex.response.content if ex.response is not None else b""
    try:
        sse.assemble(content)
    except AssertionError as exc:
        return _from_parse_error(ex, exc)
    return None


# --------------------------------------------------------------------------- exceptions


def _is_stream_error(exc: BaseException) -> bool:
    return any(cls.__name__ in ("StreamError", "SSEError") for cls in type(exc).__mro__)


_STREAM_FIXES: dict[str, str] = {
    "malformed_json": "a data event that is not one JSON object comes from the gateway, or from a proxy that splits or"
                      " rewrites events: report it to the gateway's operator with the offending line",
    "error_event": "the gateway reported an error inside the HTTP 200 stream (an upstream failure, a token limit, a"
                   " rejected tool call): read its message; retry, and report it to the operator if it persists",
    "truncated": "the stream was cut before [DONE] or a finish_reason: look for a proxy or load-balancer read timeout"
                 " or buffering between client and gateway (nginx: proxy_read_timeout, proxy_buffering off), a"
                 " gateway crash, or a client timeout shorter than the reply",
    "not_sse": "the server ignored stream=true or answered with an error or a web page: check the base URL and model",
    "empty": "the stream carried no choices: check that the model produced output and that the gateway fills"
             " choices[].delta",
    "reset": "the connection broke mid-stream: the gateway or a proxy in between dropped it; retry, and report it to"
             " the gateway's operator if it persists",
}


def _from_parse_error(ex: _Exchange, exc: BaseException) -> Diagnosis:
    if not _is_stream_error(exc) and isinstance(exc, ContractViolation):
        return _contract(ex, exc)
    offset = getattr(exc, "offset", None)
    line = getattr(exc, "line", None)
    reason = getattr(exc, "reason", None) or ("reset" if isinstance(exc, httpx.TransportError) else "")
    text = str(exc) or type(exc).__name__
    where = ex.where() if ex.request is not None else "the stream"
    at = f" at byte {offset}" if offset is not None else ""
    summary = f"the event stream from {where} broke{at}: {text.splitlines()[0][:200]}"
    fix = _STREAM_FIXES.get(reason, _STREAM_FIXES["truncated"] + "; " + _STREAM_FIXES["malformed_json"])
    extra: dict[str, str] = {"error": text[:600]}
    if offset is not None:
        extra["offset"] = str(offset)
    if line is not None:
        extra["line"] = repr(line)[:300] if not isinstance(line, int) else str(line)
    return Diagnosis("stream", ex.mask(summary), ex.mask(fix), ex.evidence(**extra))


def _timeout(ex: _Exchange, exc: BaseException | None, summary: str | None = None) -> Diagnosis:
    settings = ex.settings
    configured = ""
    if ex.request is not None and isinstance(ex.request.extensions.get("timeout"), dict):
        t = ex.request.extensions["timeout"]
        phases: dict[type[BaseException], str] = {
            httpx.ConnectTimeout: "connect", httpx.WriteTimeout: "write", httpx.PoolTimeout: "pool"}
        phase = phases.get(type(exc), "read") if exc is not None else "read"
        if t.get(phase) is not None:
            configured = f"{t[phase]:g} s ({phase})"
    if settings is not None:
        configured = configured or f"{settings.timeout:g} s"
        configured += f" from {settings.source('timeout')}"
    kind = type(exc).__name__ if exc is not None else "timeout"
    if summary is None:
        what = ("the server did not accept the connection in time" if isinstance(exc, httpx.ConnectTimeout)
                else "no answer came in time")
        summary = f"{kind} for {ex.where()}: {what}"
    fix = (f"the timeout in force was {configured or 'the client default'}; raise it with --taotoken-timeout or"
           " TAOTOKEN_TIMEOUT: long multi-turn rollouts need at least 120 s. If the server accepts connections"
           " and never answers, it is overloaded or hung: check the gateway's status")
    extra = {"timeout": configured or "(unknown)"}
    if exc is not None:
        extra["error"] = f"{kind}: {exc}"[:300]
    return Diagnosis("timeout", ex.mask(summary), ex.mask(fix), ex.evidence(**extra))


def _proxy(ex: _Exchange, exc: BaseException, var: str, value: str) -> Diagnosis:
    host = ex.url.host if ex.url is not None else "the host"
    summary = f"{type(exc).__name__} for {ex.where()} through the proxy {var}={display_url(value)}: {exc}"
    no_proxy = os.environ.get("NO_PROXY") or os.environ.get("no_proxy") or ""
    fix = (f"unset {var} (`unset {var}`), or add {host} to NO_PROXY"
           f" (`export NO_PROXY={no_proxy + ',' if no_proxy else ''}{host}`); the proxy {display_url(value)}"
           " refused or dropped the connection")
    return Diagnosis("proxy", ex.mask(summary)[:400], ex.mask(fix), ex.evidence(error=ex.mask(str(exc))[:300]))


def _connection(ex: _Exchange, exc: BaseException) -> Diagnosis:
    text = str(exc)
    low = text.lower()
    host = ex.url.host if ex.url is not None else "?"
    port = ex.url.port if ex.url is not None and ex.url.port else (443 if ex.url and ex.url.scheme == "https" else 80)
    if any(s in low for s in ("name or service not known", "nodename nor servname", "getaddrinfo",
                              "name resolution", "no address associated", "name does not resolve")):
        what, fix = (f"the host name {host} does not resolve (DNS)",
                     f"check the spelling of {host} in the base URL, and the machine's DNS or VPN")
    elif "refused" in low or "errno 111" in low or "errno 61" in low:
        what, fix = (f"nothing accepts connections on {host}:{port}",
                     f"check the host and port of the base URL, and that the gateway runs on {host}:{port}")
    elif "ssl" in low or "certificate" in low or "tls" in low:
        what, fix = (f"the TLS handshake with {host} failed",
                     "check http:// versus https:// in the base URL; behind a corporate CA set SSL_CERT_FILE"
                     " to its bundle")
    elif isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
        what, fix = (f"{host} closed or reset the connection mid-exchange",
                     "retry; if it persists, the gateway or a load balancer in front of it drops connections:"
                     " report it to its operator")
    elif isinstance(exc, httpx.UnsupportedProtocol):
        what, fix = ("the URL has no http:// or https:// scheme",
                     "give the base URL with its scheme, e.g. https://taotoken.net/api")
    else:
        what, fix = f"the connection to {host} failed", "check the base URL and the network path to the host"
    retries = ex.retry_log.retries if ex.retry_log is not None else 0
    after = f" (after {retries} retr{'y' if retries == 1 else 'ies'})" if retries else ""
    summary = f"{type(exc).__name__} for {ex.where()}: {what}{after}"
    return Diagnosis("connection", ex.mask(summary), ex.mask(f"{fix}. The error was: {text[:200]}"),
                     ex.evidence(host=f"{host}:{port}", error=ex.mask(text)[:300]))


def _from_exception(ex: _Exchange, exc: BaseException) -> Diagnosis | None:
    if isinstance(exc, ExchangeFailed) and isinstance(exc.diagnosis, Diagnosis):
        return exc.diagnosis
    if _is_stream_error(exc) or isinstance(exc, ContractViolation):
        return _from_parse_error(ex, exc)
    if not isinstance(exc, httpx.HTTPError):
        return None
    if isinstance(exc, httpx.DecodingError):
        return _bad_response(ex, f"the body cannot be decoded ({exc})")
    if isinstance(exc, httpx.TooManyRedirects):
        return _base_url(ex, "too many redirects")
    proxy = proxy_in_force(ex.url) if ex.url is not None else None
    connect_phase = isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.ProxyError))
    if proxy is not None and (connect_phase or isinstance(exc, (httpx.ReadError, httpx.RemoteProtocolError))):
        return _proxy(ex, exc, *proxy)
    if isinstance(exc, httpx.ProxyError):
        return _proxy(ex, exc, "the proxy", "(configured on the client)")
    if isinstance(exc, httpx.TimeoutException):
        return _timeout(ex, exc)
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)) and ex.requested_stream():
        return _from_parse_error(ex, exc)
    if isinstance(exc, httpx.TransportError):
        return _connection(ex, exc)
    return None


# --------------------------------------------------------------------------- public API


def diagnose(
    request: httpx.Request | None = None,
    response: httpx.Response | None = None,
    exception: BaseException | None = None,
    settings: Settings | None = None,
    *,
    retry_log: RetryLog | None = None,
    model_ids: Iterable[str] | None = None,
    fetch_models: bool = True,
) -> Diagnosis | None:
    """Name the cause of a failed exchange, or return None when nothing is wrong (or nothing is known).

    Give whatever you have: the response (its request is used), or the request and the exception
    (transport errors, a stream parser's error, a ``ContractViolation``). ``model_ids`` spares the
    ``/v1/models`` fetch that a ``model_not_found`` otherwise makes (never in replay mode).
    """
    if request is None and response is not None:
        try:
            request = response.request
        except RuntimeError:
            request = None
    if retry_log is None and response is not None:
        log = response.extensions.get("taotoken.retry")
        retry_log = log if isinstance(log, RetryLog) else None
    ex = _gather(request, response, settings, retry_log)
    if exception is not None:
        found = _from_exception(ex, exception)
        if found is not None:
            return found
    if response is None:
        return None
    ids = list(model_ids) if model_ids is not None else None
    status = response.status_code
    if status >= 300 or status < 200:
        return _from_status(ex, ids, fetch_models)
    kind = _endpoint(request.url.path) if request is not None else None
    return _check_success(ex, kind) if kind is not None else None


def _fast_ok(response: httpx.Response, kind: str) -> bool:
    """The success path: a JSON reply of the right shape that meets its contract. Anything else takes the slow path."""
    if "json" not in response.headers.get("content-type", ""):
        return False
    try:
        payload = json.loads(response.content)
    except ValueError:
        return False
    if not isinstance(payload, dict) or "error" in payload:
        return False
    if kind == "chat":
        choices = payload.get("choices")
        if not isinstance(choices, list) or not choices:
            return False
        return _validate("chat_completion", payload) is None
    return isinstance(payload.get("data"), list) and _validate("models_list", payload) is None


def check_response(response: httpx.Response, settings: Settings, *, retry_log: RetryLog | None = None) -> None:
    """Raise :class:`ExchangeFailed` with a diagnosis unless ``response`` (already read) is a good reply."""
    status = response.status_code
    if 200 <= status < 300:
        kind = _endpoint(response.request.url.path)
        if kind is None or _fast_ok(response, kind):
            return
    diagnosis = diagnose(response=response, settings=settings, retry_log=retry_log)
    if diagnosis is not None:
        raise diagnosis.as_exception()


def failure_for_exception(
    request: httpx.Request, exc: Exception, settings: Settings, *, retry_log: RetryLog | None = None
) -> ExchangeFailed:
    """The :class:`ExchangeFailed` to raise for a transport error (timeout, refused, reset, proxy)."""
    diagnosis = diagnose(request=request, exception=exc, settings=settings, retry_log=retry_log)
    if diagnosis is None:
        ex = _gather(request, None, settings, retry_log)
        diagnosis = _connection(ex, exc)
    return diagnosis.as_exception()
