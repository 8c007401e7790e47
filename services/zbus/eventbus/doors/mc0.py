"""The mc0 door (seed 001) on port 61616: a thread of its own with a blocking poller.

Three sockets, no change to the bus's hot path (ADR 0005):

- a ROUTER on ``ZBUS_MC0_PORT`` (CURVE with the bus's keys, and its ZAP allow-list,
  when configured), where mc0 clients talk to :class:`~zbus.eventbus.core.mc0.Mc0Core`;
- the door's :class:`~zbus.eventbus.doors.link.LogLink`: the events of PUTs enter the
  bus as ``ZB-PUB`` batches with a confirm, like any zbus publisher's, and are stored
  once with their sequence, uuid, producer and time; every event the bus stores, from
  any door, comes back in the stream's batches and is delivered to the mc0 subscribers
  of its topic.

What one connection can make the bus hold is bounded in bytes, ``mc0_peer_bytes`` each
way. Inbound, the ROUTER's high-water mark is ``mc0_peer_bytes // largest message - 1``.
Outbound, half of it is ZeroMQ's queue (the mark from half the bytes, with the largest
messages) and half the door's :class:`~zbus.eventbus.core.mc0.Outbox`, counted in
bytes, where a burst of small messages waits for the queue to drain. The ROUTER sends
with ``ROUTER_MANDATORY`` and without blocking: a message past both is dropped and
counted (``reason="slow_client"``), and one for a connection that is gone drops its
session (``reason="gone"``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import zmq
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from zbus.common.rejects import LogLimiter, log_refusals
from zbus.common.threads import SocketThread
from zbus.common.wire import recv_frames, send_frames
from zbus.eventbus.core.flow import hwm_for
from zbus.eventbus.core.mc0 import Mc0Core, Outbox, Publish, message_bytes
from zbus.eventbus.doors.link import COLLECTOR_FULL, IN_FLIGHT, LogLink
from zbus.eventbus.doors.wiring import DoorSettings, DoorSpec, DoorWiring

log = logging.getLogger(__name__)

POLL_MS = 100  # how often the thread looks at its stop flag when idle
# While messages wait, the next try comes at once after a round that sent some (the
# connection reads: its queue drains in microseconds), after 1 ms after one that sent
# none, and after 10 ms once IDLE_ROUNDS rounds in a row sent none (a stalled
# connection). ZeroMQ tells no ROUTER that one peer's queue has room again, so the door
# asks; waiting 10 ms at once would cap a reading connection at a queue per 10 ms.
RETRY_MS = (0, 1, 10)
IDLE_ROUNDS = 100
READS_PER_WAKE = 1000  # messages taken from one socket before the others get a turn
# Events delivered (or client messages taken) between two flushes: what waits in the
# outbox goes out as ZeroMQ's queues drain, not once per turn of the loop.
FLUSH_EVERY = 256
MAX_BATCHES_IN_FLIGHT = 1000  # ZB-PUB batches sent and not answered; then PUT gets ERROR
CONFIRM_TIMEOUT = 30.0  # seconds the collector has to answer a batch


#: The detail of the ERROR a PUT gets when its batch was not sent, by the link's reason.
BUSY = {
    IN_FLIGHT: "too many PUTs wait for the bus's log",
    COLLECTOR_FULL: "the bus's collector takes no more now",
}


class Mc0Door(SocketThread):
    """Serves mc0 on one ROUTER, publishing into the bus and fanning its events out."""

    def __init__(self, wiring: DoorWiring) -> None:
        super().__init__("eventbus-mc0", wiring.ctx, wiring.clock)
        self.wiring = wiring
        self.settings: DoorSettings = wiring.settings
        self.limits = self.settings.mc0_limits()
        self.core = Mc0Core(self.limits)
        self.link: LogLink[Publish] = LogLink(
            wiring, name="mc0", max_batches=MAX_BATCHES_IN_FLIGHT, timeout=CONFIRM_TIMEOUT
        )
        self.outbox = Outbox(self.settings.mc0_peer_bytes // 2)
        self._retry_ms = RETRY_MS[0]
        self._idle_rounds = 0
        self.endpoint = ""
        self._limiter = LogLimiter()

    # ------------------------------------------------------------------ sockets
    def open(self) -> None:
        size = message_bytes(self.limits)
        send_hwm = hwm_for(self.settings.mc0_peer_bytes // 2, size)  # >= 1: the settings
        # refuse an mc0_peer_bytes below four of the largest messages
        self.router = self.wiring.ctx.socket(zmq.ROUTER)
        self._sockets = [self.router]
        self.router.linger = 0
        self.wiring.secure(self.router)
        self.router.sndhwm = send_hwm
        self.router.rcvhwm = hwm_for(self.settings.mc0_peer_bytes, size)
        self.router.maxmsgsize = size
        self.router.router_mandatory = True  # a full or gone peer raises: counted
        self.router.bind(f"tcp://{self.settings.host}:{self.settings.mc0_port or 0}")
        self.endpoint = self.router.getsockopt_string(zmq.LAST_ENDPOINT)
        # The stream's batches are only decoded while an mc0 connection holds a topic.
        self._sockets += self.link.open()

    def close(self) -> None:
        self.link.close()
        router = getattr(self, "router", None)
        if router is not None:
            router.close(linger=0)

    # --------------------------------------------------------------------- loop
    def loop(self) -> None:
        poller = zmq.Poller()
        for sock in self._sockets:
            poller.register(sock, zmq.POLLIN)
        clock, router, collector = self.clock, self.router, self.link.collector
        while not self.halted:
            for sock, _ in poller.poll(self._timeout_ms(clock.monotonic())):
                if sock is router:
                    self._read_clients()
                elif sock is collector:
                    self._read_confirms()
                else:
                    self._read_stream()
            now = clock.monotonic()
            self.core.tick(now)
            for publish in self.link.expired(now):
                self.core.failed(
                    publish.reply,
                    "unconfirmed",
                    f"mc0 PUT: the bus did not confirm the event within {CONFIRM_TIMEOUT:g} s",
                    now,
                )
            self._flush(now)
        self._read_clients()  # what arrived before the stop still goes to the collector
        self._flush(clock.monotonic())

    def _timeout_ms(self, now: float) -> int:
        longest = self._retry_ms if self.outbox else POLL_MS
        due = [d for d in (self.core.next_deadline(), self.link.next_deadline()) if d is not None]
        if not due:
            return longest
        return max(0, min(longest, int((min(due) - now) * 1000) + 1))

    def _read_clients(self) -> None:
        router, receive, clock = self.router, self.core.receive, self.clock
        for n in range(1, READS_PER_WAKE + 1):
            try:
                frames = recv_frames(router)
            except zmq.Again:
                return
            receive(frames[0], frames[1:], clock.monotonic())
            if n % FLUSH_EVERY == 0:
                self._flush(clock.monotonic())

    def _read_confirms(self) -> None:
        core = self.core
        for publishes, refusal in self.link.answers():
            now = self.clock.monotonic()
            if refusal is None:
                for publish in publishes:
                    core.stored(publish.reply, now)
            else:
                detail = f"mc0 PUT: the bus did not store the event: {refusal}"
                for publish in publishes:
                    core.failed(publish.reply, "storage", detail, now)

    def _read_stream(self) -> None:
        core = self.core
        deliver, drops = core.deliver, core.drops
        for _, rows, missed in self.link.batches(READS_PER_WAKE, core.topics.__bool__):
            if missed:
                drops["stream_gap"] += missed
            for start in range(0, len(rows), FLUSH_EVERY):
                now = self.clock.monotonic()
                for row in rows[start : start + FLUSH_EVERY]:
                    deliver(row[0], row[4], now)
                self._flush(now)

    # ------------------------------------------------------------------ sending
    def _flush(self, now: float) -> None:
        out, publishes = self.core.take()
        if publishes:
            self._publish(publishes, now)
            more, _ = self.core.take()  # ERRORs of PUTs the collector could not take
            out += more
        outbox = self.outbox
        if outbox:
            self._retry()
        for identity, frames in out:
            if outbox.waiting(identity):
                self._queue(identity, frames)
            else:
                self._send(identity, frames)
        self._log_refusals(now)

    def _send(self, identity: bytes, frames: list[bytes]) -> bool:
        """Send now, or queue in the outbox when the connection's ZeroMQ queue is full;
        False when nothing more can go to ``identity`` now."""
        try:
            send_frames(self.router, [identity, *frames], block=False)
        except zmq.Again:
            self._queue(identity, frames)
            return False
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:
                raise
            self._gone(identity, 1)
            return False
        return True

    def _queue(self, identity: bytes, frames: list[bytes]) -> None:
        if not self.outbox.push(identity, frames):
            self.core.drops["slow_client"] += 1

    def _gone(self, identity: bytes, messages: int) -> None:
        self.core.drops["gone"] += messages + self.outbox.discard(identity)
        self.core.forget(identity)

    def _retry(self) -> None:
        """Send what waits in the outbox, in order, as far as each queue has room."""
        outbox, router, sent = self.outbox, self.router, False
        # Take in ZeroMQ's pending commands (a peer's queue drained), which a send only
        # looks at once a millisecond or so.
        router.getsockopt(zmq.EVENTS)
        for identity in outbox.identities():
            while outbox.waiting(identity):
                try:
                    send_frames(router, [identity, *outbox.first(identity)], block=False)
                except zmq.Again:
                    break
                except zmq.ZMQError as exc:
                    if exc.errno != zmq.EHOSTUNREACH:
                        raise
                    self._gone(identity, 0)
                    break
                outbox.pop(identity)
                sent = True
        if sent:
            self._idle_rounds = 0
            self._retry_ms = RETRY_MS[0]
        else:
            self._idle_rounds += 1
            self._retry_ms = RETRY_MS[2] if self._idle_rounds >= IDLE_ROUNDS else RETRY_MS[1]

    def _publish(self, publishes: list[Publish], now: float) -> None:
        for chunk, why in self.link.publish(publishes, now):
            self._busy(chunk, now, BUSY[why])

    def _busy(self, chunk: Sequence[Publish], now: float, why: str) -> None:
        for publish in chunk:
            self.core.failed(publish.reply, "busy", f"mc0 PUT: not stored: {why}", now)

    def _log_refusals(self, now: float) -> None:
        log_refusals(self.core.refusals, self._limiter, log, "mc0 message refused", now)


class Mc0Metrics(Collector):
    """The door's counts, read from its core when Prometheus scrapes (nothing is copied
    on the hot path; the label sets are fixed, so the dicts never change size)."""

    def __init__(self, door: Mc0Door, registry: CollectorRegistry) -> None:
        self.door = door
        registry.register(self)

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        core, door = self.door.core, self.door
        yield GaugeMetricFamily(
            "zbus_eventbus_mc0_connections", "mc0 sessions open", value=len(core.sessions)
        )
        yield GaugeMetricFamily(
            "zbus_eventbus_mc0_subscriptions",
            "mc0 subscriptions held, (connection, topic) pairs",
            value=core.topics.count,
        )
        for name, doc, label, source in (
            ("messages_received", "mc0 messages received, by verb", "verb", core.received),
            ("messages_sent", "mc0 messages sent, by verb", "verb", core.sent),
            (
                "errors",
                "mc0 messages refused with ERROR (or ignored), by reason",
                "reason",
                core.errors,
            ),
            ("dropped", "mc0 messages not delivered, by reason", "reason", core.drops),
        ):
            family = CounterMetricFamily(f"zbus_eventbus_mc0_{name}", doc, labels=[label])
            for key, value in sorted(source.items()):
                family.add_metric([key], value)
            yield family
        yield CounterMetricFamily(
            "zbus_eventbus_mc0_expired",
            "mc0 sessions dropped after 1.05 x TTL of silence, with their subscriptions",
            value=core.expired,
        )
        yield CounterMetricFamily(
            "zbus_eventbus_mc0_events_stored", "Events of mc0 PUTs stored", value=door.link.stored
        )
        yield GaugeMetricFamily(
            "zbus_eventbus_mc0_waiting_bytes",
            "Bytes of messages waiting for mc0 connections whose queue is full",
            value=door.outbox.held,
        )


#: The mc0 door's row in the bus's table of doors.
MC0 = DoorSpec(name="mc0", title="mc0", port_setting="mc0_port", build=Mc0Door, metrics=Mc0Metrics)

__all__ = ["MC0", "Mc0Door", "Mc0Metrics"]
