"""The cost of one lagging PPPP subscriber: bus memory with 1,000,000 messages not
ACKed [at most the door's bound more than the same run with no PPPP subscriber].

Two runs of a bus process with its default settings (the PPPP door on): each publishes
``ZBUS_BENCH_PPPP_MEMORY_EVENTS`` events of 100 bytes (default 1,000,000) on 100 topics
with confirms; in the second a PPPP subscriber of their channel takes its SYNC and then
never reads and never ACKs (tests/support/pppp_memory.py). Printed: the bus's peak
resident memory (VmHWM) of both once the door took every event in, and the difference
against the bound of docs/protocols/pppp.md ("Memory"): the cache, the buffer of log
reads, ZeroMQ's queue towards the subscriber and a mark per 256 messages owed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from tests.support.pppp_memory import run
from zbus.eventbus.core.pppp import QUEUE_MARGIN
from zbus.eventbus.server.config import EventBusSettings

EVENTS = int(os.environ.get("ZBUS_BENCH_PPPP_MEMORY_EVENTS", "1000000"))
PAYLOAD = os.urandom(100)
MiB = 1024 * 1024


def main() -> bool:
    print("\n== event bus memory, a PPPP subscriber that never ACKs")
    s = EventBusSettings()
    bound = s.pppp_cache_bytes + max(MiB, s.pppp_cache_bytes // 8) + s.pppp_peer_bytes
    bound += (EVENTS // 256 + 1) * 100 + (s.pppp_window + QUEUE_MARGIN) * 200  # HEARTBEATs
    peaks = {}
    for stalled in (False, True):
        tmp = Path(tempfile.mkdtemp(prefix="zbus-bench-ppppmem-"))
        try:
            start = time.perf_counter()
            got = run(tmp, {}, events=EVENTS, payload=PAYLOAD, stalled=stalled)
            took = time.perf_counter() - start
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        peaks[stalled] = got.peak
        what = f"stalled, {got.backlog:,} not ACKed" if stalled else "no PPPP subscriber"
        print(
            f"bus peak RSS, {what + ':':<34} {got.peak / MiB:>6.0f} MiB  "
            f"(RSS {got.rss / MiB:.0f} MiB; {EVENTS:,} events in {took:.1f} s)"
        )
    extra = peaks[True] - peaks[False]
    print(
        f"the lagging subscriber costs {extra / MiB:+.0f} MiB: {extra / EVENTS:.0f} bytes a "
        f"message owed; bound {bound / MiB:.0f} MiB, {extra / bound:.2f} of it [<= 1.00]"
    )
    return extra <= bound


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
