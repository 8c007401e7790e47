"""A stalled mc0 subscriber cannot make the bus hold more than ``ZBUS_MC0_PEER_BYTES``
(docs/eventbus.md, "mc0"), and what it misses is counted.

The bus runs as a process of its own so that its memory can be read from /proc (its
peak, VmHWM). The baseline is a first run of the same bus with the same load and an mc0
subscriber that reads along; in the second run the subscriber reads nothing, and the
bus may hold at most the documented bound more.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import zmq

from tests.support.bus_process import bus_process, memory_bytes
from tests.support.waiting import UNIT, wait_until
from zbus.eventbus.client import BusEndpoints, EventBusClient

ROOT = Path(__file__).resolve().parents[3]
MiB = 1024 * 1024
PEER_BYTES = 16 * MiB  # ZBUS_MC0_PEER_BYTES of the bus under test
EVENTS = 40_000  # 2 kB each: about 80 MB through mc0, five times the bound
BATCH = 500
PAYLOAD = os.urandom(2000)
# Two runs of one program differ a little in what they allocate (group commits and
# stream batches vary with scheduling): this much is allowed on top of the bound.
TOLERANCE = 24 * MiB
SLOW = 'zbus_eventbus_mc0_dropped_total{reason="slow_client"}'


@contextmanager
def _bus(data_dir: Path) -> Iterator[tuple[int, BusEndpoints, str, str]]:
    settings = {"ZBUS_MC0_PORT": "0", "ZBUS_MC0_PEER_BYTES": str(PEER_BYTES)}
    with bus_process(data_dir, settings) as (pid, ends):
        yield pid, BusEndpoints.from_info(ends), ends["admin"], ends["mc0"]


def _peak_rss(pid: int) -> int:
    return memory_bytes(pid, "VmHWM")


def _metrics(admin: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{admin}/metrics", timeout=10 * UNIT) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("zbus_eventbus_mc0_"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def _run(data_dir: Path, *, read: bool) -> tuple[int, dict[str, float], int]:
    """Publish EVENTS through the Event BUS door to one mc0 subscriber that reads along,
    or reads nothing: the bus's peak RSS once the door has handled every event, its mc0
    metrics, and how many MESSAGEs the subscriber read."""
    with _bus(data_dir) as (pid, ends, admin, mc0_endpoint):
        ctx: zmq.Context[Any] = zmq.Context()
        sub = ctx.socket(zmq.DEALER)
        sub.linger = 0
        if not read:
            sub.rcvhwm = 1  # stalled: ZeroMQ stops reading TCP after one message
            sub.rcvbuf = 4096
        sub.connect(mc0_endpoint)
        # A TTL of an hour: the bus must not drop the session of a reader that is silent.
        sub.send_multipart([b"", b"CONNECT", b"TTL", b"3600000", b"VERSION", b"0.2"])
        sub.send_multipart([b"", b"SUB", b"ID", b"s", b"", b"/load/"])
        assert sub.poll(int(10_000 * UNIT)) and sub.recv_multipart() == [b"", b"OK", b"ID", b"s"]
        got = [0]
        done = threading.Event()

        def reader() -> None:
            while not done.is_set():
                if sub.poll(100):
                    while True:
                        try:
                            sub.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        got[0] += 1

        thread = threading.Thread(target=reader, daemon=True)
        if read:
            thread.start()
        try:
            with EventBusClient(ends, producer="memory") as client:
                for n in range(0, EVENTS, BATCH):
                    client.publish_many(
                        [(f"/load/{i % 100}", PAYLOAD) for i in range(n, n + BATCH)],
                        confirm=True,
                    )
                    if read:  # paced: the reader stays within a batch or two of the bus
                        wait_until(lambda n=n: got[0] >= n - BATCH, 60, what="the reader")

            def handled() -> bool:
                m = _metrics(admin)
                sent = m.get('zbus_eventbus_mc0_messages_sent_total{verb="MESSAGE"}', 0)
                gap = m.get('zbus_eventbus_mc0_dropped_total{reason="stream_gap"}', 0)
                return sent + gap >= EVENTS

            wait_until(handled, 120, what="the door to handle every event")
            if read:
                wait_until(
                    lambda: got[0] >= EVENTS or bool(_metrics(admin).get(SLOW)),
                    60,
                    what="the reader to read every event",
                )
            peak = _peak_rss(pid)
            metrics = _metrics(admin)
        finally:
            done.set()
            if read:
                thread.join(10 * UNIT)
            sub.close(linger=0)
            ctx.term()
        return peak, metrics, got[0]


def test_a_stalled_mc0_subscriber_holds_at_most_its_byte_bound(tmp_path: Path) -> None:
    started = time.monotonic()
    baseline, metrics, read = _run(tmp_path / "reading", read=True)
    assert read == EVENTS
    assert metrics[SLOW] == 0
    stalled, metrics, _ = _run(tmp_path / "stalled", read=False)
    growth = (stalled - baseline) / MiB
    assert stalled <= baseline + PEER_BYTES + TOLERANCE, (
        f"the stalled run's bus peaked {growth:.0f} MiB above the baseline's "
        f"({baseline / MiB:.0f} MiB); bound {PEER_BYTES / MiB:.0f} MiB"
    )
    drops = metrics[SLOW]
    assert drops > EVENTS / 2  # most of it was dropped, and counted
    assert metrics["zbus_eventbus_mc0_waiting_bytes"] <= PEER_BYTES / 2
    print(
        f"mc0 memory: baseline peak {baseline / MiB:.1f} MiB, stalled {stalled / MiB:.1f} MiB"
        f" (ratio {stalled / baseline:.2f}), {drops:.0f} dropped,"
        f" {time.monotonic() - started:.1f} s"
    )
