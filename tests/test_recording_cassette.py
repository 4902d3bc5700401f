"""The cassette core, directly: format round-trip, strict loading, matching, scrubbing, locking, atomicity."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from pytest_taotoken import _cassette, _lockfile, _scrub
from pytest_taotoken._cassette import (
    Cassette,
    CassetteCorrupt,
    CassetteLocked,
    Failure,
    Interaction,
    Request,
    Response,
    match_key,
)
from pytest_taotoken._scrub import Scrubber
from pytest_taotoken.errors import CassetteError
from pytest_taotoken.keys import KEY_PLACEHOLDER, Redactor

KEY = "sk-test-fake-0000000000001a2b"
SSE = (b'data: {"choices":[{"delta":{"content":"Hel"}}]}\n\n'
       b'data: {"choices":[{"delta":{"content":"lo \xc3\xa9"}}]}\n\n'
       b"data: [DONE]\n\n")


def chat(n: int, *, content: str = "hi", owner: str | None = None) -> Interaction:
    body = f'{{"model":"m","messages":[{{"role":"user","content":"{content} {n}"}}]}}'.encode()
    return Interaction(
        Request("POST", "https://gw.example/api/v1/chat/completions", body, {"Content-Type": ["application/json"]}),
        Response(200, "OK", {"Content-Type": ["application/json"]}, f'{{"id":"c{n}","choices":[]}}'.encode()),
        recorded_by=owner,
    )


def stream() -> Interaction:
    sizes = (20, len(SSE) - 20)
    return Interaction(Request("POST", "https://gw.example/api/v1/chat/completions", b'{"stream":true}'),
                       Response(200, "OK", {"Content-Type": ["text/event-stream"]}, SSE, sizes))


# -- format --------------------------------------------------------------------------------------

def test_round_trip_keeps_bodies_chunks_errors_and_owners() -> None:
    items = [chat(1), stream(),
             Interaction(Request("GET", "https://gw.example/api/v1/models"), None, Failure("ConnectError", "refused")),
             Interaction(Request("POST", "https://gw.example/x", b"\xff\xfe binary"),
                         Response(502, "Bad Gateway", {}, b"\x00\x01\xff"), Failure("ReadError", "reset")),
             chat(2, owner="tests/test_a.py::test_b")]
    text = _cassette.dumps(items)
    assert _cassette.parse(text) == items
    assert _cassette.parse(text)[1].response.chunks() == [SSE[:20], SSE[20:]]  # type: ignore[union-attr]


def test_text_is_readable_in_a_diff() -> None:
    text = _cassette.dumps([chat(1), stream()])
    assert '"content":"hi 1"' in text  # JSON bodies stay text
    assert "\n        data: [DONE]\n" in text  # SSE as a literal block, one event per line
    assert "!!binary" not in text
    assert "\nversion: 1\n" in text and text.index("version: 1") > text.index("chunk_sizes")
    data = yaml.safe_load(text)  # plain vcrpy shape
    assert data["interactions"][0]["response"]["body"]["string"] == '{"id":"c1","choices":[]}'
    assert data["interactions"][0]["response"]["status"] == {"code": 200, "message": "OK"}


def test_chunk_sizes_that_do_not_add_up_replay_as_one_chunk() -> None:
    assert Response(200, body=b"abc", chunk_sizes=(1, 1)).chunks() == [b"abc"]
    assert Response(200, body=b"").chunks() == []


def test_vcrpy_reads_our_cassettes(tmp_path: Path) -> None:
    from vcr.serializers import yamlserializer

    data = yamlserializer.deserialize(_cassette.dumps([chat(1), stream()]))
    assert data["version"] == 1 and len(data["interactions"]) == 2


# -- strict loading ------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "reason"), [
    ("", "it is empty"),
    ("interactions: [\n", "it is not valid YAML"),
    ("- a\n- b\n", "it is not a cassette (no top-level mapping)"),
    ("interactions: []\n", "it has no 'version: 1' at its end: the file is truncated or is not a cassette"),
    ("version: 1\n", "it has no list of interactions"),
    ("interactions: [{request: {method: GET}}]\nversion: 1\n", "interaction 0: request.uri is missing"),
    ("interactions: [{request: {method: GET, uri: /x}}]\nversion: 1\n",
     "interaction 0 has neither a response nor an error"),
    ("interactions: [{request: {method: GET, uri: /x}, response: {status: {code: 'x'}, body: {string: ''}}}]\n"
     "version: 1\n", "interaction 0: response.status.code is not an HTTP status"),
    ("interactions: [{request: {method: GET, uri: /x}, response: {status: {code: 200}, body: {string: a,"
     " chunk_sizes: [-1]}}}]\nversion: 1\n", "interaction 0: response.body.chunk_sizes is not a list of sizes"),
    ("interactions: [\xff]\nversion: 1\n", "it is not valid YAML"),
])
def test_corrupt_cassettes_name_file_reason_and_fix(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(CassetteCorrupt) as info:
        _cassette.load(path, display="cassettes/c.yaml", fix='pytest --taotoken-record "t.py::t"')
    message = str(info.value)
    assert message.startswith(f"taotoken: cassette cassettes/c.yaml cannot be replayed: {reason}")
    assert message.endswith('Fix: delete it and record it again: pytest --taotoken-record "t.py::t"')
    assert isinstance(info.value, AssertionError) and isinstance(info.value, CassetteError)


def test_every_truncation_is_detected(tmp_path: Path) -> None:
    """A cut anywhere before the final ``version: 1`` fails; nothing loads with fewer interactions."""
    full = _cassette.dumps([chat(1), stream(), chat(2)])
    expected = _cassette.parse(full)
    for n in range(len(full)):
        try:
            got = _cassette.parse(full[:n])
        except _cassette._Bad:
            continue
        assert got == expected, f"cut at {n} loaded {len(got)} interactions"


@given(st.data())
def test_corrupted_cassettes_raise_only_cassette_corrupt(tmp_path_factory: pytest.TempPathFactory,
                                                         data: st.DataObject) -> None:
    raw = bytearray(_cassette.dumps([chat(1), stream()]).encode())
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    raw = raw[: data.draw(st.integers(0, len(raw)))]
    path = tmp_path_factory.mktemp("fuzz") / "c.yaml"
    path.write_bytes(bytes(raw))
    try:
        cassette = _cassette.load(path)
    except CassetteCorrupt as exc:
        assert str(exc).startswith(f"taotoken: cassette {path} cannot be replayed: ")
    else:
        assert all(isinstance(i, Interaction) for i in cassette.interactions)


def test_missing_cassette_loads_empty(tmp_path: Path) -> None:
    cassette = _cassette.load(tmp_path / "none.yaml")
    assert cassette.exists is False and cassette.interactions == []


def test_loading_is_cached_until_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    _cassette.write(path, [chat(1)])
    first = _cassette.load(path)
    assert _cassette.load(path) is first
    _cassette.write(path, [chat(1), chat(2)])
    assert len(_cassette.load(path).interactions) == 2


# -- matching ------------------------------------------------------------------------------------

def test_match_ignores_key_order_whitespace_host_and_port() -> None:
    a = match_key("post", "https://gw.example/api/v1/chat/completions", b'{"model": "m", "n": 1}')
    b = match_key("POST", "http://127.0.0.1:5/api/v1/chat/completions", b'{"n":1,"model":"m"}')
    assert a == b
    assert a != match_key("POST", "http://h/api/v1/chat/completions", b'{"n":2,"model":"m"}')
    assert a != match_key("POST", "http://h/api/v1/embeddings", b'{"n":1,"model":"m"}')
    assert match_key("GET", "http://h/v1/models?limit=2", b"")[1] == "/v1/models?limit=2"


def test_queues_replay_identical_requests_in_recorded_order_owner_first() -> None:
    items = [chat(1, owner="a"), chat(1, owner="b"), chat(1, owner="b")]
    items = [Interaction(i.request, Response(200, body=str(n).encode()), recorded_by=i.recorded_by)
             for n, i in enumerate(items)]
    cassette = Cassette(Path("x"), items)
    queue = next(iter(cassette.queues("b").values()))
    assert [i.response.body for i in queue] == [b"1", b"2", b"0"]  # type: ignore[union-attr]
    queue = next(iter(cassette.queues(None).values()))
    assert [i.response.body for i in queue] == [b"0", b"1", b"2"]  # type: ignore[union-attr]


def test_merge_replaces_only_the_owners_interactions_in_place() -> None:
    old = [chat(1, owner="a"), chat(2, owner="b"), chat(3, owner="a"), chat(4)]
    new = [chat(9, owner="a")]
    assert _cassette.merge(old, new, "a") == [chat(9, owner="a"), chat(2, owner="b"), chat(4)]
    assert _cassette.merge(old, new, "c") == [*old, *new]


# -- scrubbing -----------------------------------------------------------------------------------

@pytest.fixture
def redactor(monkeypatch: pytest.MonkeyPatch) -> Redactor:
    """A fresh registry of secrets, so that what other tests registered does not leak in."""
    fresh = Redactor()
    monkeypatch.setattr(_scrub, "REDACTOR", fresh)
    return fresh


@pytest.mark.usefixtures("redactor")
def test_scrubber_replaces_key_and_fragments_everywhere() -> None:
    key = "sk-canary-7f3e9a1c5b2d4e6f8a0b"
    scrub = Scrubber([key])
    assert scrub.text(f"https://h/v1?key={key}&x=1") == f"https://h/v1?key={KEY_PLACEHOLDER}&x=1"
    assert scrub.text(f"Incorrect API key provided: {key[:12]}****{key[-6:]}") == (
        f"Incorrect API key provided: {KEY_PLACEHOLDER}****{key[-6:]}")
    assert key[-8:] not in scrub.text(f"...{key[-10:]}")
    assert scrub.data(key.encode() + b"\xff") == KEY_PLACEHOLDER.encode() + b"\xff"
    assert scrub.text("created: 1700000000, sk-other-key") == "created: 1700000000, sk-other-key"


def test_registered_secrets_are_scrubbed_and_never_corrupt_the_placeholder(redactor: Redactor) -> None:
    redactor.add("TAOTOKEN_API_KEY", "sk-registered-elsewhere-1234")
    scrub = Scrubber([KEY])
    assert scrub.text(f"{KEY} sk-registered-elsewhere-1234 TAOTOKEN_API_KEY") == " ".join([KEY_PLACEHOLDER] * 3)


@pytest.mark.usefixtures("redactor")
def test_scrubber_drops_secret_headers_and_headers_holding_the_key() -> None:
    scrub = Scrubber([KEY])
    headers = [("Authorization", "Bearer x"), ("api-key", "x"), ("X-Api-Key", "x"), ("Cookie", "a=b"),
               ("Set-Cookie", "a=b"), ("OpenAI-Organization", "org"), ("OpenAI-Project", "p"),
               ("X-Echo", f"k={KEY}"), ("Content-Type", "application/json"), ("X-RL-Version", "7")]
    assert scrub.headers(headers) == {"Content-Type": ["application/json"], "X-RL-Version": ["7"]}


@pytest.mark.usefixtures("redactor")
def test_scrubber_without_secrets_is_a_no_op() -> None:
    scrub = Scrubber([None, "short"])
    assert scrub.text("sk-anything") == "sk-anything"


# -- locking and atomic writes -------------------------------------------------------------------

def test_a_held_lock_fails_the_write_with_a_clear_message(tmp_path: Path) -> None:
    path = tmp_path / "shared.yaml"
    _cassette.write(path, [chat(1)])
    before = path.read_bytes()
    with _lockfile.locked(path, "tests/test_x.py::test_other"), pytest.raises(CassetteLocked) as info:
        _cassette.write(path, [chat(2)], display="cassettes/shared.yaml", lock_wait=0.05)
    message = str(info.value)
    assert message.startswith("taotoken: cassette cassettes/shared.yaml was not written: another process is"
                              f" writing it (pid {os.getpid()} on ")
    assert "(tests/test_x.py::test_other)" in message and "The previous cassette is kept" in message
    assert "xdist_group" in message
    assert path.read_bytes() == before
    assert not _lockfile.lock_path(path).exists()


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_stale_lock_of_a_dead_process_is_broken(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "c.yaml"
    _lockfile.lock_path(path).write_text(f"{dead_pid()}\n{socket.gethostname()}\nt\n")
    assert _cassette.write(path, [chat(1)], lock_wait=0.05) == 1
    assert not _lockfile.lock_path(path).exists()


def test_a_half_written_lock_counts_as_stale_once_old(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    lock = _lockfile.lock_path(path)
    lock.write_text("")
    with pytest.raises(CassetteLocked):
        _cassette.write(path, [chat(1)], lock_wait=0.05)
    old = time.time() - 60
    os.utime(lock, (old, old))
    assert _cassette.write(path, [chat(1)], lock_wait=0.05) == 1


def test_leftover_temporary_files_are_removed_on_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    (tmp_path / ".c.yaml.abc123.tmp").write_text("half")
    _cassette.write(path, [chat(1)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]


WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from pytest_taotoken._cassette import Interaction, Request, Response, write

    def variant(tag):
        return [Interaction(Request("POST", f"https://h/v1/{n}", b'{"n": %d}' % n),
                            Response(200, "OK", {}, (tag * 4000).encode())) for n in range(60)]

    path = Path(sys.argv[1])
    a, b = variant("a"), variant("b")
    print("ready", flush=True)
    while True:
        write(path, a)
        write(path, b)
""")


def kill_iterations() -> int:
    return int(os.environ.get("TAOTOKEN_KILL_ITERATIONS", "4"))


def test_kill_9_mid_write_leaves_the_old_or_a_complete_new_cassette(tmp_path: Path) -> None:
    """A writer loops over two 480 KB cassettes and is killed at random moments: every state loads whole."""
    path = tmp_path / "c.yaml"
    _cassette.write(path, [chat(1)])
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    seen: set[str] = set()
    rng = random.Random()
    for _ in range(kill_iterations()):
        proc = subprocess.Popen([sys.executable, str(script), str(path)], stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.0, 0.3))
        proc.kill()
        proc.wait()
        items = _cassette.load(path).interactions  # loads whole, or raises: the test fails
        bodies = {i.response.body[:1] for i in items if i.response is not None}
        assert (len(items), bodies) in ((1, {b'{'}), (60, {b"a"}), (60, {b"b"}))
        seen.add(bodies.pop().decode())
    assert seen & {"a", "b"}, "the writer never completed a write: the kill test proved nothing"
    _cassette.write(path, [chat(2)])  # the next writer breaks the stale lock and sweeps temporary files
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml", "writer.py"]
