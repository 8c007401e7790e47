"""Three event bus replicas and a real etcd, as processes, under the faults of issue 21.

A checker in the manner of Jepsen's total-queue: every publish attempt and every confirm
is recorded; after the faults heal, every replica's log is read back from its file and
checked: lost (confirmed, never stored) 0, duplicates 0, the same sequence of events on
every replica.
"""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import zmq

import zbus
from tests.support.replicas import ReplicaGroup, Writer, check, logs, replica_group
from tests.support.waiting import UNIT, wait_until
from zbus.common.protocols import replication as rp

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def group(tmp_path: Path) -> Iterator[ReplicaGroup]:
    with replica_group(tmp_path) as g:
        g.leader(60)
        yield g


@pytest.fixture
def writer(group: ReplicaGroup) -> Iterator[Writer]:
    w = Writer(group)
    thread = threading.Thread(target=w.run, daemon=True)
    thread.start()
    yield w
    w.stop.set()
    thread.join(60)


@dataclass
class Reader:
    """A live subscriber given every replica: what it saw, in order."""

    group: ReplicaGroup
    seen: list[tuple[int, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with zbus.EventBusClient(self.group.endpoints(), producer="reader") as client:
            sub = client.subscribe("/check/")
            while not self.stop.is_set():
                event = sub.next(timeout=0.2)
                if event is not None:
                    self.seen.append((event.seq, event.uuid))


def test_the_leader_killed_loses_nothing_confirmed(group: ReplicaGroup, writer: Writer) -> None:
    reader = Reader(group)
    thread = threading.Thread(target=reader.run, daemon=True)
    thread.start()
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
    wait_until(lambda: len(reader.seen) >= 1000, 60, what="the subscriber to get events")
    reader.stop.set()
    thread.join(30)
    check(group, writer)
    # The subscriber went over to another replica: no gap, no duplicate, and every event
    # it saw is the log's at that sequence (the log starts at 1, with /check/ only).
    log = logs(group)[group.NAMES[0]]
    assert reader.seen == log[reader.seen[0][0] - 1 : reader.seen[-1][0]]


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


def test_followers_serve_subscribers_and_forward_unconfirmed_writes(
    group: ReplicaGroup,
) -> None:
    # Both followers following (in sync): a follower that knows no leader yet drops what
    # it would forward, counted, as the docs say.
    leader = group.leader(in_sync=3)
    followers = [r for r in group.replicas.values() if r is not leader]
    with (
        zbus.EventBusClient(followers[0].endpoint, producer="reader") as reading,
        zbus.EventBusClient(followers[1].endpoint, producer="plain") as plain,
        zbus.EventBusClient(group.endpoints(), producer="confirmed") as confirmed,
    ):
        sub = reading.subscribe("/fan/")
        # Sent to a follower with no confirm: it goes on to the leader.
        for i in range(20):
            plain.publish(f"/fan/plain/{i}", b"p")
        confirmed.publish_many([(f"/fan/c/{i}", b"c") for i in range(20)], confirm=True)
        seen: dict[str, int] = {}
        while len(seen) < 40:
            event = sub.next(timeout=30)
            assert event is not None, f"only {len(seen)} of 40 events reached the follower"
            assert event.topic not in seen, f"{event.topic} twice"
            seen[event.topic] = event.seq
        seqs = sorted(seen.values())
        assert seqs == list(range(seqs[0], seqs[0] + 40))
    state = followers[1].state()
    assert state is not None and state["role"] == "follower"


def test_bad_replication_frames_are_refused_and_counted(group: ReplicaGroup) -> None:
    leader = group.leader()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.rcvtimeo = int(10_000 * UNIT)
    sock.connect(f"tcp://127.0.0.1:{leader.replication_port}")
    try:
        epoch = leader.state()["epoch"]  # type: ignore[index]
        asks = {
            "unknown_peer": rp.Fetch("eventbus", "intruder", epoch, 1, 0, 4096),
            "stale_epoch": rp.Fetch("eventbus", "eventbus-2", epoch - 1, 1, 0, 4096),
        }
        if leader.name == "eventbus-2":
            asks["stale_epoch"] = rp.Fetch("eventbus", "eventbus-1", epoch - 1, 1, 0, 4096)
        for reason, fetch in asks.items():
            sock.send_multipart(rp.encode(fetch))
            answer = rp.decode(sock.recv_multipart())
            assert isinstance(answer, rp.Refused) and answer.reason == reason
        for garbage in ([b"ZR-FETCH", b"\xc1"], [b"nonsense"], [rp.FETCH, b"\x90" * 3]):
            sock.send_multipart(garbage)
        # Counted (the garbage is read after the last answer: wait for it), and the
        # leader still serves.

        def counted() -> dict[str, float]:
            with urllib.request.urlopen(f"{leader.admin}/metrics", timeout=5) as r:
                metrics = r.read().decode()
            return {
                line.split("reason=")[1].split('"')[1]: float(line.rsplit(" ", 1)[1])
                for line in metrics.splitlines()
                if line.startswith("zbus_replication_rejected_total{")
            }

        wait_until(lambda: counted().get("malformed", 0) >= 3, 30, what="garbage counted")
        refused = counted()
        assert refused.get("unknown_peer", 0) >= 1 and refused.get("stale_epoch", 0) >= 1
    finally:
        sock.close()
        ctx.term()
    with zbus.EventBusClient(group.endpoints(), producer="after") as client:
        assert client.publish("/after", b"x", confirm=True, timeout=10.0)
