"""Helpers for PPPP tests: a raw subscriber (a DEALER speaking the codec) and metrics."""

from __future__ import annotations

import sqlite3
import urllib.request
import uuid as uuidlib
from pathlib import Path
from typing import Any

import zmq
from prometheus_client.parser import text_string_to_metric_families

from tests.support.waiting import UNIT, Deadline
from zbus import EventBusClient
from zbus.common.protocols import pppp
from zbus.common.protocols.pppp_event import EventPayload, SyncEnd, decode_payload

# Short times, so that silence and grace show within a test; the client uses the same.
TIMES = {"first_idle": 0.05, "idle": 0.25, "misses": 4}
BUS_TIMES = {f"pppp_{k}": v for k, v in TIMES.items()}
BUS_ENV = {f"ZBUS_PPPP_{k.upper()}": str(v) for k, v in TIMES.items()}


def new_uuids(n: int) -> list[str]:
    return [str(uuidlib.uuid4()) for _ in range(n)]


def publish(client: EventBusClient, topic: str, uuids: list[str]) -> None:
    """Confirmed, so that every event is in the log before this returns."""
    for i in range(0, len(uuids), 1000):
        chunk = uuids[i : i + 1000]
        client.publish_many([(topic, b"d", u) for u in chunk], confirm=True, timeout=30 * UNIT)


class RawSubscriber:
    """A DEALER with a fixed identity that sends and reads PPPP frames, ACKing by hand."""

    def __init__(self, ctx: zmq.Context[Any], endpoint: str, name: bytes) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.routing_id = name
        self.sock.connect(endpoint)
        self.name = name

    def send(self, cmd: pppp.PPPPCommand | list[bytes]) -> None:
        self.sock.send_multipart(cmd if isinstance(cmd, list) else pppp.encode(cmd))

    def recv(self, timeout: float = 10.0) -> pppp.PublisherCommand:
        if not self.sock.poll(int(timeout * UNIT * 1000)):
            raise AssertionError(f"{self.name!r}: nothing within {timeout * UNIT:g} s")
        return pppp.decode_from_publisher(self.sock.recv_multipart())

    def publish(self, timeout: float = 10.0) -> tuple[pppp.Publish, EventPayload | SyncEnd]:
        """The next PUBLISH (heartbeats skipped) and what it carries."""
        deadline = Deadline(timeout, f"a PUBLISH to {self.name!r}")
        while True:
            cmd = self.recv(deadline.left() / UNIT)
            if isinstance(cmd, pppp.Publish):
                return cmd, decode_payload(cmd)

    def sync(self, channel: str) -> tuple[list[EventPayload], SyncEnd]:
        """SUBSCRIBE and read the SYNC up to its end; ACK it."""
        self.send(pppp.Subscribe(channel))
        items: list[EventPayload] = []
        while True:
            cmd, got = self.publish()
            assert cmd.sequence == 0, cmd
            if isinstance(got, SyncEnd):
                assert got.items == len(items)
                self.send(pppp.AckNack(channel, got.head))
                return items, got
            items.append(got)

    def messages(self, n: int, channel: str, *, ack: bool = True) -> list[tuple[int, EventPayload]]:
        """The next ``n`` PUBLISHes of ``channel`` as (sequence, event); ACKed as read."""
        out = []
        while len(out) < n:
            cmd, got = self.publish()
            assert isinstance(got, EventPayload), got
            out.append((cmd.sequence, got))
            if ack:
                self.send(pppp.AckNack(channel, cmd.sequence))
        return out

    def quiet(self, timeout: float = 0.0) -> bool:
        return not self.sock.poll(int(timeout * 1000))

    def close(self) -> None:
        self.sock.close(linger=0)


def metrics(admin_url: str) -> dict[str, float]:
    """Every zbus_pppp_* sample, as ``name{label=value}`` -> value."""
    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=10 * UNIT) as resp:
        text = resp.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("zbus_pppp"):
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return out


def stored_position(data_dir: Path, name: str) -> int:
    """The position the door has stored for ``name`` (its SQLite file, read-only)."""
    path = data_dir / "pppp.sqlite"
    if not path.exists():
        return -1
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            row = db.execute(
                "SELECT max(acked) FROM positions WHERE identity = ?", (name.encode(),)
            ).fetchone()
    except sqlite3.OperationalError:
        return -1
    return -1 if row is None or row[0] is None else int(row[0])
