"""Traffic from the openai SDK inside a marked test is recorded and replayed (the live env carries openai,
which LiteLLM depends on; openai v3 runs on httpx2, which the recorder patches too)."""

from __future__ import annotations

import pytest

from pytest_taotoken.testing import FakeGateway

openai = pytest.importorskip("openai")  # the live env always has it; this is not a skip-by-default test

KEY = "sk-test-fake-openai-sdk-0000001a2b"

TEST_FILE = '''
import os
import pytest
import openai

@pytest.mark.taotoken_live
def test_sdk():
    client = openai.OpenAI(base_url=os.environ["SDK_BASE_URL"], api_key=os.environ["TAOTOKEN_API_KEY"], max_retries=0)
    reply = client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "hi"}],
                                           max_tokens=8, temperature=0)
    assert reply.choices[0].message.content
    stream = client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "hi"}],
                                            max_tokens=8, temperature=0, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text
'''


def test_openai_sdk_records_and_replays(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAOTOKEN_API_KEY", KEY)
    pytester.makepyfile(test_sdk=TEST_FILE)
    with FakeGateway(api_key=KEY) as gw:
        monkeypatch.setenv("SDK_BASE_URL", gw.base_url + "/v1")
        pytester.runpytest("--taotoken-record", f"--taotoken-base-url={gw.base_url}", "-p", "no:cacheprovider"
                           ).assert_outcomes(passed=1)
        assert len(gw.requests) == 2
        bare_root = gw.url
    (cassette,) = pytester.path.joinpath("cassettes").rglob("*.yaml")
    text = cassette.read_text()
    assert KEY not in text and "data: [DONE]" in text
    # The gateway is gone: replay answers from the cassette alone.
    pytester.runpytest(f"--taotoken-base-url={bare_root}/api", "-p", "no:cacheprovider").assert_outcomes(passed=1)
