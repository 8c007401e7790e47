"""The SNAPSHOT socket, in a thread of its own with its own read connections to the log.

zbus clients get one page per ZB-SNAPSHOT request (ADR 0002), at most ``limit`` events
and the door's message size, which bounds the server's memory whatever the snapshot
size and the client's speed. Spec clients get SYNC... SYNCEND, served in turns
(:mod:`zbus.eventbus.server.transfers`) so that a long one holds up no other request.

What one client can make the bus hold here is bounded in bytes
(:mod:`zbus.eventbus.core.flow`): the requests queued from it and the replies queued for
it, each by a high-water mark over the largest message. A page that finds its client's
queue full is dropped and counted (the client asks again); a SYNC waits for the next
turn.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import zmq

from zbus.common.protocols import eventbus as eb
from zbus.common.protocols import eventbus_ext as ext
from zbus.common.protocols.errors import ProtocolError
from zbus.common.rejects import LogLimiter, reject_reason
from zbus.common.threads import SocketThread
from zbus.common.wire import send_frames
from zbus.eventbus.core.flow import SNAPSHOT_REQUEST_BYTES
from zbus.eventbus.server.config import EventBusSettings
from zbus.eventbus.server.metrics import BusMetrics
from zbus.eventbus.server.peers import PeerCounter
from zbus.eventbus.server.store import EventLogReader, StoreError
from zbus.eventbus.server.transfers import Sent, SpecTransfers

log = logging.getLogger(__name__)

POLL_MS = 100
RETRY_MS = (1, 2, 5, 10, 20, 50)  # waits between turns while every transfer is blocked
_PAGE_HEADROOM = 8192  # a page's map, cursor and sequence around its events


class SnapshotServer(SocketThread):
    def __init__(
        self,
        ctx: zmq.Context[Any],
        settings: EventBusSettings,
        open_reader: Callable[[], EventLogReader],
        metrics: BusMetrics,
        secure: Callable[[zmq.Socket[Any]], None],
        open_transfer_reader: Callable[[], EventLogReader] | None = None,
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
        bounds = settings.bounds()
        self._bounds = bounds
        self._page_bytes = bounds.message_bytes - _PAGE_HEADROOM
        self.transfers = SpecTransfers(
            open_transfer_reader or open_reader, self._send, self.dialect, metrics
        )

    def open(self) -> None:
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.linger = 0
        self.sock.router_mandatory = True  # a full peer raises instead of dropping
        # A client that comes back with the identity it had (a printable one, as Node.js
        # clients of the RFC set) takes it over at once instead of being refused until
        # the old connection is seen closed.
        self.sock.router_handover = True
        self.sock.sndhwm = self._bounds.snapshot_out.hwm
        self.sock.rcvhwm = self._bounds.snapshot_in.hwm
        self.sock.maxmsgsize = SNAPSHOT_REQUEST_BYTES
        self.secure(self.sock)
        self.sock.bind(f"tcp://{self.settings.host}:{self.settings.port}")
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.reader = self.open_reader()
        self.counter = PeerCounter(self.sock)

    def close(self) -> None:
        self.transfers.close()
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
        idle_turns = 0
        while not self.halted:
            if not self.transfers.busy:
                timeout = POLL_MS
            elif idle_turns == 0:
                timeout = 0
            else:  # every transfer waits for its client: back off, up to 50 ms
                timeout = RETRY_MS[min(idle_turns, len(RETRY_MS)) - 1]
            for sock, _ in poller.poll(timeout):
                if sock is self.sock:
                    self._serve_pending()
                else:
                    self.peers = self.counter.drain()
                    self.metrics.peers.labels("snapshot").set(self.peers)
            if self.transfers.busy:
                progressed = self.transfers.turn(time.monotonic())
                idle_turns = 0 if progressed else idle_turns + 1

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
            self._reject(identity, reject_reason(exc), str(exc))
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

    def _reject(self, identity: bytes, reason: str, detail: str) -> None:
        self.metrics.rejected.labels("snapshot", reason).inc()
        if self._limiter.allow(time.time()):
            log.warning(
                "snapshot request rejected",
                extra={"peer": identity.hex(), "reason": reason, "error": detail},
            )

    def _page(self, identity: bytes, q: ext.SnapshotQuery) -> None:
        self.metrics.snapshots.labels(f"page-{q.mode}").inc()
        if q.mode == "latest":
            page = self.reader.snapshot_page(
                q.subtrees, q.since, q.after, q.limit, self._page_bytes
            )
        else:
            page = self.reader.log_page(q.subtrees, ext.log_cursor(q), q.limit, self._page_bytes)
        out = [[e.seq, e.topic, e.producer, e.ts, e.uuid, e.data] for e in page.events]
        if self._send(identity, ext.encode_page(out, page.next, page.sequence)) is Sent.FULL:
            self.metrics.overflows.labels("snapshot").inc()  # it asks again

    def _spec(self, identity: bytes, cmd: eb.SyncStart) -> None:
        if not self.transfers.request(identity, cmd, time.monotonic()):
            self._reject(identity, "busy", "too many spec snapshots under way")

    def _send(self, identity: bytes, frames: list[bytes]) -> Sent:
        """Queue a message for one peer, without waiting."""
        try:
            send_frames(self.sock, [identity, *frames], block=False)
        except zmq.Again:
            return Sent.FULL
        except zmq.ZMQError:  # EHOSTUNREACH: the client went away
            return Sent.GONE
        return Sent.OK
