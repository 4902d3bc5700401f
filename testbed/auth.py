"""LiteLLM ``custom_auth`` hook: static keys, so the proxy needs no database.

Without a database LiteLLM cannot check virtual keys: a wrong key gets 400 "No connected db."
and a missing key a plain-text 500. With this hook a wrong or missing key gets a real 401, and
the rate-limited key carries an ``rpm_limit`` that LiteLLM's own in-memory limiter enforces, so a
burst gets a real 429 with ``retry-after``.

LiteLLM loads this file by path (``general_settings.custom_auth: auth.user_api_key_auth``,
resolved beside the config file), so it imports nothing from the project: ``testbed.bed`` passes
the (fake) keys and the limit in ``TESTBED_*`` variables; the defaults match bed.py's.
"""

from __future__ import annotations

import os
from typing import Any

from fastapi import Request  # type: ignore[import-not-found]
from litellm.proxy._types import ProxyErrorTypes, ProxyException, UserAPIKeyAuth  # type: ignore[import-not-found]

GOOD_KEY = os.environ.get("TESTBED_GOOD_KEY", "sk-testbed-good-00000000000000a1")
LIMITED_KEY = os.environ.get("TESTBED_LIMITED_KEY", "sk-testbed-limited-000000000000b2")
LIMITED_RPM = int(os.environ.get("TESTBED_LIMITED_RPM", "2"))

_KEYS: dict[str, dict[str, Any]] = {
    GOOD_KEY: {"key_alias": "testbed-good"},
    LIMITED_KEY: {"key_alias": "testbed-limited", "rpm_limit": LIMITED_RPM},
}


async def user_api_key_auth(request: Request, api_key: str) -> UserAPIKeyAuth:
    """Accept the two static keys; anything else gets a 401 with an OpenAI-shaped error body.

    It must raise ``ProxyException``: LiteLLM 1.108.7 passes any other exception through a
    database-outage check that imports ``prisma`` (not installed without a database), and the
    client then gets a plain-text 500 instead of a 401.
    """
    key = api_key.removeprefix("Bearer ").strip() if api_key else ""
    extra = _KEYS.get(key)
    if extra is None:
        raise ProxyException(
            message="Authentication Error: invalid API key (the test bed accepts only its static keys)",
            type=ProxyErrorTypes.auth_error,
            param="api_key",
            code=401,
        )
    return UserAPIKeyAuth(api_key=key, **extra)
