"""Record against a real server on 127.0.0.1, stop it, replay: as a user runs it, through pytester."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_taotoken import _cassette, _lockfile
from pytest_taotoken.keys import KEY_PLACEHOLDER
from pytest_taotoken.testing import FakeGateway

CANARY = f"sk-canary-{secrets.token_hex(16)}"
ENV_NAMES = ("TAOTOKEN_API_KEY", "OPENAI_API_KEY", "TAOTOKEN_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_BASE",
             "RL_SAMPLE_MODEL", "RL_EVAL_MODEL", "OPENAI_MODEL", "TAOTOKEN_TIMEOUT")

CHAT_TESTS = '''
import asyncio
import json
import os
import pathlib
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from pytest_taotoken.sse import SSEParser

OBS = pathlib.Path(os.environ["OBS_DIR"])
BODY = {"model": "fake-model", "messages": [{"role": "user", "content": "Say hi"}], "temperature": 1.0}


def observe(settings, name, value):
    """Record mode saves what the server said; replay must see exactly the same."""
    path = OBS / f"{__name__}-{name}.json"
    if settings.mode == "record":
        path.write_text(json.dumps(value))
    else:
        assert json.loads(path.read_text()) == value


def content(response):
    return response.json()["choices"][0]["message"]["content"]


def test_sync(client, taotoken_settings):
    observe(taotoken_settings, "sync", client.post("v1/chat/completions", json=BODY).json())


def test_stream(client, taotoken_settings):
    with client.stream("POST", "v1/chat/completions", json={**BODY, "stream": True}) as response:
        chunks = [c.decode() for c in response.iter_bytes()]
    with client.stream("POST", "v1/chat/completions", json={**BODY, "stream": True}) as response:
        lines = list(response.iter_lines())
    assert lines[-2:] == ["data: [DONE]", ""]
    parser = SSEParser()
    with client.stream("POST", "v1/chat/completions", json={**BODY, "stream": True}) as response:
        events = [[e.data for e in parser.feed(chunk, 0.0)] for chunk in response.iter_bytes()]
    observe(taotoken_settings, "stream", [chunks, lines, events])


def test_async(async_client, taotoken_settings):
    async def go():
        reply = await async_client.post("v1/chat/completions", json=BODY)
        async with async_client.stream("POST", "v1/chat/completions", json={**BODY, "stream": True}) as response:
            lines = [line async for line in response.aiter_lines()]
        both = await asyncio.gather(*(async_client.post("v1/chat/completions", json=BODY) for _ in range(3)))
        return [reply.json(), lines, sorted(content(r) for r in both)]

    observe(taotoken_settings, "async", asyncio.run(go()))


def test_concurrent(client, taotoken_settings):
    with ThreadPoolExecutor(4) as pool:
        replies = sorted(pool.map(lambda _: content(client.post("v1/chat/completions", json=BODY)), range(4)))
    observe(taotoken_settings, "concurrent", replies)
    in_order = [content(client.post("v1/chat/completions", json=BODY)) for _ in range(3)]
    assert len(set(in_order)) == 3  # random replies at temperature 1: the order below means something
    observe(taotoken_settings, "in_order", in_order)


@pytest.mark.taotoken_live
def test_plain_httpx(taotoken_settings):
    """Any httpx client in a marked test; a random header value must not prevent replay."""
    headers = {"Authorization": f"Bearer {os.environ.get('TAOTOKEN_API_KEY', 'sk-none')}",
               "X-RL-Version": os.urandom(4).hex()}
    with httpx.Client(base_url=taotoken_settings.api_root, headers=headers) as http:
        reply = http.post("v1/chat/completions", json={"messages": BODY["messages"], "model": "fake-model",
                                                       "temperature": 1.0})
    observe(taotoken_settings, "plain", reply.json())
'''


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    obs = tmp_path / "observed"
    obs.mkdir()
    monkeypatch.setenv("OBS_DIR", str(obs))


@pytest.fixture
def gateway(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGateway]:
    monkeypatch.setenv("TAOTOKEN_API_KEY", CANARY)
    with FakeGateway(api_key=CANARY) as gw:
        yield gw


def record(pytester: pytest.Pytester, gateway: FakeGateway, *args: str) -> pytest.RunResult:
    return pytester.runpytest("--taotoken-record", f"--taotoken-base-url={gateway.base_url}", "-p",
                              "no:cacheprovider", *args)


def assert_lines(result: pytest.RunResult, *expected: str) -> None:
    """Each expected line appears verbatim, in this order, in the output."""
    lines = result.outlines
    at = 0
    for line in expected:
        assert line in lines[at:], f"missing line: {line!r}\n" + "\n".join(lines)
        at = lines.index(line, at) + 1


def cassette(pytester: pytest.Pytester, relative: str) -> Path:
    return pytester.path / "cassettes" / relative


def test_record_then_replay_without_the_server(pytester: pytest.Pytester, gateway: FakeGateway,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_chat=CHAT_TESTS)
    record(pytester, gateway).assert_outcomes(passed=5)
    sent = len(gateway.requests)
    assert sent == 1 + 3 + 5 + 7 + 1
    names = sorted(p.name for p in cassette(pytester, "test_chat").iterdir())
    assert names == ["test_async.yaml", "test_concurrent.yaml", "test_plain_httpx.yaml", "test_stream.yaml",
                     "test_sync.yaml"]
    stream = _cassette.load(cassette(pytester, "test_chat/test_stream.yaml")).interactions
    assert all(i.response is not None and len(i.response.chunk_sizes) > 1 for i in stream)

    gateway.stop()
    monkeypatch.delenv("TAOTOKEN_API_KEY")  # replay needs no key, and the default base URL is not reachable
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=5)
    assert len(gateway.requests) == sent


def test_no_file_holds_the_key(pytester: pytest.Pytester, gateway: FakeGateway) -> None:
    """The key travels in the header, the URL, the body and a custom header, and comes back in a 401 body."""
    pytester.makepyfile(test_leak='''
        import os
        import httpx
        import pytest

        @pytest.mark.taotoken_live
        def test_echo(taotoken_settings):
            key = os.environ["TAOTOKEN_API_KEY"]
            headers = {"Authorization": f"Bearer {key}", "X-Api-Key": key, "OpenAI-Project": "p",
                       "X-Custom": f"token={key}", "Cookie": "session=abc"}
            with httpx.Client(base_url=taotoken_settings.api_root, headers=headers) as http:
                reply = http.post(f"v1/chat/completions?api_key={key}",
                                  json={"model": "fake-model", "note": key[:14] + "..." + key[-6:],
                                        "messages": [{"role": "user", "content": f"my key is {key}"}]})
            assert reply.status_code == 401
            assert (key if taotoken_settings.mode == "record" else "<TAOTOKEN_API_KEY>") in reply.text
    ''')
    gateway.script("unauthorized_echo")
    record(pytester, gateway).assert_outcomes(passed=1)
    text = cassette(pytester, "test_leak/test_echo.yaml").read_text()
    assert text.count(KEY_PLACEHOLDER) == 4  # URL, body note (fragment), body content, 401 body
    for header in ("Authorization", "X-Api-Key", "OpenAI-Project", "X-Custom", "Cookie"):
        assert f"{header}:" not in text
    hits = []
    for path in pytester.path.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            hits += [f"{path}:{CANARY[i:i + 8]}" for i in range(len(CANARY) - 7) if CANARY[i:i + 8].encode() in data]
    assert hits == []
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)  # replays, key still in env


MISS = '''
def test_new_prompt(client):
    client.post("v1/chat/completions", json={"model": "fake-model", "messages": [{"role": "user", "content": "%s"}]})
'''


def test_missing_recording_message_is_exact(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_miss=MISS % "Hello")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "    def test_new_prompt(client):",
        '>       client.post("v1/chat/completions", json=*',
        "E       pytest_taotoken.recording.MissingRecording: taotoken: no recording of POST /api/v1/chat/completions"
        ' (model "fake-model") in cassette cassettes/test_miss/test_new_prompt.yaml: the cassette does not exist.',
        'E       Record it with: pytest --taotoken-record "test_miss.py::test_new_prompt"',
    ])
    assert "httpx/_client.py" not in result.stdout.str()  # the traceback stops at the test's own line


def test_missing_recording_names_the_nearest_difference(pytester: pytest.Pytester, gateway: FakeGateway,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_miss=MISS % "Hi")
    record(pytester, gateway).assert_outcomes(passed=1)
    pytester.makepyfile(test_miss=MISS % "Hello")
    monkeypatch.chdir(pytester.path / "cassettes")  # run from elsewhere: the paths follow
    result = pytester.runpytest("-p", "no:cacheprovider", str(pytester.path))
    result.assert_outcomes(failed=1)
    assert_lines(
        result,
        "E       pytest_taotoken.recording.MissingRecording: taotoken: no recording of POST /api/v1/chat/completions"
        ' (model "fake-model") in cassette test_miss/test_new_prompt.yaml: it holds 1 recording of POST'
        ' /api/v1/chat/completions, none with this body; the nearest differs at $.messages[0].content: recorded'
        ' "Hi", sent "Hello".',
        'E       Record it with: pytest --taotoken-record "../test_miss.py::test_new_prompt"',
    )


def test_a_swallowed_missing_recording_still_fails_the_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_swallow='''
        import pytest

        @pytest.mark.taotoken_live
        def test_it(client):
            with pytest.raises(AssertionError):
                client.get("v1/models")
    ''')
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([
        "*ERROR at teardown of test_it*",
        "taotoken: no recording of GET /api/v1/models in cassette cassettes/test_swallow/test_it.yaml: the cassette"
        " does not exist.",
        'Record it with: pytest --taotoken-record "test_swallow.py::test_it"',
        "(the test caught the error; it fails here instead)",
    ])


def test_a_corrupt_cassette_fails_its_test_without_internal_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_c='''
        def test_it(client):
            client.get("v1/models")
    ''')
    path = cassette(pytester, "test_c/test_it.yaml")
    path.parent.mkdir(parents=True)
    path.write_text("interactions:\n- request: {method: GET, uri: http://h/api/v1/models}\n  response: {sta")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "taotoken: cassette cassettes/test_c/test_it.yaml cannot be replayed: it is not valid YAML (*line 4*)."
        ' Fix: delete it and record it again: pytest --taotoken-record "test_c.py::test_it"',
    ])
    assert "INTERNALERROR" not in result.stdout.str()


def test_a_test_failing_mid_record_keeps_the_old_cassette_and_says_so(pytester: pytest.Pytester,
                                                                      gateway: FakeGateway) -> None:
    pytester.makepyfile(test_s='''
        def test_stream(client):
            body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            with client.stream("POST", "v1/chat/completions", json=body) as response:
                assert len(list(response.iter_lines())) > 3
    ''')
    record(pytester, gateway).assert_outcomes(passed=1)
    path = cassette(pytester, "test_s/test_stream.yaml")
    before = path.read_bytes()
    gateway.script("stream_reset")
    result = record(pytester, gateway)
    result.assert_outcomes(failed=1)
    assert path.read_bytes() == before
    result.stdout.fnmatch_lines([
        "*- taotoken recording -*",
        "cassettes/test_s/test_stream.yaml will not be written: the test failed while recording; the previous"
        " cassette is kept.",
        "*- taotoken: cassettes not written -*",
        "test_s.py::test_stream: cassettes/test_s/test_stream.yaml will not be written*",
    ])


def test_a_recorded_transport_error_replays(pytester: pytest.Pytester, gateway: FakeGateway) -> None:
    """A test that expects a broken stream records the break, and replay breaks the same way."""
    pytester.makepyfile(test_r='''
        import httpx
        import pytest

        def test_reset(client):
            body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            with client.stream("POST", "v1/chat/completions", json=body) as response:
                with pytest.raises(httpx.TransportError) as info:
                    for _ in response.iter_lines():
                        pass
            assert type(info.value).__name__ in ("ReadError", "RemoteProtocolError")
    ''')
    gateway.script("stream_reset")
    record(pytester, gateway).assert_outcomes(passed=1)
    (item,) = _cassette.load(cassette(pytester, "test_r/test_reset.yaml")).interactions
    assert item.error is not None and item.response is not None and item.response.status == 200
    gateway.stop()
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


SHARED = '''
import pytest

pytestmark = pytest.mark.taotoken_cassette("shared/chat")


def ask(client, text):
    body = {"model": "fake-model", "messages": [{"role": "user", "content": text}], "temperature": 0}
    return client.post("v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]


def test_one(client):
    assert ask(client, "one")


def test_two(client):
    assert ask(client, "two")
'''


def test_shared_cassette_merges_the_tests_recordings(pytester: pytest.Pytester, gateway: FakeGateway) -> None:
    pytester.makepyfile(test_shared=SHARED)
    record(pytester, gateway).assert_outcomes(passed=2)
    path = cassette(pytester, "shared/chat.yaml")
    owners = [i.recorded_by for i in _cassette.load(path).interactions]
    assert owners == ["test_shared.py::test_one", "test_shared.py::test_two"]
    record(pytester, gateway, "-k", "test_two").assert_outcomes(passed=1, deselected=1)
    owners = [i.recorded_by for i in _cassette.load(path).interactions]
    assert owners == ["test_shared.py::test_one", "test_shared.py::test_two"]  # test_one's recording stays
    gateway.stop()
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_recording_into_a_locked_cassette_fails_clearly(pytester: pytest.Pytester, gateway: FakeGateway,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_shared=SHARED)
    path = cassette(pytester, "shared/chat.yaml")
    path.parent.mkdir(parents=True)
    monkeypatch.setattr(_lockfile, "WAIT_SECONDS", 0.1)
    with _lockfile.locked(path, "test_other.py::test_x"):
        result = record(pytester, gateway, "-k", "test_one")
    result.assert_outcomes(passed=1, errors=1, deselected=1)
    result.stdout.fnmatch_lines([
        "*ERROR at teardown of test_one*",
        "taotoken: cassette cassettes/shared/chat.yaml was not written: another process is writing it (pid * on *"
        " (test_other.py::test_x)), and it kept the lock chat.yaml.lock longer than the wait. The previous cassette is"
        " kept. Fix: run the tests that share this cassette in one worker*",
    ])
    assert not path.exists()


def test_unmarked_tests_and_live_mode_are_not_touched(pytester: pytest.Pytester, gateway: FakeGateway) -> None:
    pytester.makepyfile(test_plain='''
        import os
        import httpx
        import pytest

        def call(settings):
            headers = {"Authorization": "Bearer " + os.environ["TAOTOKEN_API_KEY"]}
            with httpx.Client(base_url=settings.api_root, headers=headers) as http:
                return http.get("v1/models").status_code

        def test_unmarked(taotoken_settings):
            assert call(taotoken_settings) == 200

        @pytest.mark.taotoken_live
        def test_marked(taotoken_settings):
            assert call(taotoken_settings) == 200
    ''')
    base = f"--taotoken-base-url={gateway.base_url}"
    pytester.runpytest(base, "-p", "no:cacheprovider", "-k", "unmarked").assert_outcomes(passed=1, deselected=1)
    pytester.runpytest(base, "-p", "no:cacheprovider", "--taotoken-live").assert_outcomes(passed=2)
    assert len(gateway.requests) == 3
    assert not (pytester.path / "cassettes").exists()


def test_a_miss_wrapped_by_an_sdk_is_shown_beside_its_error(pytester: pytest.Pytester) -> None:
    """The openai SDK turns any transport exception into APIConnectionError; the miss must still be seen."""
    pytester.makepyfile(test_wrap='''
        import pytest

        @pytest.mark.taotoken_live
        def test_it(client):
            try:
                client.get("v1/models")
            except Exception as exc:
                raise ConnectionError("Connection error.") from exc
    ''')
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert_lines(
        result,
        "E           ConnectionError: Connection error.",
        "requests without a recording (the failure may stem from them):",
        "taotoken: no recording of GET /api/v1/models in cassette cassettes/test_wrap/test_it.yaml: the cassette does"
        " not exist.",
        'Record it with: pytest --taotoken-record "test_wrap.py::test_it"',
    )
