"""An mc0 client's heartbeat and its judgement of a lost session, on a fake clock; and
the door's outbox, bounded in bytes."""

from __future__ import annotations

import pytest

from zbus.eventbus.core.mc0 import FRAME_OVERHEAD, Liveness, Outbox, message_size


def test_noop_after_095_ttl_of_own_silence_lost_after_105_ttl_of_the_buss() -> None:
    live = Liveness(ttl=10.0)
    live.reset(100.0)
    assert not live.noop_due(109.4) and live.noop_due(109.5)
    live.sent(109.5)
    assert live.next_deadline() == pytest.approx(110.5)  # the bus's silence comes first
    assert not live.lost(110.4) and live.lost(110.5)
    live.heard(110.0)  # the bus's NOOP (it sends one after 9.5 s of its silence)
    assert not live.lost(120.4) and live.lost(120.5)
    assert live.next_deadline() == pytest.approx(119.0)


def test_the_outbox_keeps_order_and_bounds_bytes_per_connection() -> None:
    small = [b"", b"OK", b"ID", b"x" * 36]
    size = message_size(small)
    assert size == len(b"OKID") + 36 + 4 * FRAME_OVERHEAD
    outbox = Outbox(peer_bytes=3 * size)
    assert not outbox and not outbox.waiting(b"a")
    assert all(outbox.push(b"a", [*small[:3], bytes([n]) * 36]) for n in range(3))
    assert not outbox.push(b"a", small)  # past the bound: refused, nothing held
    assert outbox.push(b"b", small)  # another connection has its own bound
    assert outbox.held == 4 * size and outbox.bytes_for(b"a") == 3 * size
    assert outbox.first(b"a")[3] == bytes([0]) * 36
    outbox.pop(b"a")
    assert outbox.first(b"a")[3] == bytes([1]) * 36
    assert outbox.push(b"a", small)
    assert outbox.discard(b"a") == 3 and not outbox.waiting(b"a")
    outbox.pop(b"b")
    assert not outbox and outbox.held == 0
