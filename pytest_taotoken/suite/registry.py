"""The check registry: one check, one idea, one clear message.

A check is a small function ``(ctx) -> None`` that raises :class:`CheckFailed` (or lets an
:class:`~pytest_taotoken.errors.ExchangeFailed` through) to fail, and calls ``pytest.skip`` with the
exact reason when it does not apply. :func:`check` registers it and refuses duplicate ids: the ids
are stable, and reports and users depend on them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import CheckContext

CheckFn = Callable[["CheckContext"], None]


@dataclass(frozen=True)
class Check:
    id: str
    fn: CheckFn
    doc: str
    opt_in: str | None = None  # name of the option that enables it, for opt-in checks


CHECKS: dict[str, Check] = {}


class CheckFailed(AssertionError):
    """A check's verdict: ``category`` names the cause (the diagnosis vocabulary), ``fix`` the remedy."""

    def __init__(self, category: str, summary: str, fix: str, evidence: str = "") -> None:
        text = f"[{category}] {summary}\nFix: {fix}"
        if evidence:
            text += f"\n{evidence}"
        super().__init__(text)
        self.category = category
        self.summary = summary
        self.fix = fix


def check(check_id: str, *, opt_in: str | None = None) -> Callable[[CheckFn], CheckFn]:
    def register(fn: CheckFn) -> CheckFn:
        existing = CHECKS.get(check_id)
        # The same function registering again is its module being re-imported (pytester restores
        # sys.modules between in-process runs): it replaces itself. Another function is a clash.
        if existing is not None and (existing.fn.__module__, existing.fn.__qualname__) != (fn.__module__, fn.__qualname__):
            raise ValueError(f"duplicate check id {check_id!r}")
        CHECKS[check_id] = Check(check_id, fn, (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else "", opt_in)
        return fn

    return register
