"""pytest-taotoken: prove that an OpenAI-compatible endpoint, key, model IDs and client settings work.

The public API is imported lazily so that having the plugin installed costs a test run almost nothing.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "Settings": "settings",
    "resolve_settings": "settings",
    "normalize_base_url": "urls",
    "join": "urls",
    "client_base_urls": "urls",
    "mask_key": "keys",
    "build_client": "client",
    "build_async_client": "client",
    "TaoTokenError": "errors",
    "ConfigError": "errors",
    "CassetteError": "errors",
    "ContractViolation": "errors",
    "ExchangeFailed": "errors",
    "diagnose": "diagnosis",
    "Diagnosis": "diagnosis",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_taotoken' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
