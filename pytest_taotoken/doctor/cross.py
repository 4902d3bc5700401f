"""Checks across values: consistency between sources, a proxy against NO_PROXY, one file's rollout settings.

Consistency compares what should be the same everywhere: the normalised base URL, the key (by
fingerprint, never printed) and the model ID per role. The value held by the fewest sources is
the odd one out (ties: the later source), and the finding sits where that value is written and
names every source with the value it holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

from ..errors import ConfigError
from ..findings import Finding
from ..keys import clean_key, fingerprint, is_placeholder
from ..urls import no_proxy_exempts, normalize_base_url
from .checks import DEFAULT_GATEWAY, LITELLM_CLIENTS, OPENAI_COMPAT_PREFIXES, as_number, expected_url
from .model import ConfigValue, SourceRead, env_reference
from .registry import Context, cross_check


@cross_check("rollout")
def check_rollout(reads: list[SourceRead], ctx: Context) -> Iterator[tuple[ConfigValue, Finding]]:
    """Per RL config: sequential sampling and identical samples."""
    for read in reads:
        by_field = {v.field: v for v in read.values}
        samples = by_field.get("n_samples")
        n = as_number(samples.value, int) if samples else None
        if not samples or n is None or n <= 1:
            continue
        conc = by_field.get("concurrency")
        if conc and as_number(conc.value, int) == 1:
            yield conc, conc.finding(
                "rollout.sequential_sampling", "warning",
                f"n_samples is {n} but {conc.name} is 1, so the {n} samples of a prompt are requested one after"
                f" another and each rollout takes about {n} times as long",
                f"raise {conc.name} to n_samples ({n}) or to what the gateway's rate limit allows")
        temp = by_field.get("temperature")
        if temp and as_number(temp.value, float) == 0:
            yield temp, temp.finding(
                "rollout.identical_samples", "warning",
                f"temperature is 0 with n_samples = {n}: greedy decoding returns the same completion {n} times, so"
                " the extra samples cost tokens and carry no signal (group advantages become 0)",
                "raise temperature (e.g. 0.7-1.0) for sampling, or set n_samples = 1")


# ---------------------------------------------------------------- consistency between sources


def _shared(reads: list[SourceRead], field_name: str) -> list[ConfigValue]:
    return [v for r in reads for v in r.values if v.field == field_name and v.shared]


def _root_of(v: ConfigValue) -> str | None:
    if not isinstance(v.value, str) or not v.value.strip() or (v.expands_env and env_reference(v.value)):
        return None
    try:
        return normalize_base_url(v.value).root
    except ConfigError:
        return None


def _key_of(v: ConfigValue) -> str | None:
    if not isinstance(v.value, str) or not v.literal or env_reference(v.value):
        return None
    key = clean_key(v.value)[0]
    return None if not key or is_placeholder(key) else fingerprint(key)


def _model_of(v: ConfigValue) -> str | None:
    if not isinstance(v.value, str) or not v.value.strip():
        return None
    model = v.value.strip()
    if v.client in LITELLM_CLIENTS:
        for prefix in OPENAI_COMPAT_PREFIXES:
            if model.lower().startswith(prefix):
                return model[len(prefix):]
    return model


def _disagreements(values: list[ConfigValue], key: Callable[[ConfigValue], str | None]
                   ) -> tuple[list[tuple[ConfigValue, str]], str | None, list[ConfigValue]]:
    """The participants with their keys, the majority key (ties: the earliest source) and the odd ones out."""
    keyed = [(v, k) for v in values if (k := key(v)) is not None]
    groups: dict[str, list[int]] = {}
    for index, (_, k) in enumerate(keyed):
        groups.setdefault(k, []).append(index)
    if len(groups) <= 1:
        return keyed, None, []
    reference = max(groups, key=lambda k: (len(groups[k]), -groups[k][0]))
    return keyed, reference, [v for v, k in keyed if k != reference]


def _listing(keyed: list[tuple[ConfigValue, str]], show_fp: bool = False) -> str:
    parts = []
    for v, k in keyed[:10]:
        extra = f" [fingerprint {k[:8]}]" if show_fp else ""
        parts.append(f"{v.where} {v.name} = {v.shown()}{extra}")
    more = f"; and {len(keyed) - 10} more" if len(keyed) > 10 else ""
    return "; ".join(parts) + more


def _gateway_keys(reads: list[SourceRead]) -> list[ConfigValue]:
    """The keys meant for the gateway. ``OPENAI_API_KEY`` is left out when nothing points the OpenAI SDK at a
    gateway (no ``OPENAI_BASE_URL``/``OPENAI_API_BASE``) and ``TAOTOKEN_API_KEY`` is set: then it is OpenAI's own."""
    keys = _shared(reads, "api_key")
    names = {v.name.rsplit(".", 1)[-1] for r in reads for v in r.values if v.shared}
    if names.isdisjoint({"OPENAI_BASE_URL", "OPENAI_API_BASE"}) and "TAOTOKEN_API_KEY" in names:
        keys = [v for v in keys if v.name.rsplit(".", 1)[-1] != "OPENAI_API_KEY"]
    return keys


@cross_check("consistency")
def check_consistency(reads: list[SourceRead], ctx: Context) -> Iterator[tuple[ConfigValue, Finding]]:
    keyed, ref, odd = _disagreements(_shared(reads, "base_url"), _root_of)
    for v in odd:
        yield v, v.finding(
            "consistency.base_url", "error",
            f"the base URL differs between sources ({_listing(keyed)}); {v.where} points at {_root_of(v)},"
            f" the others at {ref}", f"if {ref} is right, set {v.name} in {v.where} to {expected_url(ref or '', v.client)};"
            " otherwise change the other sources to match this one")
    keyed, ref, odd = _disagreements(_gateway_keys(reads), _key_of)
    masks = [v.shown() for v, _ in keyed]
    show_fp = len(set(masks)) < len({k for _, k in keyed})
    for v in odd:
        others = sorted({x.where for x, k in keyed if k == ref})
        yield v, v.finding(
            "consistency.key", "error",
            f"the API key differs between sources ({_listing(keyed, show_fp)}); {v.where} holds a different key than"
            f" {', '.join(others)}", f"put the same key into {v.name} ({v.where}) as the other sources hold,"
            " or update them if this one is the new key")
    for role in ("sample", "eval"):
        values = [v for v in _shared(reads, "model") if v.role == role]
        keyed, ref, odd = _disagreements(values, _model_of)
        for v in odd:
            want = f"openai/{ref}" if v.client in LITELLM_CLIENTS else ref
            yield v, v.finding(
                "consistency.model", "warning",
                f"the {role} model differs between sources ({_listing(keyed)}); {v.where} names {_model_of(v)},"
                f" the others {ref}", f"set {v.name} to {want} if the others are right, or change them to match")


# ---------------------------------------------------------------- proxy against NO_PROXY


@cross_check("no_proxy")
def check_no_proxy(reads: list[SourceRead], ctx: Context) -> Iterator[tuple[ConfigValue, Finding]]:
    gateways: set[tuple[str, str]] = set()
    for v in _shared(reads, "base_url"):
        root = _root_of(v)
        if root:
            parts = urlsplit(root)
            gateways.add((parts.scheme, parts.hostname or ""))
    gateways = gateways or {DEFAULT_GATEWAY}
    entries = [e for r in reads for v in r.values if v.field == "no_proxy" and isinstance(v.value, str)
               for e in v.value.split(",")]
    for r in reads:
        for v in r.values:
            if v.field != "proxy" or not isinstance(v.value, str) or not v.value.strip() or r.template:
                continue
            name = v.name.rsplit(".", 1)[-1].lower()
            schemes = {"http_proxy": {"http"}, "https_proxy": {"https"}}.get(name, {"http", "https"})
            hosts = sorted({h for s, h in gateways if s in schemes and not no_proxy_exempts(h, entries)})
            if not hosts:
                continue
            listed = ",".join(hosts)
            yield v, v.finding(
                "proxy.gateway_not_in_no_proxy", "warning",
                f"{v.name} is set and NO_PROXY does not list {listed}, so requests to the gateway go through the proxy"
                f" {v.shown()}; if the proxy is down or blocks it, they fail with 'local proxy failed' or a timeout",
                f"if the gateway is reachable directly, export NO_PROXY={listed},$NO_PROXY (and no_proxy for tools"
                " that read the lower-case name); otherwise make sure the proxy forwards to it")
