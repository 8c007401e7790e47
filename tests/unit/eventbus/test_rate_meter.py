"""The admin API's publish rate, from samples of the stored-events counter."""

from __future__ import annotations

import pytest

from zbus.eventbus.server.metrics import RateMeter


def test_no_rate_before_two_samples() -> None:
    meter = RateMeter()
    assert meter.rate() == 0.0
    meter.sample(0.0, 100)
    assert meter.rate() == 0.0


def test_the_rate_over_the_window() -> None:
    meter = RateMeter(window=10.0)
    for t in range(30):
        meter.sample(float(t), 50.0 * t if t < 19 else 950.0 + 10.0 * (t - 19))
    # The samples older than the window are gone: the rate is the recent one's.
    assert meter.rate() == pytest.approx(10.0)


def test_the_same_instant_twice_gives_no_rate() -> None:
    meter = RateMeter()
    meter.sample(5.0, 1)
    meter.sample(5.0, 9)
    assert meter.rate() == 0.0
