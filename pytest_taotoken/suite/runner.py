"""Run one check for one model: cassette, client, context, and what the report needs afterwards."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..settings import Settings
from . import NO_MODEL, PROPERTY
from .context import CheckContext, SuiteOptions
from .registry import CHECKS


def suite_options(config: pytest.Config) -> SuiteOptions:
    return SuiteOptions(
        concurrency_ratio=float(config.getoption("taotoken_concurrency_ratio")),
        burst=int(config.getoption("taotoken_burst") or 0),
        diversity_temperature=float(config.getoption("taotoken_diversity_temperature")),
    )


def cases(config: pytest.Config, settings: Settings) -> list[tuple[str, str]]:
    """(check, model) pairs in a stable order; opt-in checks only when their option is given."""
    options = suite_options(config)
    enabled = [c.id for c in CHECKS.values() if c.opt_in is None or getattr(options, c.opt_in.removeprefix("taotoken_"))]
    models = settings.models or (NO_MODEL,)
    return [(check, model) for check in enabled for model in models]


def cassette_path(config: pytest.Config, settings: Settings, check: str, model: str) -> Path:
    """``<cassette_dir>/suite/<check>/<model>.yaml``, with a relative cassette_dir taken from rootdir."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in model)
    return config.rootpath / settings.cassette_dir / "suite" / check / f"{safe}.yaml"


@contextlib.contextmanager
def _cassette(request: pytest.FixtureRequest, settings: Settings, check: str, model: str) -> Iterator[None]:
    if settings.mode == "live":
        yield
        return
    from ..recording import use_cassette

    command = f'pytest --taotoken-suite --taotoken-record --taotoken-models "{model}" -k "{check}"'
    with use_cassette(cassette_path(request.config, settings, check, model), settings=settings, command=command):
        yield


def run_check(request: pytest.FixtureRequest, settings: Settings, check: str, model: str) -> None:
    from ..client import build_client
    from ..plugin import require_key

    if model == NO_MODEL:
        pytest.skip("needs a model: set RL_SAMPLE_MODEL / RL_EVAL_MODEL or pass --taotoken-models a,b")
    require_key(settings)
    fn = CHECKS[check].fn
    skipped: BaseException | None = None
    ctx: CheckContext | None = None
    client = None
    try:  # the report entry is written whatever happens, a corrupt cassette included
        with _cassette(request, settings, check, model), build_client(settings) as client:
            ctx = CheckContext(check, model, settings, client, suite_options(request.config))
            try:
                fn(ctx)
            except pytest.skip.Exception as exc:
                skipped = exc  # a verdict reached after real exchanges: the recording is kept
    finally:
        request.node.user_properties.append((PROPERTY, {
            "check": check,
            "model": model,
            "details": ctx.details if ctx is not None else {},
            "tokens": ctx.tokens if ctx is not None else {"prompt": 0, "completion": 0},
            "requests": (client.stats.requests if client is not None else 0)
            + (ctx.extra_requests if ctx is not None else 0),
            "retries": client.stats.retries if client is not None else 0,
        }))
    if skipped is not None:
        raise skipped
