"""Shared test configuration: Hypothesis profiles.

``default`` is small so CI stays fast; ``ci`` is the nightly-size profile
(``pytest --hypothesis-profile=ci``).
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile("default", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("default")
