"""A PPPP subscriber that never reads and never ACKs cannot make the bus hold more than
the door's documented bound (docs/protocols/pppp.md, "Memory"): the cache
(``ZBUS_PPPP_CACHE_BYTES``), the buffer of log reads (an eighth of it, 1 MiB at least),
its messages in flight (``ZBUS_PPPP_PEER_BYTES`` at most, ZeroMQ's queue included), the
HEARTBEATs its queue can hold, and a mark per 256 messages not ACKed; never a copy of
every message it owes.

The baseline is a first run of the same bus with the same load and no PPPP subscriber;
the stalled run may hold at most that bound more (peak resident memory, VmHWM).
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.pppp_memory import run

MiB = 1024 * 1024
CACHE_BYTES = 8 * MiB
PEER_BYTES = 8 * MiB
EVENTS = 100_000  # 1 kB each: about 100 MB owed to the stalled subscriber
PAYLOAD = os.urandom(1000)
SETTINGS = {
    "ZBUS_MAX_EVENT_BYTES": str(64 * 1024),
    "ZBUS_PPPP_CACHE_BYTES": str(CACHE_BYTES),
    "ZBUS_PPPP_PEER_BYTES": str(PEER_BYTES),
}
QUEUED_BEATS = (10_000 + 256) * 200  # HEARTBEATs a queue of a window and a margin holds
BOUND = (
    CACHE_BYTES + max(MiB, CACHE_BYTES // 8) + PEER_BYTES + QUEUED_BEATS + (EVENTS // 256 + 1) * 100
)
# Two runs of one program differ a little in what they allocate (group commits and
# stream batches vary with scheduling): this much is allowed on top of the bound.
TOLERANCE = 24 * MiB


def test_a_stalled_pppp_subscriber_holds_at_most_the_doors_bound(tmp_path: Path) -> None:
    baseline = run(tmp_path / "none", SETTINGS, events=EVENTS, payload=PAYLOAD, stalled=False)
    stalled = run(tmp_path / "stalled", SETTINGS, events=EVENTS, payload=PAYLOAD, stalled=True)
    assert stalled.backlog == EVENTS  # it owes every message: nothing was ACKed or dropped
    growth = (stalled.peak - baseline.peak) / MiB
    assert stalled.peak <= baseline.peak + BOUND + TOLERANCE, (
        f"with a stalled PPPP subscriber the bus peaked {growth:.0f} MiB above the baseline "
        f"({baseline.peak / MiB:.0f} MiB); bound {BOUND / MiB:.0f} MiB"
    )
