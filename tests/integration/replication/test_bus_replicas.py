"""Three event bus replicas and a real etcd, as processes, under the faults of issue 21.

A checker in the manner of Jepsen's total-queue: every publish attempt and every confirm
is recorded; after the faults heal, every replica's log is read back from its file and
checked: lost (confirmed, never stored) 0, duplicates 0, the same sequence of events on
every replica.
"""

from __future__ import annotations

import threading
import uuid as uuidlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import zbus
from tests.support.replicas import ReplicaGroup, replica_group
from tests.support.waiting import wait_until
from zbus.eventbus.server.store import SqliteEventLogReader

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def group(tmp_path: Path) -> Iterator[ReplicaGroup]:
    with replica_group(tmp_path) as g:
        g.leader(60)
        yield g


@dataclass
class Writer:
    """Publishes confirmed batches of 10 events to the group until stopped."""

    group: ReplicaGroup
    attempted: set[str] = field(default_factory=set)
    confirmed: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with zbus.EventBusClient(self.group.endpoints(), producer="checker") as client:
            n = 0
            while not self.stop.is_set():
                items = [(f"/check/{n % 7}", b"%d" % n, str(uuidlib.uuid4())) for _ in range(10)]
                n += 1
                self.attempted.update(u for _, _, u in items)
                try:
                    client.publish_many(items, confirm=True, timeout=2.0)
                except (zbus.PublishError, TimeoutError) as exc:
                    self.errors.append(str(exc))
                    continue
                self.confirmed.update(u for _, _, u in items)

    def confirmed_past(self, count: int, timeout: float = 60.0) -> None:
        wait_until(lambda: len(self.confirmed) >= count, timeout, what=f"{count} confirmed")


@pytest.fixture
def writer(group: ReplicaGroup) -> Iterator[Writer]:
    w = Writer(group)
    thread = threading.Thread(target=w.run, daemon=True)
    thread.start()
    yield w
    w.stop.set()
    thread.join(60)


def logs(group: ReplicaGroup) -> dict[str, list[tuple[int, str]]]:
    """Every replica's log, read from its file once the replicas are stopped."""
    group.stop()
    out = {}
    for r in group.replicas.values():
        reader = SqliteEventLogReader(r.data_dir / "events.db")
        try:
            out[r.name] = [(e.seq, e.uuid) for b in reader.batches(0, 10**9) for e in b.events()]
        finally:
            reader.close()
    return out


def check(group: ReplicaGroup, writer: Writer) -> None:
    writer.stop.set()
    group.caught_up(60)
    every = logs(group)
    first = next(iter(every.values()))
    for name, events in every.items():
        assert events == first, f"{name}'s log differs from the others'"
    stored = [u for _, u in first]
    assert len(stored) == len(set(stored)), "duplicates in the log"
    lost = writer.confirmed - set(stored)
    assert not lost, f"lost {len(lost)} confirmed events"
    assert set(stored) <= writer.attempted


def test_the_leader_killed_loses_nothing_confirmed(group: ReplicaGroup, writer: Writer) -> None:
    writer.confirmed_past(500)
    old = group.leader()
    old.kill()
    before = len(writer.confirmed)
    writer.confirmed_past(before + 500)
    new = group.leader()
    assert new is not old
    group.start(old.name)
    wait_until(lambda: (old.state() or {}).get("role") == "follower", 60, what="old leader follows")
    writer.confirmed_past(len(writer.confirmed) + 200)
    check(group, writer)


def test_a_paused_leader_steps_down_and_confirms_nothing_more(
    group: ReplicaGroup, writer: Writer
) -> None:
    writer.confirmed_past(300)
    old = group.leader()
    old.pause()
    before = len(writer.confirmed)
    writer.confirmed_past(before + 300)  # a new leader took over
    old.resume()
    wait_until(lambda: (old.state() or {}).get("role") == "follower", 60, what="old leader follows")
    with (
        zbus.EventBusClient(old.endpoint, producer="direct") as client,
        pytest.raises(zbus.ReplicaUnavailable, match="not the leader"),
    ):
        client.publish("/direct", b"x", confirm=True, timeout=12.0)
    check(group, writer)


def test_a_follower_killed_and_wiped_copies_the_log_back(
    group: ReplicaGroup, writer: Writer
) -> None:
    writer.confirmed_past(300)
    leader = group.leader()
    follower = next(r for r in group.replicas.values() if r is not leader)
    follower.kill()
    writer.confirmed_past(len(writer.confirmed) + 300)  # two of three go on
    follower.wipe()
    group.start(follower.name)
    writer.confirmed_past(len(writer.confirmed) + 300)
    check(group, writer)


def test_etcd_down_stops_writes_with_a_clear_error_and_they_resume(
    group: ReplicaGroup, writer: Writer
) -> None:
    writer.confirmed_past(200)
    group.etcd.kill()
    errors = len(writer.errors)
    wait_until(lambda: len(writer.errors) > errors, 60, what="writes refused")
    assert any("lease" in e or "leader" in e or "confirm" in e for e in writer.errors[errors:])
    frozen = len(writer.confirmed)
    group.etcd.start()
    writer.confirmed_past(frozen + 300)
    check(group, writer)
