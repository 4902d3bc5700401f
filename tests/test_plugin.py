"""The plugin as a user runs it: --help, precedence, report header, UsageErrors, fixtures, aliases."""

from __future__ import annotations

import pytest

KEY = "sk-test-fake-0000000000001a2b"
ENV_NAMES = ("TAOTOKEN_API_KEY", "OPENAI_API_KEY", "TAOTOKEN_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_BASE",
             "RL_SAMPLE_MODEL", "RL_EVAL_MODEL", "OPENAI_MODEL", "TAOTOKEN_TIMEOUT", "MY_KEY")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)


def test_help_shows_the_taotoken_group(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines([
        "taotoken: check an OpenAI-compatible gateway*",
        "*--taotoken-live*",
        "*--taotoken-record*",
        "*--taotoken-config=PATH*",
        "*--taotoken-base-url=BASE_URL*",
        "*--taotoken-key-env=KEY_ENV*",
        "*--taotoken-models=MODELS*",
        "*taotoken_base_url*",
    ])
    assert "--taotoken-api-key" not in result.stdout.str()  # no flag ever takes a key


PRECEDENCE = [
    # (cli, ini, env, config, expected value, expected source)
    (None, None, None, None, "https://taotoken.net/api", "default"),
    (None, None, None, "https://cfg.example/api", "https://cfg.example/api", "rl.toml [model] base_url"),
    (None, None, "https://env.example/api", "https://cfg.example/api", "https://env.example/api", "TAOTOKEN_BASE_URL"),
    (None, "https://ini.example/api", "https://env.example/api", "https://cfg.example/api",
     "https://ini.example/api", "ini taotoken_base_url"),
    ("https://cli.example/api", "https://ini.example/api", "https://env.example/api", "https://cfg.example/api",
     "https://cli.example/api", "--taotoken-base-url"),
    (None, None, "", "https://cfg.example/api", "https://cfg.example/api", "rl.toml [model] base_url"),
]


@pytest.mark.parametrize(("cli", "ini", "env", "config", "value", "source"), PRECEDENCE)
def test_precedence(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, cli: str | None, ini: str | None,
                    env: str | None, config: str | None, value: str, source: str) -> None:
    args = ["-q"]
    if cli is not None:
        args.append(f"--taotoken-base-url={cli}")
    if ini is not None:
        pytester.makeini(f"[pytest]\ntaotoken_base_url = {ini}\n")
    if env is not None:
        monkeypatch.setenv("TAOTOKEN_BASE_URL", env)
    if config is not None:
        pytester.path.joinpath("rl.toml").write_text(f'[model]\nbase_url = "{config}"\n')
        args.append("--taotoken-config=rl.toml")
    pytester.makepyfile(f"""
        def test_it(taotoken_settings):
            assert taotoken_settings.base_url == {value!r}
            assert taotoken_settings.source("base_url").endswith({source!r}), taotoken_settings.sources
    """)
    pytester.runpytest(*args).assert_outcomes(passed=1)


def test_report_header_shows_values_sources_and_masked_key(pytester: pytest.Pytester,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAOTOKEN_API_KEY", KEY)
    monkeypatch.setenv("RL_SAMPLE_MODEL", "qwen-max")
    monkeypatch.setenv("OPENAI_BASE_URL", "")
    pytester.makepyfile("def test_ok(): pass")
    result = pytester.runpytest()
    result.stdout.fnmatch_lines([
        "taotoken: mode=replay base_url=https://taotoken.net/api (default) key=sk-…1a2b (TAOTOKEN_API_KEY)"
        " sample_model=qwen-max (RL_SAMPLE_MODEL)",
        "taotoken: models=qwen-max (sample_model and eval_model) timeout=120 (default)*",
        "taotoken: OPENAI_BASE_URL is set but empty; treated as unset",
    ])
    assert KEY not in result.stdout.str()


def test_report_header_mode_live(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_ok(): pass")
    pytester.runpytest("--taotoken-live").stdout.fnmatch_lines(["taotoken: mode=live *key=(unset) (TAOTOKEN_API_KEY unset)*"])


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--taotoken-timeout=-1"], "ERROR: taotoken: timeout='-1' (from --taotoken-timeout) is negative. Fix: *"),
        (["--taotoken-samples=lots"], "ERROR: taotoken: samples='lots' (from --taotoken-samples) is not a whole number*"),
        (["--taotoken-config=nope.toml"], "ERROR: taotoken: config file nope.toml (from --taotoken-config) cannot be read*"),
        (["--taotoken-base-url=ftp://x"], "ERROR: taotoken: base_url (from --taotoken-base-url) uses the scheme 'ftp'*"),
        (["--taotoken-burst=-5"], "ERROR: taotoken: --taotoken-burst=-5 is out of range. Fix: give 0 (off)*"),
        (["--taotoken-concurrency-ratio=0"], "ERROR: taotoken: --taotoken-concurrency-ratio=0.0 is out of range*"),
        (["--taotoken-diversity-temperature=-1"], "ERROR: taotoken: --taotoken-diversity-temperature=-1.0 is out*"),
        (["--taotoken-live", "--taotoken-record"], "ERROR: taotoken: --taotoken-live and --taotoken-record were both*"),
    ],
)
def test_bad_values_stop_pytest_with_a_usage_error(pytester: pytest.Pytester, args: list[str], line: str) -> None:
    pytester.makepyfile("def test_ok(): pass")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([line])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_env_timeout_error_names_the_variable(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAOTOKEN_TIMEOUT", "-3")
    pytester.makepyfile("def test_ok(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: taotoken: timeout='-3' (from TAOTOKEN_TIMEOUT) is negative*"])


def test_fixtures_and_prefixed_aliases(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAOTOKEN_API_KEY", KEY)
    monkeypatch.setenv("RL_SAMPLE_MODEL", "qwen-max")
    monkeypatch.setenv("RL_EVAL_MODEL", "qwen-plus")
    pytester.makepyfile("""
        import httpx

        def test_plain(client, async_client, sample_model, eval_model, taotoken_settings):
            assert isinstance(client, httpx.Client) and isinstance(async_client, httpx.AsyncClient)
            assert str(client.base_url).rstrip("/") == "https://taotoken.net/api"
            assert client.headers["Authorization"] == "Bearer " + taotoken_settings.api_key
            assert client.timeout.read == 120
            assert (sample_model, eval_model) == ("qwen-max", "qwen-plus")
            assert "sk-" in repr(client) and taotoken_settings.api_key not in repr(client)

        def test_prefixed(taotoken_client, taotoken_async_client, taotoken_sample_model, taotoken_eval_model):
            assert taotoken_sample_model == "qwen-max" and taotoken_eval_model == "qwen-plus"

        def test_settings_are_frozen(taotoken_settings):
            import dataclasses, pytest
            with pytest.raises(dataclasses.FrozenInstanceError):
                taotoken_settings.timeout = 1
    """)
    pytester.runpytest("--taotoken-live").assert_outcomes(passed=3)


def test_own_fixture_named_client_wins_over_the_alias(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        import pytest

        @pytest.fixture
        def client():
            return "mine"
    """)
    pytester.makepyfile("""
        def test_it(client, taotoken_client):
            assert client == "mine"
            assert taotoken_client.settings.api_root == "https://taotoken.net/api"
    """)
    pytester.runpytest("--taotoken-live", "--taotoken-key-env=MY_KEY", "-p", "no:randomly").assert_outcomes(errors=1)


def test_missing_model_skips_with_the_requirement(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_it(sample_model): pass")
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*needs sample_model: set RL_SAMPLE_MODEL or OPENAI_MODEL or pass --taotoken-sample-model*"])


@pytest.mark.parametrize(
    ("key", "line"),
    [
        (None, "*taotoken: no API key: the key is read from the environment variable TAOTOKEN_API_KEY. Fix: export*"),
        ("", "*taotoken: no API key (TAOTOKEN_API_KEY is set but empty)*"),
        ("sk-xxxxxxxxxxxxxxxx", "*taotoken: the key in TAOTOKEN_API_KEY is a placeholder*"),
        ("YOUR_API_KEY", "*taotoken: the key in TAOTOKEN_API_KEY is a placeholder*"),
        ("sk-你的密钥", "*taotoken: the key in TAOTOKEN_API_KEY is a placeholder*"),
    ],
)
def test_missing_or_placeholder_key_fails_in_live_mode(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                      key: str | None, line: str) -> None:
    if key is not None:
        monkeypatch.setenv("TAOTOKEN_API_KEY", key)
    pytester.makepyfile("def test_it(client): pass")
    result = pytester.runpytest("--taotoken-live")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([line])


def test_a_url_password_and_query_values_never_reach_the_header(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_ok(): pass")
    result = pytester.runpytest("--taotoken-base-url=https://user:Secr3tPassw0rdXYZ@example.com/api/v1?key=sk-qqqqqqqqqqqq1234")
    text = result.stdout.str()
    assert "Secr3tPassw0rdXYZ" not in text and "qqqqqqqq" not in text
    result.stdout.fnmatch_lines(["taotoken: api_root=https://user:***@example.com/api"])


def test_replay_never_refuses_a_plain_http_base_url(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Replay sends nothing over the network, so an http:// LAN gateway in the shell must not break it."""
    monkeypatch.setenv("TAOTOKEN_API_KEY", KEY)
    pytester.makepyfile("def test_it(client): assert client.base_url.scheme == 'http'")
    pytester.runpytest("--taotoken-base-url=http://10.0.0.5:8000/v1").assert_outcomes(passed=1)


def test_the_package_level_diagnose_stays_the_function() -> None:
    import pytest_taotoken
    import pytest_taotoken.diagnosis  # importing the module must not shadow the function

    assert callable(pytest_taotoken.diagnose) and pytest_taotoken.diagnose is pytest_taotoken.diagnosis.diagnose
