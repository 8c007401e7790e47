"""The mc0 door's settings: off unless ZBUS_MC0_PORT is set, and a byte bound that can
hold the largest messages."""

from __future__ import annotations

import pytest

from zbus.common.settings import ConfigError
from zbus.eventbus.core.flow import hwm_for
from zbus.eventbus.core.mc0 import message_bytes, smallest_peer_bytes
from zbus.eventbus.server.config import EventBusSettings


def test_the_door_is_off_unless_its_port_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZBUS_MC0_PORT", raising=False)
    assert EventBusSettings.load([]).mc0_port is None
    monkeypatch.setenv("ZBUS_MC0_PORT", "61616")
    assert EventBusSettings.load([]).mc0_port == 61616
    assert EventBusSettings.load(["--mc0-port", "0"]).mc0_port == 0  # any free port


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--mc0-port", "65536"], "mc0_port"),
        (["--mc0-port", "-1"], "mc0_port"),
        (["--mc0-port", "0", "--mc0-peer-bytes", "1000000"], "mc0_peer_bytes must be at least"),
        (["--mc0-port", "0", "--max-message-bytes", "100000"], "max_message_bytes"),
    ],
)
def test_bad_mc0_settings_are_refused_by_name(args: list[str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        EventBusSettings.load(args)


def test_the_default_bound_holds_dozens_of_the_largest_messages() -> None:
    settings = EventBusSettings.load(["--mc0-port", "0"])
    limits = settings.mc0_limits()
    assert limits.max_data_bytes == settings.max_event_bytes == 1024 * 1024
    size = message_bytes(limits)
    assert hwm_for(settings.mc0_peer_bytes // 2, size) >= 16
    assert smallest_peer_bytes(limits) == 4 * size < settings.mc0_peer_bytes
    # Off, a too small bound is nobody's business.
    EventBusSettings.load(["--mc0-peer-bytes", "1"])
