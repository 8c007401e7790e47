"""PPPP across a failover of the leader (ADR 0010), against the Event BUS client's
failover in the same run.

Three replicas and etcd; a named ``PPPPSubscriber`` with a position store, given the
three doors, with the library's default times (first idle 0.1 s, idle 1 s, misses 4),
reads ``/check/`` while a writer publishes confirmed batches to it. The leader is killed
``ZBUS_BENCH_PPPP_FAILOVERS`` times (6); for each kill:

- **PPPP**: the time to the first message from the new leader's door;
- **baseline**: the time to the first confirm of a publish sent after the kill (the
  Event BUS client's own failover, the same kill).

Then the checks the issue asks of a PPPP subscriber with a position store: no duplicate,
no gap in the channel's sequences, every bus sequence in order [each 0].
"""

from __future__ import annotations

import itertools
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import zbus
from tests.bench import servers
from tests.support.replicas import ReplicaGroup, Writer, replica_group
from zbus.common.positions import SQLitePositionStore

FAILOVERS = int(os.environ.get("ZBUS_BENCH_PPPP_FAILOVERS", "6"))


@dataclass
class _Reader:
    doors: list[str]
    store_path: Path
    got: list[tuple[float, str, int, int]] = field(default_factory=list)  # when, door, seq, bus
    error: BaseException | None = None
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        store = SQLitePositionStore(self.store_path)
        try:
            with zbus.PPPPSubscriber(self.doors, "/check/", name="bench", store=store) as sub:
                while not self.stop.is_set():
                    m = sub.next(timeout=0.05)
                    if m is None:
                        continue
                    self.got.append((time.monotonic(), sub.endpoint, m.sequence, m.bus_sequence))
                    if m.position:
                        store.save(m.channel, m.position)
        except BaseException as exc:  # reported by main
            self.error = exc
        finally:
            store.close()


def _wait(until: Callable[[], bool], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not until():
        if time.monotonic() > deadline:
            raise TimeoutError("the PPPP failover round did not move on")
        time.sleep(0.01)


def _first_from(reader: _Reader, start: int, door: str) -> float | None:
    """When the first message from ``start`` on came through another door than ``door``."""
    return next((t for t, d, _, _ in reader.got[start:] if d != door), None)


def _next_confirm(client: zbus.EventBusClient, killed: float) -> float:
    """Seconds from ``killed`` to the first confirm of a publish sent after it."""
    while True:
        try:
            client.publish("/bench/failover", b"after", confirm=True, timeout=1.0)
            return time.monotonic() - killed
        except (zbus.PublishError, TimeoutError):
            if time.monotonic() - killed > 60:
                raise


def _rounds(group: ReplicaGroup, tmp: Path) -> tuple[list[float], list[float], _Reader]:
    reader = _Reader(group.doors(), tmp / "positions.db")
    reading = threading.Thread(target=reader.run, daemon=True)
    reading.start()
    writer = Writer(group)
    writing = threading.Thread(target=writer.run, daemon=True)
    writing.start()
    pppp: list[float] = []
    confirms: list[float] = []
    client = zbus.EventBusClient(group.endpoints(), producer="baseline")
    try:
        for _ in range(FAILOVERS):
            seen = len(reader.got)
            _wait(lambda seen=seen: len(reader.got) >= seen + 500)
            leader = group.leader(60, in_sync=3)
            door = leader.pppp_endpoint
            killed = time.monotonic()
            leader.kill()
            start = len(reader.got)
            confirms.append(_next_confirm(client, killed))
            _wait(lambda start=start, door=door: _first_from(reader, start, door) is not None)
            pppp.append((_first_from(reader, start, door) or killed) - killed)
            group.start(leader.name)
    finally:
        client.close()
        writer.stop.set()
        writing.join(60)
        reader.stop.set()
        reading.join(30)
    return pppp, confirms, reader


def main() -> bool:
    print("\n== PPPP across a failover of the leader (ADR 0010)")
    if servers.binary("etcd") is None:
        print("            etcd not installed: apt-get install etcd-server")
        return False
    tmp = Path(tempfile.mkdtemp(prefix="zbus-bench-pppp-failover-"))
    try:
        with replica_group(tmp / "group", ZBUS_LOG_LEVEL="WARNING") as group:
            group.leader(60, in_sync=3)
            pppp, confirms, reader = _rounds(group, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    live = [(seq, bus) for _, _, seq, bus in reader.got if seq > 0]
    buses = [bus for _, bus in live]
    duplicates = len(buses) - len(set(buses))
    gaps = sum(1 for (a, _), (b, _) in itertools.pairwise(live) if b != a + 1)
    in_order = buses == sorted(buses)
    print(
        f"pppp        kill -9 to the next message, {len(pppp)} rounds (s): "
        + ", ".join(f"{t:.2f}" for t in pppp)
    )
    print(
        "baseline    kill -9 to the next confirm (Event BUS client), same kills (s): "
        + ", ".join(f"{t:.2f}" for t in confirms)
    )
    p50, base = statistics.median(pppp), statistics.median(confirms)
    print(
        f"            p50 {p50:.2f} s against {base:.2f} s: {p50 / base:.2f}x "
        "(misses x idle, 4 s, to notice the dead door)"
    )
    ok = reader.error is None and duplicates == 0 and gaps == 0 and in_order
    print(
        f"messages    {len(live):,}: duplicates {duplicates}, gaps {gaps}, "
        f"in order {'yes' if in_order else 'NO'}"
        + (f", subscriber failed: {reader.error!r}" if reader.error else "")
        + f" [target 0, 0: {'yes' if ok else 'NO'}]"
    )
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
