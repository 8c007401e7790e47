"""`kill -9` of the bus mid-stream: a PPPP subscriber continues on the restarted bus with
no gap and no duplicate, because channel sequences are a function of the log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import zmq

from tests.support.bus import new_event
from tests.support.pppp import RawSubscriber, stored_position
from tests.support.waiting import UNIT
from zbus.common.protocols import eventbus_ext as ext
from zbus.common.protocols import pppp
from zbus.common.protocols.pppp_event import EventPayload, SyncEnd, decode_payload
from zbus.eventbus.server.store import SqliteEventLogReader

ROOT = Path(__file__).resolve().parents[3]
CHANNEL = "/k/"


def _start(data_dir: Path) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    env = {**os.environ, "ZBUS_DATA_DIR": str(data_dir), "ZBUS_ARCHIVE": "false"}
    env["ZBUS_PPPP_PORT"] = "0"
    proc = subprocess.Popen(
        [sys.executable, "-m", "zbus.eventbus", "--port", "0", "--admin-port", "0"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        entry = json.loads(line)
        if entry["msg"] == "service ready":
            return proc, entry["endpoints"]
    raise AssertionError(f"event bus exited before it was ready: {proc.wait()}")


def _stop(proc: subprocess.Popen[bytes], sig: int) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        proc.wait(timeout=30 * UNIT)
    if proc.stdout is not None:
        proc.stdout.close()


class Receiver:
    """The subscriber's side of exactly-once: drop what it has, fail on a gap, ACK."""

    def __init__(self, sub: RawSubscriber) -> None:
        self.sub = sub
        self.delivered: list[str] = []  # uuids, in channel order
        self.duplicates = 0

    def drain(self, wait: float = 0.0) -> None:
        got = False
        while not self.sub.quiet(wait if not got else 0.0):
            cmd = self.sub.recv()
            if not isinstance(cmd, pppp.Publish):
                continue
            if cmd.sequence == 0:
                # The first SYNC's end sent again (the first-idle rule: its ACK came late
                # on a busy machine) is a duplicate; any other SYNC means the bus forgot.
                assert decode_payload(cmd) == SyncEnd(0, 0) and not self.delivered, (
                    "a SYNC: the bus did not know the subscriber again"
                )
                self.duplicates += 1
                continue
            if cmd.sequence <= len(self.delivered):
                self.duplicates += 1
                continue
            assert cmd.sequence == len(self.delivered) + 1, (cmd.sequence, len(self.delivered))
            event = pppp_payload(cmd)
            self.delivered.append(event.uuid)
            got = True
        if got:
            self.sub.send(pppp.AckNack(CHANNEL, len(self.delivered)))


def pppp_payload(cmd: pppp.Publish) -> EventPayload:
    event = decode_payload(cmd)
    assert isinstance(event, EventPayload)
    return event


def _publish(dealer: zmq.Socket[Any], batches: int, start: int) -> None:
    for b in range(batches):
        n = start + b
        events = tuple(
            new_event(CHANNEL + str(i % 5) if i % 3 else f"/other/{i}", os.urandom(8))
            for i in range(n * 40, n * 40 + 40)
        )
        dealer.send_multipart(ext.encode(ext.PubBatch(events, confirm=True)))
        reply = ext.decode_collector_reply(dealer.recv_multipart())
        assert isinstance(reply, ext.Confirm)


def test_a_subscriber_continues_exactly_once_across_kill_9(tmp_path: Path) -> None:
    ctx: zmq.Context[Any] = zmq.Context()
    proc, endpoints = _start(tmp_path)
    try:
        sub = RawSubscriber(ctx, endpoints["pppp"], b"durable")
        _, end = sub.sync(CHANNEL)
        assert end.head == 0
        receiver = Receiver(sub)
        dealer = ctx.socket(zmq.DEALER)
        dealer.linger = 0
        dealer.rcvtimeo = int(10_000 * UNIT)
        dealer.connect(endpoints["collector"])
        batch = 0
        while len(receiver.delivered) < 600:
            _publish(dealer, 1, batch)
            batch += 1
            receiver.drain()
        # More in the log than the subscriber has seen: the kill lands mid-stream.
        _publish(dealer, 10, batch)
        batch += 10
        # The door stores positions in group commits: once one has landed, the subscriber
        # is known across the kill (and later ACKs may not be stored: sent again, dropped).
        deadline = time.monotonic() + 30 * UNIT
        while stored_position(tmp_path, "durable") < 0:
            assert time.monotonic() < deadline, "the door stored no position"
            receiver.drain(0.05)
        receiver.drain(0.05)  # an ACK the door may not have stored yet
        _stop(proc, signal.SIGKILL)
        dealer.close()
        sub.close()
        seen_before = len(receiver.delivered)

        proc, endpoints = _start(tmp_path)
        sub = RawSubscriber(ctx, endpoints["pppp"], b"durable")
        receiver.sub = sub
        dealer = ctx.socket(zmq.DEALER)
        dealer.linger = 0
        dealer.rcvtimeo = int(10_000 * UNIT)
        dealer.connect(endpoints["collector"])
        sub.send(pppp.Subscribe(CHANNEL))  # known again: its backlog, no SYNC
        _publish(dealer, 10, batch)
        reader = SqliteEventLogReader(tmp_path / "events.db")
        try:
            want = [e.uuid for e in reader.replay((CHANNEL,), 0, 1_000_000)]
        finally:
            reader.close()
        deadline = time.monotonic() + 30 * UNIT
        while len(receiver.delivered) < len(want):
            assert time.monotonic() < deadline, (len(receiver.delivered), len(want))
            receiver.drain(1.0)
        receiver.drain(0.2)
        dealer.close()
        sub.close()
        assert receiver.delivered == want  # every event of the channel, once, in log order
        assert len(want) > seen_before > 0
    finally:
        _stop(proc, signal.SIGTERM)
        ctx.term()
