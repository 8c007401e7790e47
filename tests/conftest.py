"""Suite-wide settings: Hypothesis profiles and the garbage-in budget."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# Garbage-in tests ask for FUZZ_EXAMPLES examples per protocol; CI runs the full budget.
FUZZ_EXAMPLES = int(os.environ.get("ZBUS_FUZZ_EXAMPLES", "10000"))

settings.register_profile(
    "default",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("default")
