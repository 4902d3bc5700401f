"""Hardening: the security of the suite's own traffic.

- The key goes to the configured host only: the plugin's clients do not follow redirects, and when a
  caller asks them to, a redirect to another host drops the Authorization header (proved with a
  redirecting server on 127.0.0.1 and gateways on 127.0.0.2 and ``localhost``).
- ``http://`` to a non-loopback host is refused unless ``--taotoken-allow-http`` is given (pytester).
- ``auth.rejected`` sends a wrong key that is random per live run, derived from the check id when
  recording (so a recording replays), and never the real key with a character changed.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from pytest_taotoken.client import build_client
from pytest_taotoken.errors import ConfigError, ExchangeFailed
from pytest_taotoken.settings import Settings, resolve_settings
from pytest_taotoken.testing import FakeGateway
from pytest_taotoken.urls import is_loopback

KEY = "sk-test-fake-0000000000005ec5"
BODY = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
ENV_VARS = ("TAOTOKEN_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_BASE", "OPENAI_API_KEY", "RL_SAMPLE_MODEL",
            "RL_EVAL_MODEL", "OPENAI_MODEL", "GITHUB_STEP_SUMMARY", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
            "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TAOTOKEN_API_KEY", KEY)


def settings_for(base_url: str, **cli: Any) -> Settings:
    return resolve_settings({"base_url": base_url, "timeout": 5, "max_retries": 0, **cli}, {},
                            {"TAOTOKEN_API_KEY": KEY}, mode="live")


# --------------------------------------------------------------------------- redirects


class Redirector:
    """127.0.0.1: answers the chat route with a 307 to ``location``; ``/final`` answers 200 (same origin)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.seen: list[tuple[str, str | None]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.seen.append((self.path, self.headers.get("Authorization")))
                if self.path.endswith("/final"):
                    data = json.dumps({"ok": True}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(307)
                self.send_header("Location", outer.location)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/api"

    def __enter__(self) -> Redirector:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _can_bind(host: str) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, 0))
        except OSError:
            return False
    return True


OTHER_HOSTS = [h for h in ("127.0.0.2", "localhost") if _can_bind("127.0.0.2") or h == "localhost"]


@pytest.fixture(params=OTHER_HOSTS)
def other_host(request: pytest.FixtureRequest) -> Iterator[tuple[FakeGateway, str]]:
    """A gateway on another host name: 127.0.0.2, or ``localhost`` (a different host for httpx than 127.0.0.1)."""
    bind = "127.0.0.2" if request.param == "127.0.0.2" else "127.0.0.1"
    with FakeGateway(host=bind) as gw:
        yield gw, f"http://{request.param}:{gw.port}/api/v1/chat/completions"


def test_the_plugin_does_not_follow_a_redirect_so_the_key_stays_home(other_host: tuple[FakeGateway, str]) -> None:
    gw, target = other_host
    with Redirector(target) as redirector, build_client(settings_for(redirector.base_url)) as client, \
            pytest.raises(ExchangeFailed) as info:
        client.post("v1/chat/completions", json=BODY)
    assert gw.requests == []  # the other host never saw a request, let alone the key
    assert redirector.seen == [("/api/v1/chat/completions", f"Bearer {KEY}")]
    assert info.value.diagnosis.category == "base_url", str(info.value)
    assert KEY not in str(info.value)


def test_a_followed_redirect_to_another_host_drops_the_authorization(other_host: tuple[FakeGateway, str]) -> None:
    gw, target = other_host
    with Redirector(target) as redirector, build_client(settings_for(redirector.base_url)) as client:
        with pytest.raises(ExchangeFailed):  # the other host answers 401: it got no key
            client.post("v1/chat/completions", json=BODY, follow_redirects=True)
        assert len(gw.requests) == 1
        assert gw.requests[0].header("authorization") is None
        assert all(KEY not in value for _, value in gw.requests[0].headers)
        # Control: a redirect within the same origin keeps the header, so the test above can see it.
        redirector.location = "/api/final"
        response = client.post("v1/chat/completions", json=BODY, follow_redirects=True)
    assert response.status_code == 200
    assert redirector.seen[-1] == ("/api/final", f"Bearer {KEY}")


# --------------------------------------------------------------------------- http:// to a remote host


@pytest.mark.parametrize(("host", "loopback"), [
    ("localhost", True), ("LOCALHOST", True), ("api.localhost", True), ("127.0.0.1", True), ("127.9.9.9", True),
    ("[::1]", True), ("::1", True), ("localhost.evil.example", False), ("127.0.0.1.nip.io", False),
    ("0.0.0.0", False), ("10.0.0.1", False), ("192.168.1.1", False), ("evil.example", False), ("", False),
])
def test_only_real_loopback_names_count_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize("base_url", [
    "http://gateway.example/api", "http://127.0.0.1@gateway.example/api", "http://localhost.gateway.example/api",
    "http://10.0.0.7:4000", "http://0.0.0.0:4000",
])
def test_http_to_a_non_loopback_host_is_refused_before_anything_is_sent(base_url: str) -> None:
    with pytest.raises(ConfigError, match="--taotoken-allow-http") as info:
        build_client(settings_for(base_url))
    assert "travel in clear" in str(info.value) and KEY not in str(info.value)
    with build_client(settings_for(base_url).with_changes(allow_http=True)) as client:
        assert str(client.base_url).startswith("http://")


INNER = '''
import pytest

@pytest.mark.taotoken_live
def test_talks(client):
    client.post("v1/chat/completions", json={"model": "fake-model", "messages": []})
'''


def test_http_refusal_and_allow_http_as_a_user_runs_it(pytester: pytest.Pytester,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the flag the test errors with the fix and nothing leaves; with it, the request goes out."""
    pytester.makepyfile(test_inner=INNER)
    with FakeGateway() as proxy:  # plain-http requests go through HTTP_PROXY: the proxy sees what would be sent
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        refused = pytester.runpytest("--taotoken-live", "--taotoken-base-url=http://gateway.example/api",
                                     "-p", "no:cacheprovider")
        assert proxy.requests == []
        allowed = pytester.runpytest("--taotoken-live", "--taotoken-base-url=http://gateway.example/api",
                                     "--taotoken-allow-http", "-p", "no:cacheprovider")
        sent = proxy.requests
    # Refused at start-up, before any test runs: one UsageError line with the fix.
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["ERROR: taotoken: *uses http:// for a non-loopback host: the key would travel in clear*"
                                  "pass --taotoken-allow-http*"])
    assert KEY not in refused.stdout.str() + refused.stderr.str()
    assert len(sent) == 1 and sent[0].path == "http://gateway.example/api/v1/chat/completions"
    assert sent[0].header("authorization") == f"Bearer {KEY}"
    allowed.assert_outcomes(failed=1)  # the proxy's 404 for an absolute URL: what matters is that it was sent


# --------------------------------------------------------------------------- auth.rejected's wrong key


def _wrong_keys(pytester: pytest.Pytester, mode: str, key: str, folder: str) -> list[str]:
    with FakeGateway(api_key=key) as gw:
        result = pytester.runpytest("--taotoken-suite", f"--taotoken-{mode}", f"--taotoken-base-url={gw.base_url}",
                                    "--taotoken-models=fake-model", f"--taotoken-cassette-dir={folder}",
                                    "-k", "auth.rejected", "-p", "no:cacheprovider")
        result.assert_outcomes(passed=1)
        sent = [r.header("authorization") or "" for r in gw.requests]
    wrong = [value.removeprefix("Bearer ") for value in sent if value != f"Bearer {key}"]
    assert len(wrong) == 1, sent
    return wrong


def _shares_a_piece(a: str, b: str, size: int = 8) -> bool:
    return any(a[i:i + size] in b for i in range(len(a) - size + 1))


def test_the_wrong_key_is_random_live_derived_when_recording_and_never_the_real_one(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    real_a, real_b = "Zq7KeyAlpha-Mx93LpQr2Vb8Nc4Td6Wf1Hj5Ks0", "Zq7KeyBravo-Gy28RtUe7Io3Pa9Sd1Fg6Hk4Lz5"
    monkeypatch.setenv("TAOTOKEN_API_KEY", real_a)
    live_1 = _wrong_keys(pytester, "live", real_a, "c1")[0]
    live_2 = _wrong_keys(pytester, "live", real_a, "c2")[0]
    record_1 = _wrong_keys(pytester, "record", real_a, "c3")[0]
    monkeypatch.setenv("TAOTOKEN_API_KEY", real_b)
    record_2 = _wrong_keys(pytester, "record", real_b, "c4")[0]
    assert live_1 != live_2  # random per live run
    assert record_1 == record_2  # derived from the check id (and model), not from the key: a recording replays
    for wrong in (live_1, live_2, record_1):
        for real in (real_a, real_b):
            assert wrong != real and len(wrong) >= 16
            assert not _shares_a_piece(wrong, real), (wrong, real)  # not the real key with a character changed
    assert "Zq7Key" not in (pytester.path / "c3").joinpath("suite", "auth.rejected", "fake-model.yaml").read_text()
