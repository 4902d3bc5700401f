"""The checks of single values: base URL, key, key variable, model ID, proxy, numbers.

Each is a small function registered with :func:`.registry.value_check` for the fields it judges.
The checks that compare values across sources live in :mod:`.cross`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, Literal
from urllib.parse import urlsplit

from ..errors import ConfigError
from ..findings import Finding
from ..keys import clean_key, is_placeholder, mask_key
from ..urls import CLIENT_FAMILIES, client_base_urls, is_loopback, normalize_base_url
from .model import ConfigValue, SourceRead, env_reference
from .registry import Context, value_check

Severity = Literal["error", "warning"]

AGENT_MIN_TIMEOUT_S = 120
LITELLM_CLIENTS = frozenset({"mini-swe-agent", "litellm"})
PLAIN_CLIENTS = frozenset({"taotoken", "openai-sdk", "openai-node", "cursor"})
#: LiteLLM provider prefixes that talk the OpenAI protocol to the given api_base.
OPENAI_COMPAT_PREFIXES = ("openai/", "hosted_vllm/", "litellm_proxy/", "text-completion-openai/")
CLIENT_TITLES = {
    "openai-sdk": "the OpenAI SDK", "openai-node": "the OpenAI Node SDK", "litellm": "LiteLLM",
    "mini-swe-agent": "mini-SWE-agent (LiteLLM underneath)", "cursor": "Cursor", "curl": "curl",
    "taotoken": "pytest-taotoken", "agent": "the agent",
}
DEFAULT_GATEWAY = ("https", "taotoken.net")


def _at(finding: Finding, value: ConfigValue, severity: Severity | None = None) -> Finding:
    """A finding from a library function (urls, keys), moved to where the value is written."""
    return replace(finding, severity=severity or finding.severity, source=value.source, file=value.file,
                   line=value.line, column=value.column)


def _is_empty(value: ConfigValue) -> bool:
    return isinstance(value.value, str) and not value.value.strip()


# ---------------------------------------------------------------- base URL


def _client_kind(client: str | None) -> str | None:
    return CLIENT_FAMILIES[client][0] if client in CLIENT_FAMILIES else None


@value_check("base_url", "base_url")
def check_base_url(v: ConfigValue, read: SourceRead, ctx: Context) -> Iterator[Finding]:
    raw = v.value
    if not isinstance(raw, str):
        yield v.finding("base_url.not_string", "error", f"{v.name} holds a {type(raw).__name__}, not a URL",
                        'write it as a quoted string, e.g. "https://taotoken.net/api"')
        return
    if _is_empty(v):
        yield v.finding("base_url.empty", "error", f"{v.name} is empty, so the tool has no endpoint",
                        f"set {v.name} to the gateway's URL, e.g. {expected_url('https://taotoken.net/api', v.client)}")
        return
    if env_reference(raw) and v.expands_env:
        return
    try:
        normalized = normalize_base_url(raw, source=v.source)
    except ConfigError as exc:
        message, _, fix = str(exc).partition(". Fix: ")
        yield v.finding("base_url.invalid", "error", message, fix or "write a full http(s) URL")
        return
    kind = _client_kind(v.client)
    as_written = v.client not in (None, "taotoken")  # the tool uses the text as it is, without normalising
    for f in normalized.findings:
        if kind == "v1" and f.code == "base_url.v1_suffix":
            continue
        if f.code == "base_url.no_path" and not _homepage_suspect(raw, normalized.host):
            continue
        severe = as_written and f.code in ("base_url.query", "base_url.fragment", "base_url.whitespace")
        yield _at(f, v, "error" if severe else None)
    if kind == "v1":
        yield from _client_fit(v, raw, normalized.root)


def _homepage_suspect(raw: str, host: str) -> bool:
    """A root without a path is normal for local servers (vLLM, LiteLLM, Ollama) and for ``https://api.x.com/v1``;
    it is a pasted homepage when nothing but the host was written, or when the host is TaoToken's (root ``/api``)."""
    if is_loopback(host):
        return False
    written_path = re.sub(r"^[A-Za-z][A-Za-z0-9+.\-]*://", "", raw.strip()).partition("/")[2]
    return not re.split(r"[?#]", written_path)[0].strip("/") or host == DEFAULT_GATEWAY[1]


def expected_url(root: str, client: str | None) -> str:
    return client_base_urls(root)[client] if client in CLIENT_FAMILIES else root


def _client_fit(v: ConfigValue, raw: str, root: str) -> Iterator[Finding]:
    """v1-style clients append only ``/chat/completions``: their base URL must end in exactly ``/v1``."""
    text = raw.strip()
    if "://" not in text:
        text = "https://" + text.lstrip("/")
    try:
        path = re.sub(r"/{2,}", "/", urlsplit(text).path).rstrip("/")
    except ValueError:
        return
    root_path = urlsplit(root).path
    tail = path[len(root_path):] if path.lower().startswith(root_path.lower()) else path
    if tail.lower() == "/v1":
        return
    title = CLIENT_TITLES.get(v.client or "", "this client")
    expected = expected_url(root, v.client)
    shown = v.shown().split("?", 1)[0].split("#", 1)[0].rstrip("/")  # where the client's path really goes
    if not tail:
        yield v.finding(
            "base_url.client_needs_v1", "error",
            f"{title} appends only /chat/completions to {v.name}, so {shown} leads to {shown}/chat/completions,"
            " which an OpenAI-compatible gateway does not serve (404); this client needs the URL ending in /v1",
            f"set {v.name} to {expected}")
    else:
        yield v.finding(
            "base_url.client_endpoint_suffix", "error",
            f"{v.name} ends in '{tail}', but {title} appends /chat/completions itself, so requests go to"
            f" '...{tail}/chat/completions' (404)", f"set {v.name} to {expected}")


# ---------------------------------------------------------------- key

_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _looks_like_key(text: str) -> bool:
    return text.startswith(("sk-", "sk_")) or (len(text) >= 24 and not re.fullmatch(r"[A-Z0-9_]+", text))


def _load_hint(ctx: Context, name: str) -> str:
    where = ctx.defined_in_files.get(name)
    return (f"; {where} sets it, but that file is not loaded into this environment"
            " (load it with `set -a; . ./.env; set +a`, or export the variable)" if where else "")


@value_check("api_key", "api_key")
def check_api_key(v: ConfigValue, read: SourceRead, ctx: Context) -> Iterator[Finding]:
    raw = v.value
    if not isinstance(raw, str):
        yield v.finding("key.not_string", "error", f"{v.name} holds a {type(raw).__name__}, not a key",
                        "write the key as a quoted string, or better, read it from an environment variable")
        return
    if _is_empty(v):
        yield v.finding("key.empty", "error", f"{v.name} is empty; requests would be answered with 401",
                        f"set the key in the environment (export TAOTOKEN_API_KEY=...) and point {v.name} at it")
        return
    ref = env_reference(raw)
    if ref and v.expands_env:
        if not ctx.env_set(ref):
            yield v.finding("key.env_unset", "error",
                            f"{v.name} refers to ${ref}, which is not set (or empty) in the environment{_load_hint(ctx, ref)}",
                            f"export {ref}=<your key> in the shell that starts the tool")
        return
    if ref:
        title = CLIENT_TITLES.get(v.client or "", "this tool")
        yield v.finding("key.unexpanded_reference", "error",
                        f"{v.name} holds the text '{raw.strip()[:60]}', but {title} does not expand variables in this"
                        " file, so that text itself is sent as the key (401)",
                        f"write the key itself into a file that git ignores, or set {ref} where the tool reads it")
        return
    if not v.literal:
        return  # an expression the shell expands; the variables it names are checked where they are set
    key, cleaning = clean_key(raw, source=v.name)
    for f in cleaning:
        if v.file and f.code == "key.whitespace":  # the library's fix is an `export` line, for variables
            f = replace(f, fix=f"remove the whitespace or newline around the key in {v.name} ({v.where})")
        yield _at(f, v, "warning" if read.template else "error")
    if is_placeholder(key):
        if not read.template:
            yield v.finding("key.placeholder", "error",
                            f"{v.name} holds a placeholder ({mask_key(key)}), not a real key; requests would be answered"
                            " with 401", f"put your real key from the gateway's console into {v.name}"
                            + (" (or, better, into .env, and read it from the environment)" if v.file else ""))
        return
    yield from _literal_in_git(v, read, ctx)


def _literal_in_git(v: ConfigValue, read: SourceRead, ctx: Context) -> Iterator[Finding]:
    if not read.path:
        return
    state = ctx.git_state(read.path)
    if state not in ("tracked", "unignored"):
        return
    name = read.file or read.label
    why = ("which git tracks, so everyone with the repository (and its history) has the key" if state == "tracked"
           else "which git does not ignore, so the next `git add .` commits the key")
    if read.kind in ("dotenv", "shell") and not read.template:
        fix = (f"add {name.rsplit('/', 1)[-1]} to .gitignore" + (f" and run `git rm --cached {name}`" if state == "tracked"
                                                                 else "")
               + ("; rotate the key, it is in the history" if state == "tracked" else ""))
    else:
        fix = ("move the key to .env, add .env to .gitignore and read the key from the environment"
               " (api_key_env = \"TAOTOKEN_API_KEY\" or ${TAOTOKEN_API_KEY})"
               + ("; rotate the key, it is in the history" if state == "tracked" else ""))
    yield v.finding("key.literal_in_git", "error", f"a literal key ({v.shown()}) is written in {name}, {why}", fix)


@value_check("api_key_env", "api_key_env")
def check_api_key_env(v: ConfigValue, read: SourceRead, ctx: Context) -> Iterator[Finding]:
    raw = v.value
    name = raw.strip() if isinstance(raw, str) else ""
    if name and _looks_like_key(name):
        yield v.finding("key.env_name_is_key", "error",
                        f"{v.name} must name an environment variable, but it holds what looks like a key ({mask_key(name)})",
                        f"export TAOTOKEN_API_KEY=<the key> and set {v.name} = \"TAOTOKEN_API_KEY\";"
                        " rotate the key if this file was ever shared")
        return
    if not _ENV_NAME_RE.match(name):
        yield v.finding("key.env_name_invalid", "error", f"{v.name} is {str(raw)[:60]!r}, not an environment variable name",
                        f"set {v.name} to a variable name such as \"TAOTOKEN_API_KEY\"")
        return
    if not ctx.env_set(name):
        yield v.finding("key.env_unset", "error",
                        f"{v.name} names {name}, which is not set (or empty) in the environment{_load_hint(ctx, name)};"
                        " the key would be missing", f"export {name}=<your key> (or point {v.name} at the variable"
                        " that holds the key)")


# ---------------------------------------------------------------- model

_WEIGHTS_SUFFIXES = (".gguf", ".safetensors", ".bin", ".pt", ".pth", ".onnx", ".ggml")


def _looks_like_path(model: str) -> bool:
    return (model.startswith(("/", "~", "./", "../", ".\\", "file:")) or bool(re.match(r"^[A-Za-z]:[\\/]", model))
            or "\\" in model or model.lower().endswith(_WEIGHTS_SUFFIXES))


@value_check("model", "model")
def check_model(v: ConfigValue, read: SourceRead, ctx: Context) -> Iterator[Finding]:
    raw = v.value
    if not isinstance(raw, str):
        yield v.finding("model.not_string", "error", f"{v.name} holds a {type(raw).__name__}, not a model ID",
                        'write the model ID as a quoted string, e.g. "qwen-max"')
        return
    if _is_empty(v):
        yield v.finding("model.empty", "error", f"{v.name} is empty; the gateway would answer 400 or 404",
                        f"set {v.name} to a model ID the gateway lists at /v1/models")
        return
    model = raw.strip()
    if model != raw:
        yield v.finding("model.whitespace", "warning", f"{v.name} has surrounding whitespace; some tools send it as"
                        f" part of the ID ('{raw[:60]}') and get 404", f"write {v.name} as '{model}'")
    bare = model
    if v.client in LITELLM_CLIENTS:
        prefix = model.split("/", 1)[0] + "/" if "/" in model else ""
        has_base = any(x.field == "base_url" for x in read.values)
        if not prefix:
            yield v.finding(
                "model.missing_openai_prefix", "error",
                f"{v.name} is '{model}' without a provider prefix; LiteLLM picks the provider from the prefix, and"
                " an OpenAI-compatible gateway needs 'openai/' ('LLM Provider NOT provided' otherwise)",
                f"set {v.name} to openai/{model}")
        elif prefix.lower() in OPENAI_COMPAT_PREFIXES:
            bare = model[len(prefix):]
        elif has_base:
            yield v.finding(
                "model.missing_openai_prefix", "error",
                f"{v.name} is '{model}': LiteLLM reads '{prefix}' as its provider, so it does not send the request"
                " to the OpenAI-compatible gateway at api_base the way the gateway expects",
                f"set {v.name} to openai/{model}")
    elif v.client in PLAIN_CLIENTS and model.lower().startswith("openai/"):
        title = CLIENT_TITLES.get(v.client or "", "this client")
        yield v.finding(
            "model.unexpected_openai_prefix", "warning",
            f"{v.name} is '{model}'; {title} sends the ID as written, so the gateway is asked for a model named"
            f" '{model}' ('openai/' is LiteLLM's routing prefix, not part of the ID)",
            f"set {v.name} to {model[7:]}, unless the gateway itself lists '{model}' (as OpenRouter does)")
    if _looks_like_path(bare):
        yield v.finding(
            "model.local_path", "warning",
            f"{v.name} '{model[:80]}' looks like a local path; a hosted gateway does not know it, and vLLM serves a"
            " path as the model ID only when started without --served-model-name",
            "use an ID the gateway lists at GET <api root>/v1/models (start vLLM with --served-model-name <id>)")


# ---------------------------------------------------------------- proxy

_PROXY_PORTS = {"http": 80, "https": 443, "socks4": 1080, "socks4a": 1080, "socks5": 1080, "socks5h": 1080}


def _proxy_address(raw: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of a proxy URL; :class:`ValueError` if it has none."""
    text = raw.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    host = parts.hostname
    if not host:
        raise ValueError("no host")
    scheme = parts.scheme.lower()
    return scheme, host, parts.port or _PROXY_PORTS.get(scheme, 80)


@value_check("proxy", "proxy")
def check_proxy(v: ConfigValue, read: SourceRead, ctx: Context) -> Iterator[Finding]:
    raw = v.value
    if not isinstance(raw, str) or not raw.strip() or not v.literal:
        return
    try:
        _, host, port = _proxy_address(raw)
    except ValueError:
        yield v.finding("proxy.invalid", "error", f"{v.name} is not a proxy URL ('{v.shown()[:60]}')",
                        f"write it as http://host:port, or remove {v.name}")
        return
    if not is_loopback(host):
        return
    if ctx.probe(host, port) is False:
        where = f"remove the line from {v.file}" if v.file else f"`unset {v.name}`"
        yield v.finding(
            "proxy.dead_local", "error",
            f"{v.name} points to the local proxy {host}:{port}, but nothing listens there; every request through it"
            " fails ('local proxy failed', 'Connection refused', ProxyError)",
            f"start the proxy on port {port}, or {where} (check its upper/lower-case twin too)")


# ---------------------------------------------------------------- numbers

NumberSpec = tuple[type, float, str]
_NUMBER_SPECS: dict[str, NumberSpec] = {
    "timeout": (float, 0.0, "a positive number of seconds, e.g. 300"),
    "temperature": (float, 0.0, "a number >= 0, e.g. 0.8"),
    "n_samples": (int, 1, "a whole number >= 1, e.g. 4"),
    "max_tokens": (int, 1, "a whole number >= 1, e.g. 1024"),
    "concurrency": (int, 1, "a whole number >= 1, e.g. 8"),
    "max_retries": (int, 0, "a whole number >= 0, e.g. 2"),
}


def as_number(value: Any, kind: type) -> float | int | None:
    """The number ``value`` holds (numeric strings too), or None; booleans and NaN are not numbers."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value) if isinstance(value, (int, float, str)) else None
    except ValueError:
        return None
    if number is None or number != number or number in (float("inf"), float("-inf")):
        return None
    if kind is int:
        return int(number) if number.is_integer() else None
    return number


@value_check("numbers", *_NUMBER_SPECS)
def check_number(v: ConfigValue, read: SourceRead, ctx: Context) -> Iterator[Finding]:
    kind, minimum, want = _NUMBER_SPECS[v.field]
    number = as_number(v.value, kind)
    if number is None or number < minimum or (v.field == "timeout" and number == 0):
        yield v.finding("rollout.invalid_value", "error", f"{v.name} is {str(v.value)[:40]!r}, not {want}",
                        f"set {v.name} to {want}")
        return
    if v.field == "timeout" and v.client in ("mini-swe-agent", "agent") and number < AGENT_MIN_TIMEOUT_S:
        yield v.finding(
            "rollout.timeout_low", "warning",
            f"{v.name} is {number:g} s; an agent's long generations (reasoning, large patches) often take longer, and a"
            " timed-out request is retried from scratch or ends the episode",
            f"set {v.name} to at least {AGENT_MIN_TIMEOUT_S} (e.g. 300)")
