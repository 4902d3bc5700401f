"""The registry of the doctor's checks, and the context they may consult.

A value check is ``(value, source, ctx) -> findings``: one idea, returning early when it does not
apply. :func:`value_check` registers it for one or more fields and refuses a duplicate name (as
Schemathesis does with its checks), so the set of checks is easy to list and to test. Checks that
need several values at once (consistency between sources, a proxy against ``NO_PROXY``, the
rollout settings of one file) are registered with :func:`cross_check` and yield
``(value, finding)`` pairs, the value saying where the finding belongs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ..findings import Finding
from .model import ConfigValue, SourceRead
from .probes import GitState, git_state, loopback_listening

ValueCheck = Callable[[ConfigValue, SourceRead, "Context"], Iterable[Finding]]
CrossCheck = Callable[[list[SourceRead], "Context"], Iterable[tuple[ConfigValue, Finding]]]


@dataclass
class Context:
    """What checks may consult besides the value: the environment, git and the loopback probe (cached)."""

    env: Mapping[str, str]
    git: Callable[[str], GitState] = git_state
    listening: Callable[[str, int], bool | None] | None = loopback_listening
    defined_in_files: dict[str, str] = field(default_factory=dict)
    _git_cache: dict[str, GitState] = field(default_factory=dict)
    _probe_cache: dict[tuple[str, int], bool | None] = field(default_factory=dict)

    def git_state(self, path: str) -> GitState:
        if path not in self._git_cache:
            self._git_cache[path] = self.git(path)
        return self._git_cache[path]

    def probe(self, host: str, port: int) -> bool | None:
        if self.listening is None:
            return None
        if (host, port) not in self._probe_cache:
            self._probe_cache[(host, port)] = self.listening(host, port)
        return self._probe_cache[(host, port)]

    def env_set(self, name: str) -> bool:
        return bool(self.env.get(name, "").strip())


_VALUE_CHECKS: dict[str, tuple[tuple[str, ...], ValueCheck]] = {}
_CROSS_CHECKS: dict[str, CrossCheck] = {}


def value_check(name: str, *fields: str) -> Callable[[ValueCheck], ValueCheck]:
    """Register a check for values of ``fields``; a second check of the same name is a bug."""

    def register(fn: ValueCheck) -> ValueCheck:
        if name in _VALUE_CHECKS:
            raise ValueError(f"a doctor check named {name!r} is already registered")
        _VALUE_CHECKS[name] = (fields, fn)
        return fn

    return register


def cross_check(name: str) -> Callable[[CrossCheck], CrossCheck]:
    """Register a check over all sources at once; a second check of the same name is a bug."""

    def register(fn: CrossCheck) -> CrossCheck:
        if name in _CROSS_CHECKS:
            raise ValueError(f"a doctor cross-check named {name!r} is already registered")
        _CROSS_CHECKS[name] = fn
        return fn

    return register


def registered_checks() -> list[str]:
    """The names of every value check and cross-check, in registration order."""
    return [*_VALUE_CHECKS, *_CROSS_CHECKS]


def check_values(read: SourceRead, ctx: Context) -> list[Finding]:
    """Every value check on every value of one source."""
    out: list[Finding] = []
    for value in read.values:
        if _empty_in_environment(value, out):
            continue
        for fields, fn in _VALUE_CHECKS.values():
            if value.field in fields:
                out.extend(fn(value, read, ctx))
    return out


def check_across(reads: list[SourceRead], ctx: Context) -> list[tuple[ConfigValue, Finding]]:
    return [pair for fn in _CROSS_CHECKS.values() for pair in fn(reads, ctx)]


def _empty_in_environment(value: ConfigValue, out: list[Finding]) -> bool:
    """A variable set but empty: the plugin treats it as unset, other tools read the empty text."""
    if value.file is not None or not isinstance(value.value, str) or value.value.strip():
        return False
    code = "key.empty" if value.field == "api_key" else "env.empty"
    out.append(value.finding(
        code, "warning", f"{value.name} is set but empty; pytest-taotoken treats it as unset, but other tools read"
        " the empty value (an empty key is answered with 401, an empty URL fails to connect)",
        f"unset it (`unset {value.name}`) or give it a value"))
    return True
