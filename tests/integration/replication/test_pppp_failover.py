"""PPPP across a failover of the leader (ADR 0010): three replicas and a real etcd.

A named subscriber with a position store, given every replica's door, reads a channel
while confirmed events go in and the leader is killed. Afterwards every replica's log is
read back: the subscriber got every event of the channel from where it joined, exactly
once and in order, its channel sequences without a gap, on whichever door.
"""

from __future__ import annotations

import json
import threading
import urllib.request
import uuid as uuidlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import zmq

import zbus
from tests.support.pppp import BUS_ENV, TIMES, RawSubscriber, metrics
from tests.support.replicas import ReplicaGroup, Writer, check, logs, replica_group
from tests.support.waiting import wait_until
from zbus import PPPPSubscriber
from zbus.common.positions import SQLitePositionStore
from zbus.common.protocols import pppp
from zbus.eventbus.client.pppp import PPPPMessage

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def group(tmp_path: Path) -> Iterator[ReplicaGroup]:
    with replica_group(tmp_path, **BUS_ENV) as g:
        g.leader(60)
        yield g


@dataclass
class PpppReader:
    """A subscriber that saves its position after each message, as an application does."""

    doors: list[str]
    store_path: Path
    got: list[PPPPMessage] = field(default_factory=list)
    failovers: int = 0
    error: BaseException | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    subscribed: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        store = SQLitePositionStore(self.store_path)
        try:
            with PPPPSubscriber(
                self.doors, "/check/", name="failover", store=store, **TIMES
            ) as sub:
                while not self.stop.is_set():
                    message = sub.next(timeout=0.1)
                    self.failovers = sub.failovers
                    if message is None:
                        continue
                    self.got.append(message)
                    if message.position:
                        store.save(message.channel, message.position)
        except BaseException as exc:  # the test reports it
            self.error = exc
        finally:
            store.close()

    def has(self, uuids: set[str]) -> bool:
        if self.error is not None:
            raise AssertionError(f"the subscriber failed: {self.error!r}")
        return uuids <= {m.uuid for m in self.got}


def test_a_named_subscriber_with_a_position_store_gets_everything_once_across_a_failover(
    group: ReplicaGroup, tmp_path: Path
) -> None:
    reader = PpppReader(group.doors(), tmp_path / "positions.db")
    reading = threading.Thread(target=reader.run, daemon=True)
    reading.start()
    writer = Writer(group)
    # A probe first: once it arrives the subscriber is in, and owed every event after.
    probe = str(uuidlib.uuid4())
    with zbus.EventBusClient(group.endpoints(), producer="probe") as client:
        client.publish_many([("/check/probe", b"", probe)], confirm=True, timeout=30)
    writer.attempted.add(probe)
    writer.confirmed.add(probe)
    wait_until(lambda: len(reader.got) >= 1, 60, what="the subscriber to get the probe")
    writing = threading.Thread(target=writer.run, daemon=True)
    writing.start()
    try:
        writer.confirmed_past(500)
        wait_until(lambda: len(reader.got) >= 200, 60, what="the subscriber to get events")
        old = group.leader()
        old.kill()
        before = len(writer.confirmed)
        writer.confirmed_past(before + 500)
        assert group.leader() is not old
        group.start(old.name)
        writer.confirmed_past(len(writer.confirmed) + 200)
    finally:
        writer.stop.set()
        writing.join(60)
    try:
        wait_until(lambda: reader.has(writer.confirmed), 90, what="every confirmed event")
    except AssertionError as exc:
        missing = len(writer.confirmed - {m.uuid for m in reader.got})
        raise AssertionError(
            f"{exc}: {missing} missing, {len(reader.got)} got, {reader.failovers} failovers"
            f"\n{group.outputs()}"
        ) from None
    reader.stop.set()
    reading.join(30)
    check(group, writer)
    log = logs(group)[group.NAMES[0]]

    live = [m for m in reader.got if not m.sync]
    assert reader.failovers >= 1, "the subscriber never moved to another door"
    assert live, "no live message"
    # Exactly once, in order: the live messages are the log's events of the channel from
    # the first one on, each once, and the channel's sequences follow each other.
    start = next(i for i, (seq, _) in enumerate(log) if seq == live[0].bus_sequence)
    expected = log[start : start + len(live)]
    assert [(m.bus_sequence, m.uuid) for m in live] == expected
    assert [m.sequence for m in live] == list(range(live[0].sequence, live[-1].sequence + 1))
    # Nothing confirmed after the subscriber joined is missing.
    assert start + len(live) == len(log)


def test_a_followers_door_answers_no_subscriber_and_counts_what_it_dropped(
    group: ReplicaGroup,
) -> None:
    leader = group.leader()
    follower = next(r for r in group.replicas.values() if r is not leader)
    ctx = zmq.Context()
    sub = RawSubscriber(ctx, follower.pppp_endpoint, b"lost")
    try:
        sub.send(pppp.Subscribe("/check/"))
        dropped = "zbus_pppp_malformed_total{reason=not_leader}"
        wait_until(
            lambda: metrics(follower.admin).get(dropped, 0) >= 1, 30, what="the drop counted"
        )
        assert sub.sock.poll(0) == 0, "a follower's door answered"
    finally:
        sub.sock.close(linger=0)
        ctx.term()
    with urllib.request.urlopen(f"{follower.admin}/api/v1/pppp", timeout=10) as r:
        assert json.load(r)["serving"] is False
    with urllib.request.urlopen(f"{leader.admin}/api/v1/pppp", timeout=10) as r:
        assert json.load(r)["serving"] is True
