"""The event bus's memory with a PPPP subscriber that never reads and never ACKs, for the
test of its bound and the benchmark of its cost.

The bus runs as a process of its own (its memory is read from /proc). A run publishes
``events`` events on ``/load/...`` through the Event BUS door with confirms, with or
without a stalled PPPP subscriber of ``/load/``: a DEALER that takes its SYNC, ACKs it,
then reads nothing more (its ZeroMQ queue holds one message, its kernel buffer 4 kB)
and stays silent. The door is told to wait long for it (``ZBUS_PPPP_IDLE``), so that it
stays connected, owing the whole run, the worst case.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq

from tests.support.bus_process import bus_process, memory_bytes
from tests.support.waiting import UNIT, Deadline, wait_until
from zbus.common.protocols import pppp
from zbus.eventbus.client import BusEndpoints, EventBusClient

CHANNEL = "/load/"
BATCH = 1000


@dataclass(frozen=True, slots=True)
class MemoryRun:
    peak: int  # VmHWM of the bus once the door took every event in, bytes
    rss: int  # VmRSS then
    backlog: int  # the channel's messages not ACKed (0 without a subscriber)


def _backlog(admin: str) -> int:
    with urllib.request.urlopen(f"{admin}/metrics", timeout=10 * UNIT) as resp:
        text = resp.read().decode()
    prefix = f'zbus_pppp_backlog{{channel="{CHANNEL}"}} '
    for line in text.splitlines():
        if line.startswith(prefix):
            return int(float(line[len(prefix) :]))
    return -1


def _stalled_subscriber(ctx: zmq.Context[Any], endpoint: str) -> zmq.Socket[Any]:
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.rcvhwm = 1
    sock.rcvbuf = 4096
    sock.routing_id = b"stalled"
    sock.connect(endpoint)
    sock.send_multipart(pppp.encode(pppp.Subscribe(CHANNEL)))
    deadline = Deadline(10, "the SYNC from the PPPP door")
    while True:  # the SYNC: no topic yet, so its end alone
        assert sock.poll(int(deadline.left() * 1000)), "no SYNC from the PPPP door"
        cmd = pppp.decode_from_publisher(sock.recv_multipart())
        if isinstance(cmd, pppp.Publish) and cmd.sequence == 0:
            break
    sock.send_multipart(pppp.encode(pppp.AckNack(CHANNEL, 0)))
    return sock


def run(
    data_dir: Path,
    settings: Mapping[str, str],
    *,
    events: int,
    payload: bytes,
    stalled: bool,
) -> MemoryRun:
    """Publish ``events`` events of ``payload`` (100 topics) to a bus with ``settings``."""
    settings = {"ZBUS_PPPP_PORT": "0", "ZBUS_PPPP_IDLE": "600", **settings}
    with bus_process(data_dir, settings) as (pid, ends):
        ctx: zmq.Context[Any] = zmq.Context()
        try:
            sub = _stalled_subscriber(ctx, ends["pppp"]) if stalled else None
            with EventBusClient(BusEndpoints.from_info(ends), producer="memory") as client:
                for n in range(0, events, BATCH):
                    client.publish_many(
                        [(f"/load/{i % 100}", payload) for i in range(n, min(events, n + BATCH))],
                        confirm=True,
                        timeout=60 * UNIT,
                    )
            want = events if stalled else -1
            wait_until(
                lambda: _backlog(ends["admin"]) == want, 60, what="the door took every event"
            )
            backlog = _backlog(ends["admin"])
            peak, rss = memory_bytes(pid, "VmHWM"), memory_bytes(pid)
            if sub is not None:
                sub.close(linger=0)
        finally:
            ctx.destroy(linger=0)
    return MemoryRun(peak, rss, max(0, backlog))


__all__ = ["CHANNEL", "MemoryRun", "run"]
