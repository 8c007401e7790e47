"""The bus's hot path, in a thread of its own with a blocking poller.

COLLECTOR (ROUTER) -> decode -> group commit to the log -> PUBLISHER (XPUB, one
BROADCAST per event, only when a spec subscriber wants it) and STREAM (PUB, one message
per commit, cut where it would pass the message size) -> confirms. One thread owns the
sequence and the log's write connection, so no lock is taken per event (ADR 0002).
Retention runs here too, between batches. What a message adds to the batch, what is
refused, the confirms, which events spec subscribers want and when HUGZ are due are the
door's core's (:class:`~zbus.eventbus.core.spec.SpecCollector`,
:class:`~zbus.eventbus.core.spec.SpecPublisher`); this thread has the sockets, the log
writer and the clock.

What one peer can make the bus hold is bounded in bytes (:mod:`zbus.eventbus.core.flow`):
every socket's high-water marks come from the byte bounds and the largest message each
door carries. The PUB sockets send with ``XPUB_NODROP``, so that ZeroMQ says when a
subscriber is full (``EAGAIN``) instead of dropping silently: the overflow is counted,
and the message is sent again without it (ZeroMQ then drops for that subscriber until it
has read half its queue; a zbus subscriber repairs the gap from the log).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import msgpack
import zmq

from zbus.common.clock import Clock
from zbus.common.protocols import eventbus as eb
from zbus.common.protocols import eventbus_ext as ext
from zbus.common.rejects import LogLimiter
from zbus.common.threads import SocketThread
from zbus.common.wire import send_frames
from zbus.eventbus.core.batchlog import StoredBatch, uuid_texts
from zbus.eventbus.core.flow import stream_messages
from zbus.eventbus.core.spec import Confirm, SpecCollector, SpecPublisher
from zbus.eventbus.server.config import EventBusSettings
from zbus.eventbus.server.metrics import BusMetrics
from zbus.eventbus.server.peers import PeerCounter
from zbus.eventbus.server.store import AppendResult, EventLog, NewEvent, StoreError

if TYPE_CHECKING:
    from zbus.eventbus.server.replication import ReplicationLink

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
        super().__init__("eventbus-pipeline", ctx, clock)
        self.settings = settings
        self.store = store
        self.metrics = metrics
        self.inproc = inproc
        self.stream_inproc = f"{inproc}-stream"
        self.dialect = eb.NODE_REFERENCE if settings.compat == "node" else eb.SPEC
        self.endpoints: dict[str, str] = {}
        # The Node.js client knows no HUGZ.
        self.spec = SpecPublisher(
            self.dialect, settings.heartbeat_interval, hugz=settings.compat != "node"
        )
        self.collecting = SpecCollector(
            self.dialect,
            NewEvent,
            max_event_bytes=settings.max_event_bytes,
            max_batch_events=settings.max_batch_events,
        )
        self.subscriptions = self.spec.subscriptions  # read by the admin API
        self.peer_counts: dict[str, int] = {}
        self._limiter = LogLimiter()
        self._pack = msgpack.Packer(use_bin_type=True).pack  # stream messages
        self._next_retention = 0.0
        # Set by the service when this bus is one replica of a group (ADR 0009).
        self.replication: ReplicationLink | None = None

    def open(self) -> None:
        s = self.settings
        host, ports = s.host, s.ports()
        bounds = s.bounds()
        self._message_cap = bounds.message_bytes
        self.collector = self.ctx.socket(zmq.ROUTER)
        self.collector.maxmsgsize = s.max_message_bytes
        self.collector.rcvhwm = bounds.collector_in.hwm
        self.collector.sndhwm = bounds.collector_out.hwm
        self.collector.router_mandatory = True  # a full or gone peer raises: counted
        self.collector.router_handover = True  # a returning identity takes over its old one
        self.publisher = self.ctx.socket(zmq.XPUB)
        self.publisher.sndhwm = bounds.publisher.hwm
        self.stream = self.ctx.socket(zmq.PUB)
        self.stream.sndhwm = bounds.stream.hwm
        for sock in (self.publisher, self.stream):
            sock.setsockopt(zmq.XPUB_NODROP, 1)
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
        self.collector.bind(self.inproc)  # the admin API and the mc0 door publish here
        self.stream.bind(self.stream_inproc)  # the mc0 door fans the stream out from here
        self._peers = {
            "collector": PeerCounter(self.collector),
            "publisher": PeerCounter(self.publisher),
            "stream": PeerCounter(self.stream),
        }
        self.metrics.sequence.set(self.store.last_sequence())
        if self.replication is not None:
            self.replication.open()
            self.endpoints["replication"] = self.replication.endpoint

    secure_hook: Any = None

    def _secure(self, sock: zmq.Socket[Any]) -> None:
        if self.secure_hook is not None:
            self.secure_hook(sock)

    def close(self) -> None:
        if self.replication is not None:
            self.replication.close()
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
        spec = self.spec
        spec.beat.sent(self.clock.monotonic())
        repl = self.replication
        polled: list[zmq.Socket[Any]] = []
        while not self.halted:
            now = self.clock.monotonic()
            timeout = min(POLL_MS, int(spec.beat.timeout(now) * 1000) + 1)
            if repl is not None:
                if repl.step(now) or not polled:  # its sockets changed: poll the new ones
                    for sock in polled:
                        poller.unregister(sock)
                    polled = repl.sockets()
                    for sock in polled:
                        poller.register(sock, zmq.POLLIN)
                self._replicated(now)
                timeout = min(timeout, 20)
            for sock, _ in poller.poll(timeout):
                if repl is not None and sock is repl.router:
                    repl.on_router(self.clock.monotonic())
                    self._replicated(self.clock.monotonic())
                elif repl is not None and sock is repl.dealer:
                    repl.on_dealer(self.clock.monotonic())
                    self._replicated(self.clock.monotonic())
                elif sock is self.collector:
                    self._drain()
                elif sock is self.publisher:
                    self._xpub_messages()
                elif sock in monitors:
                    name = monitors[sock]
                    self.peer_counts[name] = self._peers[name].drain()
                    self.metrics.peers.labels(name).set(self.peer_counts[name])
            now = self.clock.monotonic()
            if spec.beat.is_due(now):
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
            if not self.spec.subscribe(message):
                self.metrics.rejected.labels("publisher", "unknown_command").inc()

    def _heartbeat(self, now: float) -> None:
        repl = self.replication
        seq = self.store.last_sequence() if repl is None else repl.published
        hugz = self.spec.heartbeat(seq, now)
        if hugz is not None:
            self._fan_out(self.publisher, hugz, "publisher")
        self._fan_out(self.stream, ext.encode(ext.StreamHeartbeat(seq)), "stream")

    def _fan_out(self, sock: zmq.Socket[Any], frames: list[bytes], name: str) -> None:
        """Send on a PUB socket; when a subscriber is full, count it and send past it."""
        try:
            send_frames(sock, frames, block=False)
        except zmq.Again:
            # XPUB_NODROP refused the message because a matching subscriber is at its
            # high-water mark. Sent again without it, ZeroMQ drops for that subscriber
            # (and sets it aside until it has read half its queue).
            self.metrics.overflows.labels(name).inc()
            sock.setsockopt(zmq.XPUB_NODROP, 0)
            try:
                send_frames(sock, frames, block=False)
            finally:
                sock.setsockopt(zmq.XPUB_NODROP, 1)

    # ---------------------------------------------------------------- collecting
    def _drain(self) -> None:
        """Take every message queued on the collector (up to batch_max events), commit once."""
        batch: list[NewEvent] = []
        confirms: list[Confirm] = []
        limit, max_bytes = self.settings.batch_max, self.settings.batch_max_bytes
        collecting = self.collecting
        take, recv = collecting.take, self.collector.recv_multipart
        taken = 0  # bytes of the messages taken: what this batch holds in memory, about
        received = 0
        while len(batch) < limit and taken < max_bytes:
            try:
                frames = recv(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                break
            taken += sum(map(len, frames))
            received += take(frames[0], frames[1:], batch, confirms)
            if collecting.refusals:
                self._refused()
        if received:
            self.metrics.received.inc(received)
        if (batch or confirms) and self.replication is not None:
            refusal = self.replication.refusal(self.clock.monotonic())
            if refusal is not None:
                self._refuse_writes(refusal, batch, confirms)
                return
        if batch or confirms:
            self._commit(batch, confirms)

    def _refuse_writes(self, reason: str, batch: list[NewEvent], confirms: list[Confirm]) -> None:
        """A replica that may not take writes now answers each confirm with the reason;
        a follower sends the events that ask no confirm on to the leader."""
        repl = self.replication
        assert repl is not None
        if repl.role == "follower":
            asked = {u for _, uuids in confirms for u in uuids}
            plain = [e for e in batch if e.uuid not in asked] if asked else batch
            if plain:
                repl.forward(plain, self.settings.max_batch_events)
            batch = [e for e in batch if e.uuid in asked] if asked else []
        if batch:
            self.metrics.rejected.labels("collector", "replication").inc(len(batch))
        if batch and self._limiter.allow(self.clock.monotonic()):
            log.warning("writes refused", extra={"reason": reason, "events": len(batch)})
        for identity, frames in self.collecting.failures(reason, confirms, what=ext.UNAVAILABLE):
            self._send_reply(identity, frames)

    def _refused(self) -> None:
        """Count, log and answer the messages the collector core refused."""
        for r in self.collecting.refusals:
            self.metrics.rejected.labels("collector", r.reason).inc()
            if self._limiter.allow(self.clock.monotonic()):
                log.warning(
                    "collector message rejected",
                    extra={"peer": r.identity.hex(), "reason": r.reason, "error": r.detail},
                )
            if r.reply is not None:
                self._send_reply(r.identity, r.reply)
        self.collecting.refusals.clear()

    def _send_reply(self, identity: bytes, frames: list[bytes]) -> None:
        # A peer that is gone, or past its bound because it reads no replies, times out
        # on its side and retries (publishing is idempotent by uuid).
        try:
            send_frames(self.collector, [identity, *frames], block=False)
        except zmq.ZMQError:
            self.metrics.overflows.labels("collector").inc()

    def _commit(self, batch: list[NewEvent], confirms: list[Confirm]) -> None:
        started = self.clock.monotonic()
        try:
            result = self.store.append(batch, self.clock.time())
        except StoreError as exc:
            self.metrics.rejected.labels("collector", "storage").inc(len(batch))
            log.error("event log append failed", extra={"error": str(exc), "events": len(batch)})
            for identity, frames in self.collecting.failures(str(exc), confirms):
                self._send_reply(identity, frames)
            return
        self.metrics.commit_seconds.observe(self.clock.monotonic() - started)
        replies = self.collecting.confirmations(result.stored, result.duplicates, confirms)
        repl = self.replication
        if repl is not None:
            # Confirmed, and seen, only once the in-sync replicas hold it (ADR 0009).
            now = self.clock.monotonic()
            failure = self.collecting.failures(
                "not confirmed by the in-sync replicas; send again",
                confirms,
                what=ext.UNAVAILABLE,
            )
            repl.hold(list(replies), list(failure), now)
            repl.committed(now)
            self._replicated(now)
            return
        self._broadcast(result)
        for identity, frames in replies:
            self._send_reply(identity, frames)

    def _replicated(self, now: float) -> None:
        """Send what the HWM has passed: confirms, refusals, and the events."""
        repl = self.replication
        assert repl is not None
        for identity, frames in repl.releasable():
            self._send_reply(identity, frames)
        for identity, frames in repl.failed():
            self._send_reply(identity, frames)
        visible = repl.visible()
        while repl.published < visible:
            fresh = repl.take_fresh(repl.published, visible)
            if fresh is not None:  # a follower's batch just appended: no read back
                self._publish_batch(fresh, repl.published, visible)
                repl.published = fresh.last_seq
                continue
            try:
                batches = repl.reader.batches(repl.published, 64)
            except StoreError as exc:  # a damaged batch: logged, tried again later
                if self._limiter.allow(self.clock.monotonic()):
                    log.error("cannot read back the log to publish", extra={"error": str(exc)})
                return
            if not batches:
                repl.published = visible
                break
            for batch in batches:
                if batch.first_seq > visible:
                    return
                self._publish_batch(batch, repl.published, visible)
                repl.published = min(batch.last_seq, visible)

    def _publish_batch(self, batch: StoredBatch, published: int, visible: int) -> None:
        """A stored batch's events after ``published``, up to ``visible``, to subscribers."""
        if self.subscriptions.active or batch.seqs is not None or batch.last_seq > visible:
            events = [e for e in batch.events() if published < e.seq <= visible]
            if events:
                self._broadcast(AppendResult(events, []))
        else:
            self._stream_batch(batch, published)

    def _stream_batch(self, batch: StoredBatch, published: int) -> None:
        """A stored batch of contiguous sequences on the STREAM, from its columns: no
        event object made (a replica with no spec subscriber, ADR 0009)."""
        topics, producers, stamps, data = batch.columns()
        uuids = uuid_texts(batch.uuids)
        skip = max(0, published - batch.first_seq + 1)
        rows = list(zip(topics, producers, stamps, uuids, data, strict=True))[skip:]
        first = batch.first_seq + skip
        for _, payload in stream_messages(first, rows, self._message_cap, self._pack):
            self._fan_out(self.stream, [ext.STREAM_BATCH, payload], "stream")
        self.metrics.stored.inc(len(rows))
        self.metrics.broadcast.labels("stream").inc(len(rows))
        self.metrics.sequence.set(batch.last_seq)
        self.spec.beat.sent(self.clock.monotonic())

    def _broadcast(self, result: AppendResult) -> None:
        stored = result.stored
        if result.duplicates:
            self.metrics.duplicates.inc(len(result.duplicates))
        if not stored:
            return
        self.metrics.stored.inc(len(stored))
        self.metrics.sequence.set(stored[-1].seq)
        rows = [[e.topic, e.producer, e.ts, e.uuid, e.data] for e in stored]
        for _, payload in stream_messages(stored[0].seq, rows, self._message_cap, self._pack):
            self._fan_out(self.stream, [ext.STREAM_BATCH, payload], "stream")
        self.metrics.broadcast.labels("stream").inc(len(stored))
        if self.subscriptions.active:
            sent, fan_out, publisher = 0, self._fan_out, self.publisher
            for frames in self.spec.broadcasts(stored):
                fan_out(publisher, frames, "publisher")
                sent += 1
            self.metrics.broadcast.labels("publisher").inc(sent)
        self.spec.beat.sent(self.clock.monotonic())

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
