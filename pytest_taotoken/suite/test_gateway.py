"""The collected module of the bundled suite: one test, parametrised over (check, model)."""

from __future__ import annotations

import pytest

# ``import a.b.c``, not ``from a.b import c``: the latter takes the package attribute and skips a
# re-import, so a fresh registry (pytester's in-process runs restore sys.modules) would stay empty.
import pytest_taotoken.suite.checks  # noqa: F401  (registers the checks)
from pytest_taotoken.plugin import get_settings
from pytest_taotoken.settings import Settings
from pytest_taotoken.suite.runner import cases, run_check


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "taotoken_case" in metafunc.fixturenames:
        pairs = cases(metafunc.config, get_settings(metafunc.config))
        metafunc.parametrize("taotoken_case", pairs, ids=[f"{c}[{m}]" for c, m in pairs])


def test_check(request: pytest.FixtureRequest, taotoken_settings: Settings, taotoken_case: tuple[str, str]) -> None:
    check, model = taotoken_case
    run_check(request, taotoken_settings, check, model)
