"""Read every place a Base URL, key and model ID are written into :class:`ConfigValue` items.

One reader per kind of source (the environment, ``.env`` files and shell profiles, the RL
framework's TOML, mini-SWE-agent's YAML, Cursor's ``settings.json``, an agent's ``auth.json``, a
profile switcher's ``config.json``, MCP settings). Readers only read: they record each value with
its file, line and the client family that consumes it, and report what they cannot read (a parse
error, a key at the wrong level, a near-miss spelling). Judging the values is :mod:`.checks`' job.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..findings import Finding
from .discovery import display_path, dotenv_template, kind_by_name
from .formats import EnvEntry, Located, ParseFailure, iter_env, parse_json, parse_toml, parse_yaml
from .model import ConfigValue, FieldName, Kind, SourceRead

MAX_FILE_BYTES = 2_000_000

#: Environment variables the doctor reads: field, client family, model role.
ENV_VARS: dict[str, tuple[FieldName, str | None, str | None]] = {
    "TAOTOKEN_API_KEY": ("api_key", "taotoken", None),
    "OPENAI_API_KEY": ("api_key", "openai-sdk", None),
    "TAOTOKEN_BASE_URL": ("base_url", "taotoken", None),
    "OPENAI_BASE_URL": ("base_url", "openai-sdk", None),
    "OPENAI_API_BASE": ("base_url", "litellm", None),
    "RL_SAMPLE_MODEL": ("model", "taotoken", "sample"),
    "RL_EVAL_MODEL": ("model", "taotoken", "eval"),
    "OPENAI_MODEL": ("model", "openai-sdk", "sample"),
    "MSWEA_MODEL_NAME": ("model", "mini-swe-agent", "sample"),
}
PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy")
#: Real variables of the same families that are not near-misses of the ones above.
OTHER_KNOWN_VARS = frozenset({
    "TAOTOKEN_TIMEOUT", "OPENAI_ORG_ID", "OPENAI_ORGANIZATION", "OPENAI_PROJECT_ID", "OPENAI_PROJECT",
    "OPENAI_API_VERSION", "OPENAI_API_TYPE", "OPENAI_LOG", "OPENAI_TIMEOUT", "OPENAI_MAX_RETRIES",
    "OPENAI_WEBHOOK_SECRET", "OPENAI_ADMIN_KEY", "RL_SEED", "MSWEA_CONFIG_DIR", "MSWEA_GLOBAL_CONFIG_DIR",
})
_VAR_PREFIXES = ("OPENAI_", "TAOTOKEN_", "RL_", "MSWEA_")

# ---------------------------------------------------------------- helpers shared by the readers


def _norm_key(key: str) -> str:
    return re.sub(r"[-_.\s]", "", key.lower())


def near_miss(key: str, known: Iterable[str], cutoff: float = 0.85) -> str | None:
    """The known key that ``key`` was probably meant to be, or None."""
    known = list(known)
    if key in known:
        return None
    for candidate in known:
        if _norm_key(candidate) == _norm_key(key):
            return candidate
    match = difflib.get_close_matches(key, known, n=1, cutoff=cutoff)
    return match[0] if match else None


def _spelling(read: SourceRead, key: str, meant: str, where: str, pos: tuple[int, int], why: str) -> None:
    dashed = "-" in key and meant.replace("_", "-") == key
    # same letters (case, - or _ aside): surely meant, and the tool ignores it; otherwise only likely
    sure = dashed or _norm_key(key) == _norm_key(meant)
    read.findings.append(Finding(
        "spelling.dashed_key" if dashed else "spelling.near_miss", "error" if sure else "warning",
        f"unknown key '{key}' in {where}; did you mean '{meant}'? {why}",
        f"rename '{key}' to '{meant}'", source=key, file=read.file, line=pos[0], column=pos[1]))


def _check_keys(read: SourceRead, table: Mapping[str, Any], known: Iterable[str], loc: Located,
                path: tuple[str | int, ...], where: str, why: str = "The tool ignores it.") -> None:
    known = list(known)
    for key in table:
        if isinstance(key, str) and key not in known:
            meant = near_miss(key, known)
            if meant:
                _spelling(read, key, meant, where, loc.pos((*path, key)), why)


def _value(read: SourceRead, field: FieldName, value: Any, name: str, loc: Located | None,
           path: tuple[str | int, ...], **extra: Any) -> None:
    line, column = loc.pos(path) if loc is not None else (None, None)
    read.add(ConfigValue(field, value, name, read.label, read.file, line, column,
                         shared=not read.template and extra.pop("shared", True), **extra))


def _env_value(read: SourceRead, name: str, value: str, line: int | None, column: int | None, *,
               expands_env: bool, literal: bool = True, prefix: str = "") -> bool:
    """Record ``name=value`` if the doctor knows ``name``; return whether it did."""
    label = prefix + name
    shared = not read.template
    if name in ENV_VARS:
        field, client, role = ENV_VARS[name]
        read.add(ConfigValue(field, value, label, read.label, read.file, line, column, client, role,
                             shared=shared, expands_env=expands_env, literal=literal))
        return True
    lower = name.lower()
    if lower in PROXY_VARS or lower == "no_proxy":
        read.add(ConfigValue("no_proxy" if lower == "no_proxy" else "proxy", value, label, read.label, read.file,
                             line, column, shared=shared, expands_env=expands_env, literal=literal))
        return True
    return False


def _env_spelling(read: SourceRead, name: str, line: int | None, column: int | None, prefix: str = "") -> None:
    upper = name.upper()
    if upper in ENV_VARS and upper != name:
        meant: str | None = upper
    elif upper.startswith(_VAR_PREFIXES) and upper not in OTHER_KNOWN_VARS:
        # a typo, not a variable of its own: same letters but for - and _, or one letter off
        meant = next((k for k in ENV_VARS if _norm_key(k) == _norm_key(name)), None)
        if meant is None:
            close = near_miss(name, ENV_VARS, cutoff=0.9)
            meant = close if close and abs(len(close) - len(name)) <= 1 else None
    else:
        meant = None
    if meant:
        read.findings.append(Finding(
            "spelling.env_name", "warning",
            f"the variable {prefix}{name} is not one that tools read; did you mean {meant}?"
            " Variable names are case-sensitive, so the value is silently ignored",
            f"rename {name} to {meant}", source=prefix + name, file=read.file, line=line, column=column))


def _parse_failure(read: SourceRead, what: str, exc: ParseFailure) -> None:
    read.findings.append(Finding(
        f"parse.{what}", "error", f"{read.label} is not valid {what.upper()}: {exc.message}",
        "correct the syntax at that line and column; the values in this file were not checked",
        source=read.label, file=read.file, line=exc.line, column=exc.column))


# ---------------------------------------------------------------- readers


def read_environment(env: Mapping[str, str], extra_key_vars: Iterable[str] = ()) -> SourceRead:
    """The variables of the process environment that the doctor knows (and near-miss names)."""
    read = SourceRead("environment", "environment", None)
    extra = [v for v in dict.fromkeys(extra_key_vars) if v not in ENV_VARS]
    for name in sorted(env):
        value = env[name]
        if not _env_value(read, name, value, None, None, expands_env=False):
            if name in extra:
                read.add(ConfigValue("api_key", value, name, "environment", None, client="taotoken"))
            else:
                _env_spelling(read, name, None, None)
    return read


def _read_env_file(read: SourceRead, text: str, *, strict: bool) -> None:
    for item in iter_env(text, strict=strict):
        if isinstance(item, ParseFailure):
            if strict and "never closed" not in item.message:
                read.findings.append(Finding(
                    "parse.env_line", "warning", f"line {item.line} of {read.label} is not NAME=value: "
                    f"{item.message}; tools skip it", "write it as NAME=value, or comment it out with #",
                    source=read.label, file=read.file, line=item.line, column=item.column))
            else:
                _parse_failure(read, "env", item)
            continue
        entry: EnvEntry = item
        read.defined.setdefault(entry.name, entry.line)
        literal = entry.quote == "'" or not (entry.dynamic or "$" in entry.value)
        expands = entry.quote != "'"
        value = entry.value
        if entry.dynamic:
            continue
        if not _env_value(read, entry.name, value, entry.line, entry.column, expands_env=expands, literal=literal):
            _env_spelling(read, entry.name, entry.line, entry.column)


def _read_toml(read: SourceRead, loc: Located) -> None:
    data = loc.data
    model = data.get("model")
    rollout = data.get("rollout")
    model_keys = ("base_url", "api_key_env", "sample_model", "eval_model", "api_key")
    rollout_keys = ("temperature", "max_tokens", "n_samples", "concurrency", "max_concurrency")
    for key in data:
        if key in model_keys:
            read.findings.append(Finding(
                "spelling.wrong_level", "error", f"'{key}' is at the top level of {read.label}, where it is ignored",
                f"move '{key}' under the [model] table", source=key, file=read.file,
                line=loc.pos((key,))[0], column=loc.pos((key,))[1]))
    _check_keys(read, data, ("model", "rollout", "client"), loc, (), "the TOML's tables",
                "The table is ignored, and so are the values in it.")
    if isinstance(model, Mapping):
        _check_keys(read, model, model_keys, loc, ("model",), "[model]")
        specs: tuple[tuple[str, FieldName, str | None, str | None], ...] = (
            ("base_url", "base_url", "taotoken", None), ("api_key_env", "api_key_env", None, None),
            ("sample_model", "model", "taotoken", "sample"), ("eval_model", "model", "taotoken", "eval"),
            ("api_key", "api_key", "taotoken", None))
        for key, field, client, role in specs:
            if key in model:
                _value(read, field, model[key], f"[model] {key}", loc, ("model", key), client=client, role=role)
    if isinstance(rollout, Mapping):
        _check_keys(read, rollout, rollout_keys, loc, ("rollout",), "[rollout]")
        rollout_fields: dict[str, FieldName] = {"temperature": "temperature", "max_tokens": "max_tokens",
                                                "n_samples": "n_samples", "concurrency": "concurrency",
                                                "max_concurrency": "concurrency"}
        for key, rfield in rollout_fields.items():
            if key in rollout:
                _value(read, rfield, rollout[key], f"[rollout] {key}", loc, ("rollout", key))
    client = data.get("client")
    if isinstance(client, Mapping):
        for key in ("concurrency", "max_concurrency"):
            if key in client:
                _value(read, "concurrency", client[key], f"[client] {key}", loc, ("client", key))


_SWE_MODEL_KEYS = ("model_name", "model_kwargs", "model_class", "cost_tracking", "litellm_model_registry",
                   "set_cache_control", "observation_template", "format_error_template")
_SWE_KWARGS = ("api_base", "base_url", "api_key", "timeout", "temperature", "max_tokens", "top_p",
               "custom_llm_provider", "drop_params", "api_version", "extra_headers", "seed", "stop")


def _read_swe_yaml(read: SourceRead, loc: Located) -> None:
    data = loc.data
    misplaced = {"api_base": "model.model_kwargs.api_base", "base_url": "model.model_kwargs.api_base",
                 "api_key": "model.model_kwargs.api_key", "model_kwargs": "model.model_kwargs",
                 "model_name": "model.model_name", "timeout": "model.model_kwargs.timeout"}
    model = data.get("model")
    for key in data:
        if key in misplaced:
            _misplaced(read, loc, (key,), key, misplaced[key])
    if not isinstance(model, Mapping):
        return
    for key in ("api_base", "base_url", "api_key", "timeout"):
        if key in model:
            _misplaced(read, loc, ("model", key), f"model.{key}", misplaced[key])
    _check_keys(read, model, (*_SWE_MODEL_KEYS, "api_base", "base_url", "api_key", "timeout"), loc, ("model",),
                "the model section")
    if "model_name" in model:
        _value(read, "model", model["model_name"], "model.model_name", loc, ("model", "model_name"),
               client="mini-swe-agent", role="sample")
    kwargs = model.get("model_kwargs")
    if not isinstance(kwargs, Mapping):
        return
    _check_keys(read, kwargs, _SWE_KWARGS, loc, ("model", "model_kwargs"), "model.model_kwargs",
                "LiteLLM does not know it and the request goes out without it.")
    for key in ("api_base", "base_url"):
        if key in kwargs:
            _value(read, "base_url", kwargs[key], f"model.model_kwargs.{key}", loc, ("model", "model_kwargs", key),
                   client="mini-swe-agent", expands_env=True)
    if "api_key" in kwargs:
        _value(read, "api_key", kwargs["api_key"], "model.model_kwargs.api_key", loc,
               ("model", "model_kwargs", "api_key"), client="mini-swe-agent", expands_env=True)
    if "timeout" in kwargs:
        _value(read, "timeout", kwargs["timeout"], "model.model_kwargs.timeout", loc,
               ("model", "model_kwargs", "timeout"), client="mini-swe-agent")


def _misplaced(read: SourceRead, loc: Located, path: tuple[str, ...], written: str, meant: str) -> None:
    line, column = loc.pos(path)
    code = "spelling.api_base_level" if path[-1] in ("api_base", "base_url") else "spelling.wrong_level"
    read.findings.append(Finding(
        code, "error",
        f"'{written}' is at the wrong level of {read.label}; mini-SWE-agent only passes {meant} to LiteLLM,"
        " so this value is silently ignored and requests go to the provider's default endpoint",
        f"move it to {meant} (indent it under model: model_kwargs:)", source=written, file=read.file,
        line=line, column=column))


_CURSOR_KEYS = ("apiKey", "baseUrl", "model")


def _read_cursor(read: SourceRead, loc: Located) -> None:
    data = loc.data
    entries: list[tuple[str, Any, tuple[str, ...]]] = []
    for key, value in data.items():
        if key.startswith("openai.") and key.count(".") == 1:
            entries.append((key.split(".", 1)[1], value, (key,)))
    nested = data.get("openai")
    if isinstance(nested, Mapping):
        entries.extend((k, v, ("openai", k)) for k, v in nested.items() if isinstance(k, str))
    fields: dict[str, tuple[FieldName, str | None]] = {
        "apiKey": ("api_key", "cursor"), "baseUrl": ("base_url", "cursor"), "model": ("model", "cursor")}
    for sub, value, path in entries:
        name = f"openai.{sub}"
        if sub in fields:
            field, client = fields[sub]
            _value(read, field, value, name, loc, path, client=client, role="sample" if field == "model" else None)
            continue
        line, column = loc.pos(path)
        if sub.lower() == "baseurl":
            read.findings.append(Finding(
                "spelling.cursor_baseURL", "error",
                f"'{name}' is not a Cursor setting (the name is case-sensitive); Cursor silently ignores it and"
                " sends requests to api.openai.com, where the gateway key fails",
                f"rename '{name}' to 'openai.baseUrl' (lower-case 'rl')", source=name, file=read.file,
                line=line, column=column))
            continue
        meant = near_miss(sub, _CURSOR_KEYS)
        if meant:
            _spelling(read, name, f"openai.{meant}", read.label, (line, column), "Cursor ignores it.")


_AUTH_KEYS = ("base_url", "api_key", "model", "provider", "timeout", "max_retries")


def _read_auth(read: SourceRead, loc: Located) -> None:
    data = loc.data
    provider = data.get("provider")
    provider_s = provider.lower() if isinstance(provider, str) else ""
    family = "litellm" if provider_s == "litellm" else ("openai-sdk" if provider_s in ("", "openai") else None)
    upper = {k for k in data if isinstance(k, str) and k.upper() == k}
    _check_keys(read, {k: v for k, v in data.items() if k not in upper}, _AUTH_KEYS, loc, (), read.label,
                "The agent ignores it.")
    if "provider" in data:
        _value(read, "provider", provider, "provider", loc, ("provider",))
    if "base_url" in data:
        _value(read, "base_url", data["base_url"], "base_url", loc, ("base_url",), client=family)
    if "api_key" in data:
        _value(read, "api_key", data["api_key"], "api_key", loc, ("api_key",), client=family)
    if "model" in data:
        _value(read, "model", data["model"], "model", loc, ("model",), client=family or "openai-sdk", role="sample")
    for key in ("timeout", "max_retries"):
        if key in data:
            _value(read, key, data[key], key, loc, (key,), client="agent")  # type: ignore[arg-type]
    for key in sorted(upper):
        value = data[key]
        line, column = loc.pos((key,))
        if isinstance(value, str):
            _env_value(read, key, value, line, column, expands_env=False)


_PROFILE_KEYS = ("name", "base_url", "api_key", "model")
_ACTIVE_KEYS = ("current", "active", "active_profile", "current_profile", "selected", "default_profile")


def _read_profiles(read: SourceRead, loc: Located) -> None:
    data = loc.data
    profiles = data.get("profiles")
    items: list[tuple[str | int, Any]]
    if isinstance(profiles, list):
        items = list(enumerate(profiles))
    elif isinstance(profiles, Mapping):
        items = list(profiles.items())
    else:
        return
    active = next((data[k] for k in _ACTIVE_KEYS if isinstance(data.get(k), str)), None)
    for index, profile in items:
        if not isinstance(profile, Mapping):
            continue
        pname = profile.get("name") if isinstance(profile.get("name"), str) else (index if isinstance(index, str) else None)
        selected = (active is None and len(items) == 1) or (active is not None and pname == active)
        label = f"profiles[{index!r}]" if isinstance(index, str) else f"profiles[{index}]"
        if pname is not None and not isinstance(index, str):
            label += f" ({pname})"
        _check_keys(read, profile, _PROFILE_KEYS, loc, ("profiles", index), label, "The switcher ignores it.")
        for key, field in (("base_url", "base_url"), ("api_key", "api_key"), ("model", "model")):
            if key in profile:
                _value(read, field, profile[key], f"{label}.{key}", loc, ("profiles", index, key),  # type: ignore[arg-type]
                       shared=selected, role="sample" if key == "model" else None)


def _read_mcp(read: SourceRead, loc: Located) -> None:
    data = loc.data
    for top in ("mcpServers", "servers"):
        servers = data.get(top)
        if not isinstance(servers, Mapping):
            continue
        for sname, server in servers.items():
            env = server.get("env") if isinstance(server, Mapping) else None
            if not isinstance(env, Mapping):
                continue
            prefix = f"{top}.{sname}.env."
            for name, value in env.items():
                if not isinstance(name, str):
                    continue
                line, column = loc.pos((top, sname, "env", name))
                if not isinstance(value, str):
                    value = str(value)
                if not _env_value(read, name, value, line, column, expands_env=True, prefix=prefix):
                    _env_spelling(read, name, line, column, prefix=prefix)


def sniff_json_kind(data: Any) -> Kind:
    """The kind of a JSON file with an unknown name, from its content."""
    if not isinstance(data, Mapping):
        return "unknown"
    if isinstance(data.get("mcpServers"), Mapping):
        return "mcp_json"
    if "profiles" in data:
        return "profiles_json"
    if any(isinstance(k, str) and k.startswith("openai.") for k in data) or isinstance(data.get("openai"), Mapping):
        return "cursor_settings"
    if any(k in data for k in ("base_url", "api_key", "OPENAI_API_KEY")):
        return "auth_json"
    return "unknown"


def _decode(read: SourceRead, raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line = before.count(b"\n") + 1
        column = exc.start - (before.rfind(b"\n") + 1) + 1
        read.findings.append(Finding(
            "parse.encoding", "error", f"{read.label} is not UTF-8 text (byte 0x{raw[exc.start]:02x})",
            "save the file as UTF-8; the values in this file were not checked", source=read.label,
            file=read.file, line=line, column=column))
        return None


_JSON_READERS = {"cursor_settings": _read_cursor, "auth_json": _read_auth, "profiles_json": _read_profiles,
                 "mcp_json": _read_mcp}


def read_file(path: Path, root: Path, *, label: str | None = None) -> SourceRead:
    """Read one file of any known kind. Never raises for bad content: problems become findings."""
    label = label or display_path(path, root)
    kind = kind_by_name(path)
    read = SourceRead(label, kind or "unknown", label, template=dotenv_template(path.name),
                      path=str(path.resolve()))
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            read.findings.append(Finding(
                "file.too_large", "warning", f"{label} is {size} bytes; the doctor reads config files up to "
                f"{MAX_FILE_BYTES} bytes", "pass the config files themselves, not data files", source=label,
                file=label))
            return read
        raw = path.read_bytes()
    except OSError as exc:
        read.findings.append(Finding(
            "file.unreadable", "error", f"{label} cannot be read: {exc.strerror or exc}",
            "check the path and its permissions", source=label, file=label))
        return read
    text = _decode(read, raw)
    if text is None:
        return read
    _read_text(read, path, text, kind)
    return read


def _read_text(read: SourceRead, path: Path, text: str, kind: Kind | None) -> None:
    if kind is None and path.suffix == ".json":
        try:
            kind = sniff_json_kind(parse_json(text, jsonc=True).data)
        except ParseFailure:
            kind = "auth_json"
        read.kind = kind
    if kind is None or kind == "unknown":
        if re.search(r"^\s*(export\s+)?[A-Za-z_][A-Za-z0-9_]*=", text, re.M):
            read.kind = kind = "shell"
        else:
            read.kind = "unknown"
            read.findings.append(Finding(
                "file.unknown_kind", "warning",
                f"{read.label} is not a kind of file the doctor knows, so nothing in it was checked",
                "pass .env files, shell profiles, the RL TOML, mini-SWE-agent YAML, Cursor settings.json,"
                " auth.json, a profile switcher's config.json or MCP settings", source=read.label, file=read.file))
            return
    if kind in ("dotenv", "shell"):
        _read_env_file(read, text, strict=kind == "dotenv")
        return
    fmt = {"rl_toml": "toml", "swe_yaml": "yaml"}.get(kind, "json")
    try:
        loc = (parse_toml(text) if fmt == "toml" else parse_yaml(text) if fmt == "yaml"
               else parse_json(text, jsonc=kind in ("cursor_settings", "mcp_json")))
    except ParseFailure as exc:
        _parse_failure(read, fmt, exc)
        return
    if not isinstance(loc.data, Mapping):
        read.findings.append(Finding(
            f"parse.{fmt}", "error",
            f"{read.label} holds a {type(loc.data).__name__}, not a table of settings",
            "the file's top level must be a mapping of setting names to values", source=read.label,
            file=read.file, line=1, column=1))
        return
    if kind == "rl_toml":
        _read_toml(read, loc)
    elif kind == "swe_yaml":
        _read_swe_yaml(read, loc)
    else:
        _JSON_READERS[kind](read, loc)
        if kind != "mcp_json" and isinstance(loc.data.get("mcpServers"), Mapping):
            _read_mcp(read, loc)

