"""Resolve the endpoint settings in one place, and remember where each value came from.

Precedence, first answer wins (as in the README's configuration table):

    CLI flag  >  ini option  >  environment variable(s)  >  --taotoken-config TOML  >  default

An environment variable that is set but empty counts as unset, and is listed in ``empty_env`` so
the report header can say so. The API key is read only from the environment variable named by
``key_env``; no flag or file takes a key.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from .errors import ConfigError
from .findings import Finding
from .keys import clean_key, mask_key, register_secret
from .urls import DEFAULT_BASE_URL, display_url, normalize_base_url

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

Mode = Literal["replay", "record", "live"]
DEFAULT_KEY_ENV = "TAOTOKEN_API_KEY"
FALLBACK_KEY_ENV = "OPENAI_API_KEY"


@dataclass(frozen=True)
class FieldSpec:
    name: str
    cli: str | None
    ini: str | None
    env: tuple[str, ...]
    config: tuple[str, str] | None
    default: Any
    fix: str


FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("base_url", "--taotoken-base-url", "taotoken_base_url",
              ("TAOTOKEN_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_BASE"), ("model", "base_url"),
              DEFAULT_BASE_URL, "set it to the gateway's API root, e.g. https://taotoken.net/api"),
    FieldSpec("key_env", "--taotoken-key-env", "taotoken_key_env", (), ("model", "api_key_env"),
              DEFAULT_KEY_ENV, "give the name of an environment variable, e.g. TAOTOKEN_API_KEY"),
    FieldSpec("sample_model", "--taotoken-sample-model", "taotoken_sample_model",
              ("RL_SAMPLE_MODEL", "OPENAI_MODEL"), ("model", "sample_model"), None, "give a model ID"),
    FieldSpec("eval_model", "--taotoken-eval-model", "taotoken_eval_model", ("RL_EVAL_MODEL",),
              ("model", "eval_model"), None, "give a model ID"),
    FieldSpec("models", "--taotoken-models", "taotoken_models", (), None, None,
              "give model IDs separated by commas, e.g. --taotoken-models qwen-max,deepseek-v3"),
    FieldSpec("timeout", "--taotoken-timeout", "taotoken_timeout", ("TAOTOKEN_TIMEOUT",), None, 120.0,
              "give a positive number of seconds, e.g. 120"),
    FieldSpec("max_retries", "--taotoken-max-retries", "taotoken_max_retries", (), None, 2,
              "give a whole number >= 0, e.g. 2"),
    FieldSpec("samples", "--taotoken-samples", "taotoken_samples", (), ("rollout", "n_samples"), 4,
              "give a whole number >= 1, e.g. 4"),
    FieldSpec("cassette_dir", "--taotoken-cassette-dir", "taotoken_cassette_dir", (), None, "cassettes",
              "give a folder path, e.g. cassettes"),
)
SPECS = {spec.name: spec for spec in FIELDS}


@dataclass(frozen=True)
class Settings:
    """The resolved endpoint settings. ``sources[field]`` says where each value came from."""

    mode: Mode = "replay"
    base_url: str = DEFAULT_BASE_URL
    api_root: str = DEFAULT_BASE_URL
    api_key: str | None = field(default=None, repr=False)
    key_env: str = DEFAULT_KEY_ENV
    sample_model: str | None = None
    eval_model: str | None = None
    models: tuple[str, ...] = ()
    timeout: float = 120.0
    max_retries: int = 2
    samples: int = 4
    cassette_dir: Path = Path("cassettes")
    temperature: float | None = None
    max_tokens: int | None = None
    allow_http: bool = False
    sources: Mapping[str, str] = field(default_factory=dict)
    empty_env: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = ()

    def __repr__(self) -> str:
        return (
            f"Settings(mode={self.mode!r}, api_root={display_url(self.api_root)!r}, key={mask_key(self.api_key)!r}"
            f" ({self.sources.get('api_key', '-')}), models={self.models!r}, timeout={self.timeout})"
        )

    __str__ = __repr__

    @property
    def masked_key(self) -> str:
        return mask_key(self.api_key)

    @property
    def talks_to_endpoint(self) -> bool:
        """True in live and record modes: requests go to the real endpoint."""
        return self.mode in ("live", "record")

    def source(self, name: str) -> str:
        return self.sources.get(name, "default")

    def with_changes(self, **changes: Any) -> Settings:
        return replace(self, **changes)

    def header_lines(self) -> list[str]:
        """The pytest report header: every value with its source, the key masked."""

        def item(name: str, value: Any) -> str:
            return f"{name}={value} ({self.source(name)})"

        key = f"key={self.masked_key} ({self.sources.get('api_key', self.key_env + ' unset')})"
        first = [f"mode={self.mode}", item("base_url", display_url(self.base_url)), key]
        for name in ("sample_model", "eval_model"):
            if getattr(self, name):
                first.append(item(name, getattr(self, name)))
        lines = ["taotoken: " + " ".join(first)]
        rest = [item("models", ",".join(self.models) or "-"), item("timeout", f"{self.timeout:g}"),
                item("max_retries", self.max_retries), item("samples", self.samples),
                item("cassette_dir", self.cassette_dir)]
        lines.append("taotoken: " + " ".join(rest))
        if self.api_root != self.base_url:
            lines.append(f"taotoken: api_root={display_url(self.api_root)}")
        for name in self.empty_env:
            lines.append(f"taotoken: {name} is set but empty; treated as unset")
        for f in self.findings:
            lines.append(f"taotoken: {f.severity}: {f.message}. Fix: {f.fix}")
        return lines


def _read_config(path: str | Path, source: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            data: dict[str, Any] = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(
            f"config file {path} (from {source}) cannot be read: {exc.strerror or exc}."
            f" Fix: check the path given by {source}",
            field="config", source=source,
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"config file {path} (from {source}) is not valid TOML: {exc}. Fix: correct the syntax at that line",
            field="config", source=source,
        ) from None
    return data


def _config_lookup(data: Mapping[str, Any], section: str, key: str) -> Any:
    table = data.get(section)
    return table.get(key) if isinstance(table, Mapping) else None


Provider = Callable[[FieldSpec], "tuple[Any, str] | None"]


class _Resolver:
    def __init__(self, cli: Mapping[str, Any], ini: Mapping[str, Any], env: Mapping[str, str],
                 config: Mapping[str, Any], config_path: str | None) -> None:
        self.cli, self.ini, self.env, self.config, self.config_path = cli, ini, env, config, config_path
        self.empty_env: list[str] = []
        # Ordered providers: the first one that answers wins.
        self.providers: list[Provider] = [self._from_cli, self._from_ini, self._from_env, self._from_config]

    def _from_cli(self, spec: FieldSpec) -> tuple[Any, str] | None:
        value = self.cli.get(spec.name)
        return (value, spec.cli or spec.name) if value not in (None, "") else None

    def _from_ini(self, spec: FieldSpec) -> tuple[Any, str] | None:
        value = self.ini.get(spec.name)
        return (value, f"ini {spec.ini}") if value not in (None, "", []) else None

    def _from_env(self, spec: FieldSpec) -> tuple[Any, str] | None:
        for name in spec.env:
            value = self.env_value(name)
            if value is not None:
                return value, name
        return None

    def _from_config(self, spec: FieldSpec) -> tuple[Any, str] | None:
        if spec.config is None:
            return None
        value = _config_lookup(self.config, *spec.config)
        return (value, f"{self.config_path} [{spec.config[0]}] {spec.config[1]}") if value not in (None, "") else None

    def env_value(self, name: str) -> str | None:
        value = self.env.get(name)
        if value is None:
            return None
        if not value.strip():
            if name not in self.empty_env:
                self.empty_env.append(name)
            return None
        return value

    def resolve(self, spec: FieldSpec) -> tuple[Any, str]:
        for provider in self.providers:
            answer = provider(spec)
            if answer is not None:
                return answer
        return spec.default, "default"


def _url_secrets(url: str) -> list[str]:
    """A password in the URL's userinfo and the values of its query: never to be printed."""
    from urllib.parse import parse_qsl, urlsplit

    try:
        parts = urlsplit(url.strip())
        secrets = [parts.password or ""]
    except ValueError:
        return []
    secrets += [value for _, value in parse_qsl(parts.query)]
    return [s for s in secrets if len(s) >= 8]


def _bad(spec: FieldSpec, value: Any, source: str, why: str) -> ConfigError:
    return ConfigError(f"{spec.name}={value!r} (from {source}) {why}. Fix: {spec.fix}", field=spec.name, source=source)


def _number(spec: FieldSpec, value: Any, source: str, kind: type, minimum: float) -> Any:
    try:
        if isinstance(value, bool):
            raise ValueError
        number = kind(value) if kind is float else int(str(value).strip())
    except (TypeError, ValueError):
        raise _bad(spec, value, source, f"is not a {'number' if kind is float else 'whole number'}") from None
    if kind is float and number != number:  # NaN
        raise _bad(spec, value, source, "is not a number")
    if number < minimum or (kind is float and number == 0):
        raise _bad(spec, value, source, "is too small" if number >= 0 else "is negative")
    return number


def _split_models(value: Any) -> tuple[str, ...]:
    items = value if isinstance(value, (list, tuple)) else str(value).replace("\n", ",").split(",")
    out: list[str] = []
    for item in items:
        for part in str(item).split(",") if isinstance(value, (list, tuple)) else [item]:
            part = part.strip()
            if part and part not in out:
                out.append(part)
    return tuple(out)


def resolve_settings(
    cli: Mapping[str, Any] | None = None,
    ini: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    config_path: str | None = None,
    config_source: str = "--taotoken-config",
    mode: Mode = "replay",
    allow_http: bool = False,
) -> Settings:
    """Resolve every field; raise :class:`ConfigError` naming the field, its source and the fix."""
    import os

    env = dict(os.environ) if env is None else env
    config = _read_config(config_path, config_source) if config_path else {}
    r = _Resolver(cli or {}, ini or {}, env, config, config_path)
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for spec in FIELDS:
        values[spec.name], sources[spec.name] = r.resolve(spec)

    findings: list[Finding] = []
    normalized = normalize_base_url(str(values["base_url"]), source=sources["base_url"])
    findings.extend(normalized.findings)
    register_secret(*_url_secrets(normalized.root), *_url_secrets(str(values["base_url"])))

    key_env = str(values["key_env"]).strip()
    if not key_env or not key_env.replace("_", "").isalnum():
        raise _bad(SPECS["key_env"], key_env, sources["key_env"], "is not an environment variable name")
    candidates = [key_env]
    if sources["key_env"] == "default":
        candidates.append(FALLBACK_KEY_ENV)
    api_key: str | None = None
    for name in candidates:
        raw = r.env_value(name)
        if raw is not None:
            register_secret(raw, raw.strip())
            api_key, key_findings = clean_key(raw, source=name)
            register_secret(api_key)
            findings.extend(key_findings)
            sources["api_key"] = name
            break

    spec = SPECS["timeout"]
    timeout = _number(spec, values["timeout"], sources["timeout"], float, 0)
    max_retries = _number(SPECS["max_retries"], values["max_retries"], sources["max_retries"], int, 0)
    samples = _number(SPECS["samples"], values["samples"], sources["samples"], int, 1)
    cassette_dir = str(values["cassette_dir"]).strip()
    if not cassette_dir:
        raise _bad(SPECS["cassette_dir"], cassette_dir, sources["cassette_dir"], "is empty")

    models = _split_models(values["models"]) if values["models"] else ()
    if not models:
        models = tuple(dict.fromkeys(m for m in (values["sample_model"], values["eval_model"]) if m))
        sources["models"] = "sample_model and eval_model"

    temperature = _config_lookup(config, "rollout", "temperature")
    max_tokens = _config_lookup(config, "rollout", "max_tokens")
    if temperature is not None:
        temperature = _number(FieldSpec("temperature", None, None, (), None, None, "give a number, e.g. 0.8"),
                              temperature, f"{config_path} [rollout] temperature", float, 0) if temperature else 0.0
    if max_tokens is not None:
        max_tokens = _number(FieldSpec("max_tokens", None, None, (), None, None, "give a whole number, e.g. 256"),
                             max_tokens, f"{config_path} [rollout] max_tokens", int, 1)

    return Settings(
        mode=mode,
        base_url=str(values["base_url"]).strip(),
        api_root=normalized.root,
        api_key=api_key,
        key_env=key_env,
        sample_model=str(values["sample_model"]).strip() if values["sample_model"] else None,
        eval_model=str(values["eval_model"]).strip() if values["eval_model"] else None,
        models=models,
        timeout=timeout,
        max_retries=max_retries,
        samples=samples,
        cassette_dir=Path(cassette_dir),
        temperature=temperature,
        max_tokens=max_tokens,
        allow_http=allow_http,
        sources=sources,
        empty_env=tuple(r.empty_env),
        findings=tuple(findings),
    )
