"""The SNAPSHOT socket, in a thread of its own with its own read connections to the log.

The shell of :class:`~zbus.eventbus.core.spec.SnapshotCore`, which decides everything
(pages, spec transfers in turns, refusals, what to do when a client's queue is full):
this thread owns the ROUTER, the poller, the read connections and the clock, performs
the core's actions and hands it their results.

What one client can make the bus hold here is bounded in bytes
(:mod:`zbus.eventbus.core.flow`): the requests queued from it and the replies queued for
it, each by a high-water mark over the largest message, and what its transfer keeps
when the queue is full (one read: ``TURN`` events and ``message_bytes`` at most).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import zmq

from zbus.common.clock import Clock
from zbus.common.protocols import eventbus as eb
from zbus.common.rejects import LogLimiter
from zbus.common.threads import SocketThread
from zbus.common.wire import send_frames
from zbus.eventbus.core import spec
from zbus.eventbus.core.flow import SNAPSHOT_REQUEST_BYTES
from zbus.eventbus.core.spec import Sent
from zbus.eventbus.server.config import EventBusSettings
from zbus.eventbus.server.metrics import BusMetrics
from zbus.eventbus.server.peers import PeerCounter
from zbus.eventbus.server.store import EventLogReader, StoreError
from zbus.eventbus.server.transfers import TransferReads

log = logging.getLogger(__name__)

POLL_MS = 100
READS_PER_WAKE = 1000  # requests taken before the transfers get their turn


class SnapshotServer(SocketThread):
    def __init__(
        self,
        ctx: zmq.Context[Any],
        settings: EventBusSettings,
        open_reader: Callable[[], EventLogReader],
        metrics: BusMetrics,
        secure: Callable[[zmq.Socket[Any]], None],
        *,
        clock: Clock,
        open_transfer_reader: Callable[[], EventLogReader] | None = None,
    ) -> None:
        super().__init__("eventbus-snapshots", ctx, clock)
        self.settings = settings
        self.open_reader = open_reader
        self.metrics = metrics
        self.secure = secure
        self.endpoint = ""
        self.peers = 0
        self._limiter = LogLimiter()
        self._bounds = bounds = settings.bounds()
        dialect = eb.NODE_REFERENCE if settings.compat == "node" else eb.SPEC
        self.core = spec.SnapshotCore(
            dialect, spec.SnapshotLimits(bounds.message_bytes, read_bytes=bounds.message_bytes)
        )
        self.transfers = TransferReads(open_transfer_reader or open_reader)

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
        self.core.close(self.clock.monotonic())
        self.core.take()  # its readers are closed below, all at once
        self.transfers.close_all()
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
            timeout = POLL_MS
            deadline = self.core.next_deadline()
            if deadline is not None:
                wait = math.ceil((deadline - self.clock.monotonic()) * 1000)
                timeout = max(0, min(POLL_MS, wait))
            for sock, _ in poller.poll(timeout):
                if sock is self.sock:
                    self._serve_pending()
                else:
                    self.peers = self.counter.drain()
                    self.metrics.peers.labels("snapshot").set(self.peers)
            self.core.tick(self.clock.monotonic())
            self._perform()

    def _serve_pending(self) -> None:
        for _ in range(READS_PER_WAKE):
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self.core.receive(frames[0], frames[1:], self.clock.monotonic())
            self._perform()

    # ---------------------------------------------------------------- actions
    def _perform(self) -> None:
        """Perform what the core asks, and what that leads to, until it asks nothing."""
        while True:
            out = self.core.take()
            self._account(out)
            if not out.actions:
                return
            for action in out.actions:
                try:
                    self._do(action)
                except StoreError as exc:
                    log.error("snapshot read failed", extra={"error": str(exc)})
                    self.core.failed(action, "storage", str(exc), self.clock.monotonic())
                except Exception as exc:  # a bug must cost one request, not the bus
                    log.exception(
                        "snapshot request failed", extra={"action": type(action).__name__}
                    )
                    self.core.failed(action, "internal", str(exc), self.clock.monotonic())

    def _do(self, action: spec.Action) -> None:
        core = self.core
        if isinstance(action, spec.SendTransfer):
            count, outcome = 0, Sent.OK
            for frames in action.messages:
                outcome = self._send(action.identity, frames)
                if outcome is not Sent.OK:
                    break
                count += 1
            core.transfer_sent(action.transfer, count, outcome, self.clock.monotonic())
        elif isinstance(action, spec.ReadTransfer):
            events, ended = self.transfers.read(action)
            core.transfer_read(action.transfer, events, ended, self.clock.monotonic())
        elif isinstance(action, spec.Reply):
            outcome = self._send(action.identity, action.frames)
            if outcome is not Sent.OK:
                core.replied(action, outcome)
        elif isinstance(action, spec.OpenTransfer):
            sequence = self.transfers.open(action)
            core.transfer_opened(action.transfer, sequence, self.clock.monotonic())
        elif isinstance(action, spec.CloseTransfer):
            self.transfers.close(action.transfer)
        elif isinstance(action, spec.ReadLatest):
            a = action
            page = self.reader.snapshot_page(a.subtrees, a.since, a.after, a.limit, a.max_bytes)
            now = self.clock.monotonic()
            core.page_read(a.identity, page.events, page.next, page.sequence, now)
        elif isinstance(action, spec.ReadLog):
            page = self.reader.log_page(
                action.subtrees, action.after_seq, action.limit, action.max_bytes
            )
            now = self.clock.monotonic()
            core.page_read(action.identity, page.events, page.next, page.sequence, now)

    def _account(self, out: spec.SnapshotOutput) -> None:
        """Count and log what the core reports."""
        m = self.metrics
        for (metric, label), n in out.counts.items():
            if metric == "snapshots":
                m.snapshots.labels(label).inc(n)
            elif metric == "rejected":
                m.rejected.labels("snapshot", label).inc(n)
            elif metric == "overflows":
                m.overflows.labels("snapshot").inc(n)
            else:  # "aborted"
                m.snapshot_aborted.inc(n)
        for r in out.refusals:
            if r.error is not None:
                log.error(
                    "snapshot request failed", extra={"peer": r.identity.hex()}, exc_info=r.error
                )
            elif self._limiter.allow(self.clock.monotonic()):
                log.warning(
                    "snapshot request rejected",
                    extra={"peer": r.identity.hex(), "reason": r.reason, "error": r.detail},
                )
        for identity, sent in out.stalled:
            log.warning(
                "spec snapshot dropped: the client read nothing",
                extra={"peer": identity.hex(), "sent": sent, "seconds": spec.STALL_SECONDS},
            )

    def _send(self, identity: bytes, frames: list[bytes]) -> Sent:
        """Queue a message for one peer, without waiting."""
        try:
            send_frames(self.sock, [identity, *frames], block=False)
        except zmq.Again:
            return Sent.FULL
        except zmq.ZMQError:  # EHOSTUNREACH: the client went away
            return Sent.GONE
        return Sent.OK
