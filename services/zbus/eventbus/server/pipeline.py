"""The bus's hot path, in a thread of its own with a blocking poller.

COLLECTOR (ROUTER) -> decode -> group commit to the log -> PUBLISHER (XPUB, one
BROADCAST per event, only when a spec subscriber wants it) and STREAM (PUB, one message
per commit) -> confirms. One thread owns the sequence and the log's write connection,
so no lock is taken per event (ADR 0002). Retention runs here too, between batches.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import msgpack
import zmq

from zbus.common.clock import Clock
from zbus.common.protocols import eventbus as eb
from zbus.common.protocols import eventbus_ext as ext
from zbus.common.protocols.errors import ProtocolError
from zbus.common.rejects import LogLimiter, reject_reason
from zbus.common.threads import SocketThread
from zbus.common.wire import send_frames
from zbus.eventbus.core.bus import HeartbeatSchedule, Subscriptions
from zbus.eventbus.server.config import EventBusSettings
from zbus.eventbus.server.metrics import BusMetrics
from zbus.eventbus.server.peers import PeerCounter
from zbus.eventbus.server.store import AppendResult, EventLog, NewEvent, StoreError

log = logging.getLogger(__name__)

POLL_MS = 100  # how often the thread looks at its stop flag when idle


class Pipeline(SocketThread):
    """Owns the COLLECTOR, PUBLISHER and STREAM sockets and the log writer."""

    def __init__(
        self,
        ctx: zmq.Context[Any],
        settings: EventBusSettings,
        store: EventLog,
        metrics: BusMetrics,
        clock: Clock,
        inproc: str,
    ) -> None:
        super().__init__("eventbus-pipeline")
        self.ctx = ctx
        self.settings = settings
        self.store = store
        self.metrics = metrics
        self.clock = clock
        self.inproc = inproc
        self.dialect = eb.NODE_REFERENCE if settings.compat == "node" else eb.SPEC
        self.endpoints: dict[str, str] = {}
        self.subscriptions = Subscriptions()
        self.peer_counts: dict[str, int] = {}
        self._limiter = LogLimiter()
        self._beat = HeartbeatSchedule(settings.heartbeat_interval)
        self._pack = msgpack.Packer(use_bin_type=True).pack
        self._next_retention = 0.0

    def open(self) -> None:
        s = self.settings
        host, ports = s.host, s.ports()
        self.collector = self.ctx.socket(zmq.ROUTER)
        self.collector.maxmsgsize = s.max_message_bytes
        self.collector.rcvhwm = 100_000
        self.publisher = self.ctx.socket(zmq.XPUB)
        self.publisher.sndhwm = s.publisher_hwm
        self.stream = self.ctx.socket(zmq.PUB)
        self.stream.sndhwm = s.stream_hwm
        self._sockets = [self.collector, self.publisher, self.stream]
        for sock in self._sockets:
            sock.linger = 0
            self._secure(sock)
        for name, sock in (
            ("collector", self.collector),
            ("publisher", self.publisher),
            ("stream", self.stream),
        ):
            sock.bind(f"tcp://{host}:{ports[name]}")
            self.endpoints[name] = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.collector.bind(self.inproc)  # the admin API publishes through this
        self._peers = {
            "collector": PeerCounter(self.collector),
            "publisher": PeerCounter(self.publisher),
            "stream": PeerCounter(self.stream),
        }
        self.metrics.sequence.set(self.store.last_sequence())

    secure_hook: Any = None

    def _secure(self, sock: zmq.Socket[Any]) -> None:
        if self.secure_hook is not None:
            self.secure_hook(sock)

    def close(self) -> None:
        for counter in getattr(self, "_peers", {}).values():
            counter.close()
        for sock in getattr(self, "_sockets", []):
            sock.close(linger=0)

    # --------------------------------------------------------------------- loop
    def loop(self) -> None:
        poller = zmq.Poller()
        poller.register(self.collector, zmq.POLLIN)
        poller.register(self.publisher, zmq.POLLIN)
        for counter in self._peers.values():
            poller.register(counter.monitor, zmq.POLLIN)
        monitors = {c.monitor: name for name, c in self._peers.items()}
        self._beat.sent(self.clock.monotonic())
        while not self.halted:
            now = self.clock.monotonic()
            timeout = min(POLL_MS, int(self._beat.timeout(now) * 1000) + 1)
            for sock, _ in poller.poll(timeout):
                if sock is self.collector:
                    self._drain()
                elif sock is self.publisher:
                    self._xpub_messages()
                elif sock in monitors:
                    name = monitors[sock]
                    self.peer_counts[name] = self._peers[name].drain()
                    self.metrics.peers.labels(name).set(self.peer_counts[name])
            now = self.clock.monotonic()
            if self._beat.is_due(now):
                self._heartbeat(now)
            self._maybe_retain()
        # Stop: take in and commit what is already queued, so nothing received is lost.
        self._drain()

    def _xpub_messages(self) -> None:
        while True:
            try:
                message = self.publisher.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            if not self.subscriptions.update(message):
                self.metrics.rejected.labels("publisher", "unknown_command").inc()

    def _heartbeat(self, now: float) -> None:
        seq = self.store.last_sequence()
        if self.settings.compat != "node":  # the Node.js client knows no HUGZ
            send_frames(self.publisher, eb.encode(eb.Heartbeat(seq), self.dialect))
        send_frames(self.stream, ext.encode(ext.StreamHeartbeat(seq)))
        self._beat.sent(now)

    # ---------------------------------------------------------------- collecting
    def _drain(self) -> None:
        """Take every message queued on the collector (up to batch_max events), commit once."""
        batch: list[NewEvent] = []
        confirms: list[tuple[bytes, list[str]]] = []
        limit = self.settings.batch_max
        while len(batch) < limit:
            try:
                frames = self.collector.recv_multipart(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                break
            self._take(frames, batch, confirms)
        if batch or confirms:
            self._commit(batch, confirms)

    def _take(
        self, frames: list[bytes], batch: list[NewEvent], confirms: list[tuple[bytes, list[str]]]
    ) -> None:
        identity, body = frames[0], frames[1:]
        try:
            if body and ext.is_extension(body[0]):
                confirm, rows = ext.decode_collector_rows(body)
                if len(rows) > self.settings.max_batch_events:
                    self._refuse(
                        identity,
                        "too_large",
                        f"at most {self.settings.max_batch_events} events per ZB-PUB",
                        reply=True,
                    )
                    return
                batch.extend(NewEvent(*row) for row in rows)
                if confirm:
                    confirms.append((identity, [row[3] for row in rows]))
                self.metrics.received.inc(len(rows))
            else:
                pub = eb.decode_collector(body, self.dialect)
                batch.append(NewEvent(pub.topic, pub.producer, pub.timestamp, pub.uuid, pub.data))
                self.metrics.received.inc()
        except ProtocolError as exc:
            self._refuse(
                identity,
                reject_reason(exc),
                str(exc),
                reply=bool(body and ext.is_extension(body[0])),
            )

    def _refuse(self, identity: bytes, reason: str, detail: str, *, reply: bool) -> None:
        self.metrics.rejected.labels("collector", reason).inc()
        if self._limiter.allow(time.time()):
            log.warning(
                "collector message rejected",
                extra={"peer": identity.hex(), "reason": reason, "error": detail},
            )
        if reply:
            self._send_reply(identity, ext.encode(ext.Error(detail)))

    def _send_reply(self, identity: bytes, frames: list[bytes]) -> None:
        # A peer that is gone or not reading times out on its side and retries.
        with contextlib.suppress(zmq.ZMQError):
            send_frames(self.collector, [identity, *frames], block=False)

    def _commit(self, batch: list[NewEvent], confirms: list[tuple[bytes, list[str]]]) -> None:
        started = time.perf_counter()
        try:
            result = self.store.append(batch, self.clock.time())
        except StoreError as exc:
            self.metrics.rejected.labels("collector", "storage").inc(len(batch))
            log.error("event log append failed", extra={"error": str(exc), "events": len(batch)})
            for identity, _ in confirms:
                self._send_reply(identity, ext.encode(ext.Error(f"storage failed: {exc}")))
            return
        self.metrics.commit_seconds.observe(time.perf_counter() - started)
        self._broadcast(result)
        if confirms:
            seqs = {e.uuid: e.seq for e in result.stored}
            seqs.update(result.duplicates)
            for identity, uuids in confirms:
                pairs = [[u, seqs[u]] for u in uuids if u in seqs]
                self._send_reply(identity, [ext.CONFIRM, self._pack(pairs)])

    def _broadcast(self, result: AppendResult) -> None:
        stored = result.stored
        if result.duplicates:
            self.metrics.duplicates.inc(len(result.duplicates))
        if not stored:
            return
        self.metrics.stored.inc(len(stored))
        self.metrics.sequence.set(stored[-1].seq)
        rows = [[e.topic, e.producer, e.ts, e.uuid, e.data] for e in stored]
        send_frames(self.stream, [ext.STREAM_BATCH, self._pack([stored[0].seq, rows])])
        self.metrics.broadcast.labels("stream").inc(len(stored))
        subs = self.subscriptions
        if subs.active:
            encode, dialect, sent = eb.encode, self.dialect, 0
            for e in stored:
                if subs.wants(e.topic):
                    send_frames(
                        self.publisher,
                        encode(
                            eb.Broadcast(e.topic, e.seq, e.producer, e.ts, e.uuid, e.data), dialect
                        ),
                    )
                    sent += 1
            self.metrics.broadcast.labels("publisher").inc(sent)
        self._beat.sent(self.clock.monotonic())

    # ----------------------------------------------------------------- retention
    def _maybe_retain(self) -> None:
        s = self.settings
        if s.retention_max_age is None and s.retention_max_events is None:
            return
        now = self.clock.monotonic()
        if now < self._next_retention:
            return
        self._next_retention = now + s.retention_interval
        try:
            deleted = self.store.apply_retention(
                now=self.clock.time(),
                max_age=s.retention_max_age,
                max_events=s.retention_max_events,
            )
        except StoreError as exc:
            log.error("retention failed", extra={"error": str(exc)})
            return
        if deleted:
            self.metrics.retention_deleted.inc(deleted)
            log.info("retention deleted events", extra={"deleted": deleted})
