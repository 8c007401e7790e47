"""The SNAPSHOT socket, in a thread of its own with its own read connection to the log.

Spec clients get SYNC... SYNCEND from one read transaction; zbus clients get one page
per ZB-SNAPSHOT request (ADR 0002), which bounds the server's memory whatever the
snapshot size and the client's speed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import zmq

from zbus.common.protocols import eventbus as eb
from zbus.common.protocols import eventbus_ext as ext
from zbus.common.protocols.errors import FrameValueError, ProtocolError
from zbus.common.rejects import LogLimiter, reject_reason
from zbus.common.threads import SocketThread
from zbus.common.wire import send_frames
from zbus.eventbus.server.config import EventBusSettings
from zbus.eventbus.server.metrics import BusMetrics
from zbus.eventbus.server.peers import PeerCounter
from zbus.eventbus.server.store import LogReader, StoreError

log = logging.getLogger(__name__)

POLL_MS = 100
STALL_SECONDS = 30.0  # a spec client that reads nothing for this long loses its snapshot


class SnapshotServer(SocketThread):
    def __init__(
        self,
        ctx: zmq.Context[Any],
        settings: EventBusSettings,
        open_reader: Callable[[], LogReader],
        metrics: BusMetrics,
        secure: Callable[[zmq.Socket[Any]], None],
    ) -> None:
        super().__init__("eventbus-snapshots")
        self.ctx = ctx
        self.settings = settings
        self.open_reader = open_reader
        self.metrics = metrics
        self.secure = secure
        self.dialect = eb.NODE_REFERENCE if settings.compat == "node" else eb.SPEC
        self.endpoint = ""
        self.peers = 0
        self._limiter = LogLimiter()

    def open(self) -> None:
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.linger = 0
        self.sock.router_mandatory = True  # a full peer raises instead of dropping
        self.sock.sndhwm = 10_000
        self.sock.maxmsgsize = 1024 * 1024
        self.secure(self.sock)
        self.sock.bind(f"tcp://{self.settings.host}:{self.settings.port}")
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.reader = self.open_reader()
        self.counter = PeerCounter(self.sock)

    def close(self) -> None:
        for name in ("counter", "reader"):
            part = getattr(self, name, None)
            if part is not None:
                part.close()
        sock = getattr(self, "sock", None)
        if sock is not None:
            sock.close(linger=0)

    def loop(self) -> None:
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(self.counter.monitor, zmq.POLLIN)
        while not self.halted:
            for sock, _ in poller.poll(POLL_MS):
                if sock is self.sock:
                    self._serve_pending()
                else:
                    self.peers = self.counter.drain()
                    self.metrics.peers.labels("snapshot").set(self.peers)

    def _serve_pending(self) -> None:
        for _ in range(1000):
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._serve(frames[0], frames[1:])

    def _serve(self, identity: bytes, body: list[bytes]) -> None:
        extension = bool(body) and ext.is_extension(body[0])
        try:
            if extension:
                self._page(identity, ext.decode_snapshot_request(body))
            else:
                self._spec(identity, eb.decode_snapshot_request(body, self.dialect))
        except ProtocolError as exc:
            self.metrics.rejected.labels("snapshot", reject_reason(exc)).inc()
            if self._limiter.allow(time.time()):
                log.warning(
                    "snapshot request rejected",
                    extra={"peer": identity.hex(), "reason": reject_reason(exc), "error": str(exc)},
                )
            if extension:
                self._send(identity, ext.encode(ext.Error(str(exc))))
        except StoreError as exc:
            self.metrics.rejected.labels("snapshot", "storage").inc()
            log.error("snapshot read failed", extra={"error": str(exc)})
            if extension:
                self._send(identity, ext.encode(ext.Error(f"storage failed: {exc}")))
        except Exception as exc:  # a bug must cost one request, not the bus
            self.metrics.rejected.labels("snapshot", "internal").inc()
            log.exception("snapshot request failed", extra={"peer": identity.hex()})
            if extension:
                self._send(identity, ext.encode(ext.Error(f"internal error: {exc}")))

    def _page(self, identity: bytes, q: ext.SnapshotQuery) -> None:
        self.metrics.snapshots.labels(f"page-{q.mode}").inc()
        if q.mode == "latest":
            page = self.reader.snapshot_page(q.subtrees, q.since, q.after, q.limit)
            rows, nxt, sequence = page.events, page.next, page.sequence
        else:
            start = q.since if q.after is None else _int_cursor(q.after)
            sequence = self.reader.stats().last_seq
            rows = self.reader.replay(q.subtrees, start, q.limit)
            nxt = str(rows[-1].seq) if len(rows) == q.limit else None
        out = [[e.seq, e.topic, e.producer, e.ts, e.uuid, e.data] for e in rows]
        self._send(identity, ext.encode_page(out, nxt, sequence))

    def _spec(self, identity: bytes, cmd: eb.SyncStart) -> None:
        self.metrics.snapshots.labels("spec").inc()
        sequence, events = self.reader.snapshot(cmd.subtrees, cmd.sequence)
        encode, dialect = eb.encode, self.dialect
        try:
            for e in events:
                frames = encode(eb.Sync(e.topic, e.seq, e.producer, e.ts, e.uuid, e.data), dialect)
                if not self._send(identity, frames, wait=True):
                    self.metrics.snapshot_aborted.inc()
                    return
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()
        self._send(identity, encode(eb.SyncEnd(cmd.subtrees, sequence), dialect), wait=True)

    def _send(self, identity: bytes, frames: list[bytes], *, wait: bool = False) -> bool:
        """Send to one peer; with ``wait``, ride out a full queue for up to STALL_SECONDS."""
        deadline = time.monotonic() + STALL_SECONDS
        while True:
            try:
                send_frames(self.sock, [identity, *frames], block=False)
                return True
            except zmq.Again:
                if not wait or time.monotonic() > deadline or self.halted:
                    return False
                time.sleep(0.001)  # back-pressure from this one slow client
            except zmq.ZMQError:  # EHOSTUNREACH: the client went away
                return False


def _int_cursor(text: str) -> int:
    if not text.isdigit():
        raise FrameValueError(ext.PROTOCOL, "a sequence cursor", command="ZB-SNAPSHOT")
    return int(text)
