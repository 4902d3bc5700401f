"""Base-URL normalisation and joining: tables of what users paste, and Hypothesis properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_taotoken.errors import ConfigError
from pytest_taotoken.urls import client_base_urls, display_url, join, normalize_base_url

ROOT = "https://taotoken.net/api"


@pytest.mark.parametrize(
    ("raw", "root", "codes"),
    [
        ("https://taotoken.net/api", ROOT, set()),
        ("https://taotoken.net/api/", ROOT, set()),
        ("https://taotoken.net/api/v1", ROOT, {"base_url.v1_suffix"}),
        ("https://taotoken.net/api/v1/", ROOT, {"base_url.v1_suffix"}),
        ("https://taotoken.net/api/v1/chat/completions", ROOT, {"base_url.v1_suffix"}),
        ("https://taotoken.net/api/v1/v1", ROOT, {"base_url.v1_suffix"}),
        ("https://taotoken.net/api?utm_source=newsletter&utm_medium=email", ROOT, {"base_url.query"}),
        ("https://taotoken.net/api#quickstart", ROOT, {"base_url.fragment"}),
        ("  https://taotoken.net/api\n", ROOT, {"base_url.whitespace"}),
        ("taotoken.net/api", ROOT, {"base_url.no_scheme"}),
        ("HTTPS://TaoToken.NET:443/api", ROOT, set()),
        ("https://taotoken.net", "https://taotoken.net", {"base_url.no_path"}),
        ("http://127.0.0.1:4000/v1", "http://127.0.0.1:4000", {"base_url.v1_suffix"}),
        ("http://localhost:80/api", "http://localhost/api", set()),
        ("http://gateway.corp/api", "http://gateway.corp/api", {"base_url.insecure_http"}),
        ("https://[::1]:8443/api/", "https://[::1]:8443/api", set()),
        ("https://gw.example/openai//v1//", "https://gw.example/openai", {"base_url.v1_suffix"}),
    ],
)
def test_normalize_table(raw: str, root: str, codes: set[str]) -> None:
    result = normalize_base_url(raw)
    assert result.root == root
    assert {f.code for f in result.findings} == codes
    for finding in result.findings:
        assert finding.fix and finding.message


def test_v1_finding_explains_the_404() -> None:
    (finding,) = normalize_base_url("https://taotoken.net/api/v1").findings
    assert "/v1/v1" in finding.message and "404" in finding.message


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("", "is empty"),
        ("   ", "is empty"),
        ("ftp://taotoken.net/api", "scheme 'ftp'"),
        ("file:///etc/passwd", "scheme 'file'"),
        ("https://", "has no host"),
        ("https://host:99999/api", "cannot be parsed"),
        ("https://[::1/api", "cannot be parsed"),
    ],
)
def test_unusable_values_raise_config_error_with_fix(raw: str, words: str) -> None:
    with pytest.raises(ConfigError, match="Fix:") as info:
        normalize_base_url(raw, source="TAOTOKEN_BASE_URL")
    assert words in str(info.value)
    assert "TAOTOKEN_BASE_URL" in str(info.value)
    assert info.value.field == "base_url"


def test_userinfo_password_is_masked_in_messages() -> None:
    with pytest.raises(ConfigError) as info:
        normalize_base_url("gopher://user:hunter2secret@host/api")
    assert "hunter2secret" not in str(info.value)
    assert display_url("https://user:hunter2secret@host/api") == "https://user:***@host/api"


@pytest.mark.parametrize(
    ("path", "url"),
    [
        ("chat/completions", f"{ROOT}/v1/chat/completions"),
        ("/chat/completions", f"{ROOT}/v1/chat/completions"),
        ("v1/chat/completions", f"{ROOT}/v1/chat/completions"),
        ("/v1/v1/models", f"{ROOT}/v1/models"),
        ("models?x=1#y", f"{ROOT}/v1/models"),
        ("", f"{ROOT}/v1"),
    ],
)
def test_join(path: str, url: str) -> None:
    assert join(ROOT, path) == url
    assert join(ROOT + "/", path) == url


def test_client_base_urls_per_family() -> None:
    table = client_base_urls(ROOT)
    assert table["openai-sdk"] == f"{ROOT}/v1"
    assert table["litellm"] == f"{ROOT}/v1"
    assert table["mini-swe-agent"] == f"{ROOT}/v1"
    assert table["curl"] == ROOT


# --- Hypothesis properties -------------------------------------------------------------------

label = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=12)
hosts = st.builds(lambda parts, tld: ".".join([*parts, tld]), st.lists(label, min_size=1, max_size=3),
                  st.sampled_from(["com", "net", "io", "ai"]))
segment = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=10).filter(
    lambda s: s.lower() not in {"v1", "models", "completions", "embeddings", "responses", "chat"}
)


@st.composite
def roots(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["http", "https"]))
    host = draw(hosts)
    port = draw(st.one_of(st.none(), st.integers(1024, 65535)))
    path = "/".join(draw(st.lists(segment, max_size=3)))
    netloc = host if port is None else f"{host}:{port}"
    return f"{scheme}://{netloc}" + (f"/{path}" if path else "")


@st.composite
def variants(draw: st.DrawFn, root: str) -> str:
    scheme, rest = root.split("://", 1)
    netloc, _, path = rest.partition("/")
    host, _, port = netloc.partition(":")
    if not port and draw(st.booleans()):
        netloc = f"{host}:{443 if scheme == 'https' else 80}"
    if draw(st.booleans()):
        netloc = netloc.upper()
    if draw(st.booleans()):
        scheme = scheme.upper()
    url = f"{scheme}://{netloc}" + (f"/{path}" if path else "")
    url += draw(st.sampled_from(["", "/", "//", "/v1", "/v1/", "/V1", "/v1/chat/completions", "/v1/v1", "/chat/completions",
                                 "/v1/models"]))
    if draw(st.booleans()):
        url += "?utm_source=" + draw(label)
    if draw(st.booleans()):
        url += "#" + draw(label)
    return draw(st.sampled_from(["", " ", "\t", "\n"])) + url + draw(st.sampled_from(["", " ", "\n", "\r\n"]))


@given(st.data())
def test_every_variant_normalises_to_its_root(data: st.DataObject) -> None:
    root = data.draw(roots())
    assert normalize_base_url(root).root == root
    assert normalize_base_url(data.draw(variants(root))).root == root


@given(st.text(max_size=80))
def test_normalisation_is_idempotent_and_only_raises_config_error(raw: str) -> None:
    try:
        once = normalize_base_url(raw).root
    except ConfigError as exc:
        assert "Fix:" in str(exc)
        return
    assert normalize_base_url(once).root == once


paths = st.lists(st.sampled_from(["v1", "V1", "chat", "completions", "models", "", "?q=1", "#f", "x y", "é"]),
                 max_size=6).map("/".join)


@given(roots(), st.one_of(paths, st.text(max_size=40)))
def test_joined_urls_are_clean(root: str, path: str) -> None:
    url = join(root, path)
    after_scheme = url.split("://", 1)[1]
    assert "/v1/v1" not in url.lower()
    assert "//" not in after_scheme
    assert "?" not in url and "#" not in url
