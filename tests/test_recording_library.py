"""``use_cassette`` outside pytest's hooks: gzip, transport errors, notes on failure, and what is left alone."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from pytest_taotoken import _cassette
from pytest_taotoken.recording import MissingRecording, record_command, use_cassette
from pytest_taotoken.settings import Settings
from pytest_taotoken.sse import SSEParser
from pytest_taotoken.testing import FakeGateway

KEY = "sk-test-fake-7c1e5a9d3b0f2468ac1a2b"
BODY = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}
ORIGINAL_SYNC = httpx.HTTPTransport.handle_request
ORIGINAL_ASYNC = httpx.AsyncHTTPTransport.handle_async_request


@pytest.fixture
def settings() -> Settings:
    return Settings(api_key=KEY)


@pytest.fixture
def gateway() -> Iterator[FakeGateway]:
    with FakeGateway(api_key=KEY) as gw:
        yield gw


def client(base: str) -> httpx.Client:
    return httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEY}"})


def test_gzip_is_stored_decoded_and_replays(tmp_path: Path, gateway: FakeGateway, settings: Settings) -> None:
    gateway.scenario = "gzip"
    path = tmp_path / "gzip.yaml"
    with use_cassette(path, "record", settings), client(gateway.base_url) as http:
        recorded = http.post("v1/chat/completions", json=BODY)
    assert recorded.headers["content-encoding"] == "gzip"
    (item,) = _cassette.load(path).interactions
    assert item.response is not None and json.loads(item.response.body) == recorded.json()
    assert "Content-Encoding" not in item.response.headers
    assert item.response.headers["Content-Length"] == [str(len(item.response.body))]
    with use_cassette(path, "replay", settings), client("http://127.0.0.1:9/api") as http:
        assert http.post("v1/chat/completions", json=BODY).json() == recorded.json()


def test_a_quirky_stream_replays_chunk_for_chunk(tmp_path: Path, gateway: FakeGateway, settings: Settings) -> None:
    """Events split mid-line across writes, CRLF, comments: the parser sees the same bytes at the same moments."""
    gateway.scenario = "stream_quirky"
    path = tmp_path / "quirky.yaml"

    def run(base: str) -> tuple[list[bytes], list[list[str]]]:
        parser = SSEParser()
        with client(base) as http, http.stream("POST", "v1/chat/completions", json={**BODY, "stream": True}) as r:
            chunks = list(r.iter_bytes())
        return chunks, [[e.data for e in parser.feed(c, 0.0)] for c in chunks]

    with use_cassette(path, "record", settings):
        recorded = run(gateway.base_url)
    assert len(recorded[0]) > 5
    with use_cassette(path, "replay", settings):
        assert run("http://127.0.0.1:9/api") == recorded
    assert ": OPENROUTER PROCESSING\r\n" in _cassette.load(path).interactions[0].response.body.decode()  # type: ignore[union-attr]


def test_a_refused_connection_is_recorded_and_replayed(tmp_path: Path, settings: Settings) -> None:
    path = tmp_path / "refused.yaml"
    with FakeGateway() as gw:
        base = gw.base_url
    with use_cassette(path, "record", settings), client(base) as http, pytest.raises(httpx.ConnectError):
        http.get("v1/models")

    async def replay() -> None:
        async with httpx.AsyncClient(base_url="http://127.0.0.1:9/api") as http:
            await http.get("v1/models")

    with use_cassette(path, "replay", settings), pytest.raises(httpx.ConnectError):
        asyncio.run(replay())


def test_an_exception_keeps_the_old_cassette_and_says_so(tmp_path: Path, gateway: FakeGateway,
                                                         settings: Settings) -> None:
    path = tmp_path / "c.yaml"
    with use_cassette(path, "record", settings), client(gateway.base_url) as http:
        http.post("v1/chat/completions", json=BODY)
    before = path.read_bytes()
    with pytest.raises(ZeroDivisionError) as info, use_cassette(path, "record", settings), \
            client(gateway.base_url) as http:
        http.post("v1/chat/completions", json={**BODY, "temperature": 1})
        _ = 1 / 0
    assert path.read_bytes() == before
    note = f"taotoken: {path} was not written: ZeroDivisionError ended the block while recording; the previous" \
           " cassette is kept"
    assert getattr(info.value, "__notes__", None) == [note]


def test_a_swallowed_miss_is_raised_when_the_block_ends(tmp_path: Path) -> None:
    command = record_command('tests/test_x.py::test_y["a b"]')
    assert command == 'pytest --taotoken-record "tests/test_x.py::test_y[\\"a b\\"]"'
    with pytest.raises(MissingRecording) as info, use_cassette(tmp_path / "none.yaml", "replay", command=command), \
            httpx.Client() as http, pytest.raises(MissingRecording):
        http.get("https://gw.example/api/v1/models")
    assert str(info.value) == (f"taotoken: no recording of GET /api/v1/models in cassette {tmp_path / 'none.yaml'}:"
                               f" the cassette does not exist.\nRecord it with: {command}")


def test_replaying_more_often_than_recorded_says_so(tmp_path: Path, gateway: FakeGateway, settings: Settings) -> None:
    path = tmp_path / "c.yaml"
    with use_cassette(path, "record", settings), client(gateway.base_url) as http:
        http.get("v1/models")
    with use_cassette(path, "replay", settings) as session, client(gateway.base_url) as http:
        assert http.get("v1/models").status_code == 200
        with pytest.raises(MissingRecording, match="its 1 recording of this request was all replayed already"):
            http.get("v1/models")
        session.recorder.misses.clear()  # type: ignore[union-attr]


def test_custom_transports_and_live_mode_are_left_alone(tmp_path: Path) -> None:
    mock = httpx.MockTransport(lambda request: httpx.Response(204))
    with use_cassette(tmp_path / "none.yaml", "replay"), httpx.Client(transport=mock) as http:
        assert httpx.HTTPTransport.handle_request is not ORIGINAL_SYNC
        assert http.get("https://gw.example/x").status_code == 204
    assert httpx.HTTPTransport.handle_request is ORIGINAL_SYNC
    assert httpx.AsyncHTTPTransport.handle_async_request is ORIGINAL_ASYNC
    with use_cassette(tmp_path / "none.yaml", "live"):
        assert httpx.HTTPTransport.handle_request is ORIGINAL_SYNC
    assert not (tmp_path / "none.yaml").exists()


def test_nested_cassettes_answer_from_the_innermost(tmp_path: Path, gateway: FakeGateway, settings: Settings) -> None:
    outer, inner = tmp_path / "outer.yaml", tmp_path / "inner.yaml"
    with use_cassette(outer, "record", settings), client(gateway.base_url) as http:
        http.get("v1/models")
        with use_cassette(inner, "record", settings):
            http.post("v1/chat/completions", json=BODY)
    assert [i.request.method for i in _cassette.load(outer).interactions] == ["GET"]
    assert [i.request.method for i in _cassette.load(inner).interactions] == ["POST"]
    assert httpx.HTTPTransport.handle_request is ORIGINAL_SYNC


def test_every_retry_attempt_is_recorded_and_replayed_in_order(tmp_path: Path, settings: Settings) -> None:
    from pytest_taotoken.client import build_client

    path = tmp_path / "retry.yaml"
    with FakeGateway("rate_limited", api_key=KEY, recover_after=1, retry_after=0) as gw:
        live = settings.with_changes(mode="record", api_root=gw.base_url)
        with use_cassette(path, "record", live), build_client(live, sleep=False) as http:
            assert http.get("v1/models").status_code == 200
            assert http.stats.retries == 1
    assert [i.response.status for i in _cassette.load(path).interactions] == [429, 200]  # type: ignore[union-attr]
    replay = settings.with_changes(mode="replay", api_root="http://127.0.0.1:9/api")
    with use_cassette(path, "replay", replay), build_client(replay) as http:
        assert http.get("v1/models").status_code == 200
        assert http.stats.retries == 1


def test_a_recording_replays_under_another_api_root(tmp_path: Path, gateway: FakeGateway, settings: Settings) -> None:
    """Paths are matched below the API root: recorded at http://host:port/api, replayed at a bare root."""
    path = tmp_path / "moved.yaml"
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    recorder = settings.with_changes(mode="record", api_root=gateway.base_url)
    with use_cassette(path, settings=recorder), client(gateway.base_url) as http:
        recorded = http.post("/v1/chat/completions", json=body).json()
    assert "root_path: /api" in path.read_text()
    elsewhere = settings.with_changes(mode="replay", api_root="https://gateway.example")
    with use_cassette(path, settings=elsewhere), client("https://gateway.example") as http:
        assert http.post("/v1/chat/completions", json=body).json() == recorded
    with pytest.raises(MissingRecording), use_cassette(path, settings=elsewhere), client("https://gateway.example") as http:
        http.post("/api/v1/chat/completions", json=body)
