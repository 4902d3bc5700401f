"""pytest glue only: options, ini keys, markers, fixtures and the report header.

Everything else lives in importable modules; heavy ones (httpx clients, recording, contracts) are
imported inside the fixtures and hooks that need them, so a run that never uses the plugin pays
almost nothing for having it installed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

from .errors import ConfigError
from .keys import is_placeholder
from .settings import FIELDS, Mode, Settings, resolve_settings

if TYPE_CHECKING:
    from .client import TaoTokenAsyncClient, TaoTokenClient
    from .testing import FakeGateway

SETTINGS_KEY = pytest.StashKey[Settings]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("taotoken", "taotoken: check an OpenAI-compatible gateway (TaoToken by default)")
    group.addoption("--taotoken-live", action="store_true", default=False,
                    help="send requests to the real endpoint; write no cassette")
    group.addoption("--taotoken-record", action="store_true", default=False,
                    help="send requests to the real endpoint and (re)write the tests' cassettes")
    group.addoption("--taotoken-config", metavar="PATH", default=None,
                    help="TOML file with [model] base_url, api_key_env, sample_model, eval_model and [rollout] ...")
    group.addoption("--taotoken-allow-http", action="store_true", default=False,
                    help="allow http:// to a non-loopback host (the key travels in clear)")
    group.addoption("--taotoken-doctor", action="store_true", default=False,
                    help="check config files (the given paths, or the known names under rootdir) and the environment")
    group.addoption("--taotoken-suite", action="store_true", default=False,
                    help="add the bundled gateway checks to the collection (alone, when no path is given)")
    group.addoption("--taotoken-report", metavar="PATH", default=None,
                    help="write the JSON report of the checks to PATH (atomically, even when tests fail)")
    group.addoption("--taotoken-concurrency-ratio", type=float, default=2.0, metavar="RATIO",
                    help="chat.concurrency passes when N parallel requests take <= RATIO x one request (default 2.0)")
    group.addoption("--taotoken-burst", type=int, default=0, metavar="N",
                    help="opt in to rate_limit.retry_after: send N requests at once and check any 429")
    group.addoption("--taotoken-diversity-temperature", type=float, default=0.8, metavar="T",
                    help="temperature of the chat.diversity samples (default 0.8)")
    helps = {
        "base_url": "API root of the gateway (default https://taotoken.net/api)",
        "key_env": "name of the environment variable that holds the API key (default TAOTOKEN_API_KEY)",
        "sample_model": "model ID used for sampling",
        "eval_model": "model ID used for evaluation",
        "models": "comma-separated model IDs the suite checks (default: sample and eval model)",
        "timeout": "request timeout in seconds (default 120)",
        "max_retries": "retries on 408/409/429/5xx and connection errors (default 2)",
        "samples": "parallel samples per prompt for the concurrency and diversity checks (default 4)",
        "cassette_dir": "folder of the cassettes (default cassettes)",
    }
    for spec in FIELDS:
        assert spec.cli and spec.ini
        group.addoption(spec.cli, dest=f"taotoken_{spec.name}", default=None, metavar=spec.name.upper(),
                        help=helps[spec.name])
        parser.addini(spec.ini, help=helps[spec.name], default=None)
    parser.addini("taotoken_config", help="TOML config file (see --taotoken-config)", default=None)


def _mode(config: pytest.Config) -> Mode:
    if config.getoption("taotoken_record"):
        return "record"
    return "live" if config.getoption("taotoken_live") else "replay"


def _resolve(config: pytest.Config) -> Settings:
    cli = {spec.name: config.getoption(f"taotoken_{spec.name}") for spec in FIELDS}
    ini = {spec.name: config.getini(spec.ini) for spec in FIELDS if spec.ini}
    config_path = config.getoption("taotoken_config")
    config_source = "--taotoken-config"
    if not config_path and config.getini("taotoken_config"):
        config_path = str(config.rootpath / str(config.getini("taotoken_config")))
        config_source = "ini taotoken_config"
    return resolve_settings(cli, ini, os.environ, config_path=config_path, config_source=config_source,
                            mode=_mode(config), allow_http=bool(config.getoption("taotoken_allow_http")))


def _check_suite_options(config: pytest.Config) -> None:
    """The suite's own flags: one clean line naming the flag and the fix, before anything runs."""
    if config.getoption("taotoken_live") and config.getoption("taotoken_record"):
        raise pytest.UsageError("taotoken: --taotoken-live and --taotoken-record were both given. Fix: pass"
                                " --taotoken-record to rewrite cassettes, or --taotoken-live to write none")
    checks: list[tuple[str, float, Callable[[float], bool], str]] = [
        ("--taotoken-burst", config.getoption("taotoken_burst"), lambda v: v >= 0, "give 0 (off) or a number of requests"),
        ("--taotoken-concurrency-ratio", config.getoption("taotoken_concurrency_ratio"), lambda v: v > 0,
         "give a ratio above 0, e.g. 2.0"),
        ("--taotoken-diversity-temperature", config.getoption("taotoken_diversity_temperature"), lambda v: 0 < v <= 2,
         "give a temperature above 0 and at most 2, e.g. 0.8"),
    ]
    for flag, value, ok, fix in checks:
        if not ok(value):
            raise pytest.UsageError(f"taotoken: {flag}={value} is out of range. Fix: {fix}")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "taotoken_live: this test talks to the endpoint (replayed from its cassette "
                            "by default, real with --taotoken-live/--taotoken-record)")
    config.addinivalue_line("markers", "taotoken_cassette(name): share the cassette `name` between tests")
    _check_suite_options(config)
    try:
        config.stash[SETTINGS_KEY] = _resolve(config)
        if config.stash[SETTINGS_KEY].talks_to_endpoint:
            from .client import check_transport_security

            check_transport_security(config.stash[SETTINGS_KEY])  # refuse a key over http:// before any test
    except ConfigError as exc:
        if not config.getoption("taotoken_doctor"):
            raise pytest.UsageError(f"taotoken: {exc}") from None
        config.stash[SETTINGS_KEY] = resolve_settings({}, {}, {})  # the doctor reports the bad value itself
    from .recording import PLUGIN_NAME, RecordingPlugin

    config.pluginmanager.register(RecordingPlugin(config, config.stash[SETTINGS_KEY]), PLUGIN_NAME)
    if config.getoption("taotoken_suite"):
        _add_suite(config)
    from .report import ReportPlugin

    config.pluginmanager.register(
        ReportPlugin(config, config.stash[SETTINGS_KEY], config.getoption("taotoken_report")), "taotoken-report")
    if config.getoption("taotoken_doctor"):
        from .doctor.pytest_plugin import DoctorPlugin

        config.pluginmanager.register(DoctorPlugin(config), "taotoken-doctor")


def _add_suite(config: pytest.Config) -> None:
    """Add the suite module; when no path was given on the command line, collect the suite alone."""
    from .suite import SUITE_MODULE

    if config.args_source == pytest.Config.ArgsSource.ARGS:
        config.args.append(str(SUITE_MODULE))
    else:
        config.args[:] = [str(SUITE_MODULE)]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Suite items read ``suite/<check>[<model>]``: stable ids that reports and users depend on."""
    for item in items:
        if getattr(getattr(item, "module", None), "__name__", "") == "pytest_taotoken.suite.test_gateway":
            case = getattr(getattr(item, "callspec", None), "params", {}).get("taotoken_case")
            if isinstance(case, tuple):
                check, model = case
                _set_nodeid(item, f"suite/{check}[{model}]")


def _set_nodeid(item: pytest.Item, nodeid: str) -> None:
    # pytest has no public way to name an item; 9.x keeps a structured ``_id``, 8.x a ``_nodeid``.
    if hasattr(item, "_id"):
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(nodeid)
    else:  # pragma: no cover - pytest 8
        item._nodeid = nodeid  # type: ignore[attr-defined]


def pytest_report_header(config: pytest.Config) -> list[str]:
    settings = config.stash.get(SETTINGS_KEY, None)
    return settings.header_lines() if settings else []


def get_settings(config: pytest.Config) -> Settings:
    return config.stash[SETTINGS_KEY]


def require_key(settings: Settings) -> None:
    """In live and record modes, a missing or placeholder key fails with how to set it."""
    if not settings.talks_to_endpoint:
        return
    var = settings.sources.get("api_key", settings.key_env)
    if not settings.api_key:
        empty = f" ({var} is set but empty)" if var in settings.empty_env else ""
        pytest.fail(
            f"taotoken: no API key{empty}: the key is read from the environment variable {settings.key_env}."
            f" Fix: export {settings.key_env}=<your key> in the shell that runs pytest (in containers and xdist"
            " workers, check that it is passed to the child process).",
            pytrace=False,
        )
    if is_placeholder(settings.api_key):
        pytest.fail(
            f"taotoken: the key in {var} is a placeholder, not a real key. Fix: export {var}=<your real key> from"
            " the gateway's console.",
            pytrace=False,
        )


def require_endpoint(request: pytest.FixtureRequest, settings: Settings) -> None:
    """A fixture that talks to the endpoint: check the key live, or answer from the test's cassette."""
    require_key(settings)
    from .recording import ensure_cassette

    ensure_cassette(request)


@pytest.fixture(scope="session")
def taotoken_settings(pytestconfig: pytest.Config) -> Settings:
    """The resolved, frozen settings (with the source of every value)."""
    return get_settings(pytestconfig)


@pytest.fixture
def taotoken_client(request: pytest.FixtureRequest, taotoken_settings: Settings) -> Iterator[TaoTokenClient]:
    """An ``httpx.Client`` on the API root with auth, timeout, retries and diagnosis."""
    from .client import build_client

    require_endpoint(request, taotoken_settings)
    with build_client(taotoken_settings) as client:
        yield client


@pytest.fixture
def taotoken_async_client(request: pytest.FixtureRequest, taotoken_settings: Settings) -> Iterator[TaoTokenAsyncClient]:
    """An ``httpx.AsyncClient`` on the API root with auth, timeout, retries and diagnosis.

    A plain fixture (not ``async``), so it works under pytest-asyncio, anyio or ``asyncio.run`` alike;
    it is closed after the test.
    """
    import asyncio

    from .client import build_async_client

    require_endpoint(request, taotoken_settings)
    client = build_async_client(taotoken_settings)
    yield client
    if not client.is_closed:
        with contextlib.suppress(RuntimeError):
            asyncio.run(client.aclose())


def _model(settings: Settings, name: str) -> str:
    value: str | None = getattr(settings, name)
    if not value:
        spec = next(s for s in FIELDS if s.name == name)
        pytest.skip(f"needs {name}: set {' or '.join(spec.env)} or pass {spec.cli}")
    return value


@pytest.fixture(scope="session")
def taotoken_sample_model(taotoken_settings: Settings) -> str:
    """The model ID used for sampling; skips with the requirement when none is configured."""
    return _model(taotoken_settings, "sample_model")


@pytest.fixture(scope="session")
def taotoken_eval_model(taotoken_settings: Settings) -> str:
    """The model ID used for evaluation; skips with the requirement when none is configured."""
    return _model(taotoken_settings, "eval_model")


@pytest.fixture
def client(taotoken_client: TaoTokenClient) -> TaoTokenClient:
    """Alias of ``taotoken_client``."""
    return taotoken_client


@pytest.fixture
def async_client(taotoken_async_client: TaoTokenAsyncClient) -> TaoTokenAsyncClient:
    """Alias of ``taotoken_async_client``."""
    return taotoken_async_client


@pytest.fixture(scope="session")
def sample_model(taotoken_sample_model: str) -> str:
    """Alias of ``taotoken_sample_model``."""
    return taotoken_sample_model


@pytest.fixture(scope="session")
def eval_model(taotoken_eval_model: str) -> str:
    """Alias of ``taotoken_eval_model``."""
    return taotoken_eval_model


@pytest.fixture
def fake_gateway() -> Iterator[FakeGateway]:
    """A started :class:`~pytest_taotoken.testing.FakeGateway` on 127.0.0.1 (scenario ``ok``), stopped after the test.

    Point a client at ``fake_gateway.base_url``; set ``fake_gateway.scenario`` or ``fake_gateway.script(...)``.
    """
    from .testing import FakeGateway

    with FakeGateway() as gateway:
        yield gateway

