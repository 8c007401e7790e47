"""The PPPP door's settings: off unless ZBUS_PPPP_PORT is set, ADR 0006's defaults, and
ranges refused by name."""

from __future__ import annotations

import pytest

from zbus.common.settings import ConfigError
from zbus.eventbus.server.config import EventBusSettings


def test_the_door_is_off_unless_its_port_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZBUS_PPPP_PORT", raising=False)
    assert EventBusSettings.load([]).pppp_port is None
    monkeypatch.setenv("ZBUS_PPPP_PORT", "5560")
    assert EventBusSettings.load([]).pppp_port == 5560


def test_the_defaults_are_the_adrs() -> None:
    s = EventBusSettings.load(["--pppp-port", "0"])
    assert (s.pppp_first_idle, s.pppp_idle, s.pppp_misses, s.pppp_grace) == (0.1, 1.0, 4, 300.0)
    assert (s.pppp_window, s.pppp_max_channels, s.pppp_max_subscribers) == (10_000, 64, 10_000)
    assert s.pppp_peer_bytes == s.pppp_cache_bytes == 64 * 1024 * 1024


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--pppp-port", "65536"], "pppp_port"),
        (["--pppp-misses", "1"], "pppp_misses"),
        (["--pppp-misses", "11"], "pppp_misses"),
        (["--pppp-first-idle", "0"], "pppp_first_idle"),
        (["--pppp-grace", "-1"], "pppp_grace"),
        (["--pppp-window", "0"], "pppp_window"),
        (["--pppp-cache-bytes", "1000"], "pppp_cache_bytes"),
        (["--pppp-max-channels", "0"], "pppp_max_channels"),
        (["--pppp-max-subscribers", "0"], "pppp_max_subscribers"),
        (["--pppp-port", "0", "--pppp-idle", "0.05"], "pppp_idle .* must be at least"),
        (["--pppp-port", "0", "--pppp-peer-bytes", "1000"], "pppp_peer_bytes must be at least"),
    ],
)
def test_bad_pppp_settings_are_refused_by_name(args: list[str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        EventBusSettings.load(args)
