"""Test set-up: 8 simulated CPU devices (before JAX is imported) and hypothesis profiles.

``HYPOTHESIS_PROFILE=thorough`` runs many more examples and the exhaustive pair sweeps in full;
the default ``ci`` profile keeps the suite fast on a 2-core machine.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "ci", max_examples=40, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough", max_examples=1000, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

THOROUGH = os.environ.get("HYPOTHESIS_PROFILE", "ci") == "thorough"
