"""`kill -9` of the bus under a publisher with confirms: every confirmed event survives."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import zmq

from tests.support.bus import new_event
from tests.support.waiting import UNIT
from zbus.common.protocols import eventbus_ext as ext
from zbus.eventbus.server.store import SqliteEventLog

ROOT = Path(__file__).resolve().parents[3]


def _start(data_dir: Path) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "zbus.eventbus", "--port", "0", "--admin-port", "0"],
        cwd=ROOT,
        env={**os.environ, "ZBUS_DATA_DIR": str(data_dir)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        entry = json.loads(line)
        if entry["msg"] == "service ready":
            return proc, entry["endpoints"]
    raise AssertionError(f"event bus exited before it was ready: {proc.wait()}")


def test_every_confirmed_event_survives_kill_9(tmp_path: Path) -> None:
    proc, endpoints = _start(tmp_path)
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.linger = 0
    dealer.rcvtimeo = int(10_000 * UNIT)
    dealer.connect(endpoints["collector"])
    confirmed: dict[str, tuple[int, bytes]] = {}
    sent: dict[str, bytes] = {}
    try:
        # Keep 8 batches in flight so the kill lands while commits are under way.
        in_flight = 0
        batch_no = 0
        while len(confirmed) < 3000:
            while in_flight < 8:
                batch = [new_event(f"/k/{batch_no % 17}", os.urandom(16)) for _ in range(50)]
                sent.update((e.uuid, e.data) for e in batch)
                dealer.send_multipart(ext.encode(ext.PubBatch(tuple(batch), confirm=True)))
                in_flight += 1
                batch_no += 1
            reply = ext.decode_collector_reply(dealer.recv_multipart())
            assert isinstance(reply, ext.Confirm)
            in_flight -= 1
            for uuid, seq in reply.sequences:
                confirmed[uuid] = (seq, sent[uuid])
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        dealer.close()
        ctx.term()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    # Sequences handed out were contiguous and unique.
    seqs = sorted(seq for seq, _ in confirmed.values())
    assert seqs == list(range(1, len(seqs) + 1))

    log = SqliteEventLog(tmp_path / "events.db")
    try:
        assert log.last_sequence() >= seqs[-1]
        reader = log.reader()
        stored = reader.replay((), 0, 1_000_000)
        reader.close()
    finally:
        log.close()
    by_uuid: dict[str, list[tuple[int, bytes]]] = {}
    for e in stored:
        by_uuid.setdefault(e.uuid, []).append((e.seq, e.data))
    for uuid, (seq, data) in confirmed.items():
        assert by_uuid.get(uuid) == [(seq, data)], uuid
    assert len(stored) == len({e.uuid for e in stored})  # nothing stored twice

    # The restarted bus resumes the sequence where the log ends.
    proc2, endpoints2 = _start(tmp_path)
    try:
        ctx2 = zmq.Context()
        d2 = ctx2.socket(zmq.DEALER)
        d2.linger = 0
        d2.rcvtimeo = int(10_000 * UNIT)
        d2.connect(endpoints2["collector"])
        event = new_event("/after/restart")
        d2.send_multipart(ext.encode(ext.PubBatch((event,), confirm=True)))
        reply = ext.decode_collector_reply(d2.recv_multipart())
        assert isinstance(reply, ext.Confirm)
        assert reply.sequences == ((event.uuid, len(stored) + 1),)
        # A retry of an event confirmed before the kill gets its old sequence back.
        old_uuid = next(iter(confirmed))
        retry = ext.EventData("/k/0", "test", "2026-11-22T00:00:00Z", old_uuid, b"x")
        d2.send_multipart(ext.encode(ext.PubBatch((retry,), confirm=True)))
        reply = ext.decode_collector_reply(d2.recv_multipart())
        assert isinstance(reply, ext.Confirm)
        assert reply.sequences == ((old_uuid, confirmed[old_uuid][0]),)
        d2.close()
        ctx2.term()
        admin = endpoints2["admin"]
        with urllib.request.urlopen(f"{admin}/api/v1/bus", timeout=10) as resp:
            assert json.loads(resp.read())["sequence"] == len(stored) + 1
    finally:
        proc2.send_signal(signal.SIGTERM)
        assert proc2.wait(timeout=30) == 0
        if proc2.stdout is not None:
            proc2.stdout.close()
