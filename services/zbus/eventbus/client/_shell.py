"""What the blocking and the asyncio event bus clients share: their sockets, and every
step between two waits.

:class:`ClientShell` owns a client's context and publishing socket around its
sans-I/O :class:`~zbus.eventbus.client._protocol.ClientProtocol`;
:class:`SubscriptionShell` owns a subscription's sockets around its
:class:`~zbus.eventbus.client._subscription.SubscriptionProtocol`. Both move frames
without blocking, on plain ``zmq.Socket`` objects (for a ``zmq.asyncio`` context, made
in a plain view of it), so that this code serves both shells; where they must wait they
hand back how long (:meth:`SubscriptionShell._step`) or yield a
:class:`~zbus.eventbus.client._waiting.Wait` (a flow), and the shell in
:mod:`zbus.eventbus.client.blocking` or :mod:`zbus.eventbus.client.asyncio` waits.
"""

from __future__ import annotations

import contextlib
import uuid
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from zbus.common.clock import Clock, SystemClock
from zbus.common.protocols import eventbus_ext as ext
from zbus.common.security import KeyPair, check_client, make_client
from zbus.eventbus.client._counters import Counter
from zbus.eventbus.client._outbox import Item
from zbus.eventbus.client._protocol import (
    RETRY_PAUSE_MS,
    ClientProtocol,
    Compat,
    ConfirmedPublish,
)
from zbus.eventbus.client._subscription import SubscriptionProtocol
from zbus.eventbus.client._waiting import Flow, Wait
from zbus.eventbus.client.endpoints import BusEndpoints, EndpointsArg
from zbus.eventbus.client.errors import ReplicaUnavailable
from zbus.eventbus.core.log import Event
from zbus.eventbus.core.sync import NOTHING, Actions, SubscriptionLogic

__all__ = ["READS_PER_WAKE", "STREAM_RCVHWM", "ClientShell", "SubscriptionShell", "plain_context"]

READS_PER_WAKE = 32  # stream messages taken per turn, so a flood cannot starve the rest
# A subscriber's stream queue, in messages (up to a few hundred kB each): the client's own
# memory bound. Past it ZeroMQ stops reading, the bus drops, and the gap is repaired.
STREAM_RCVHWM = 128
_NOBLOCK = int(zmq.NOBLOCK)
_POLLIN = int(zmq.POLLIN)
_POLLOUT = int(zmq.POLLOUT)
_C = TypeVar("_C", bound="zmq.Context[Any]")


def plain_context(ctx: zmq.Context[Any]) -> zmq.Context[Any]:
    """The context a shell makes its sockets in: ``ctx``, or for a ``zmq.asyncio``
    context a plain view of the same ZeroMQ context, whose sockets are ``zmq.Socket``
    objects that the shells drive without blocking."""
    if isinstance(ctx, zmq.asyncio.Context):
        return zmq.Context.shadow(ctx.underlying)
    return ctx


def send_all(
    sock: zmq.Socket[Any], messages: list[list[bytes]], start: int, wait: float
) -> Flow[bool]:
    """Send ``messages[start:]`` in order, waiting up to ``wait`` seconds each time the
    socket takes nothing; False if it took nothing for that long."""
    ms = int(wait * 1000)
    for i in range(start, len(messages)):
        while True:
            try:
                sock.send_multipart(messages[i], _NOBLOCK)
                break
            except zmq.Again:
                if not (yield Wait((sock,), _POLLOUT, ms)):
                    return False
    return True


class ClientShell(Generic[_C]):
    """What both clients share: their arguments, context and publishing socket; see
    :class:`~zbus.eventbus.client.EventBusClient` for the arguments.

    Every socket a client or its subscriptions open comes from :meth:`_socket`, so CURVE
    (``curve``) covers the ones re-created on failover and reconnect too. Time is read
    from :attr:`clock` (the system's).
    """

    def __init__(
        self,
        endpoints: EndpointsArg,
        *,
        producer: str,
        heartbeat_interval: float = 1.0,
        misses: int = 3,
        context: _C | None = None,
        curve: tuple[KeyPair, bytes] | None = None,
        compat: Compat = "zbus",
    ) -> None:
        protocol = self._protocol = ClientProtocol(
            endpoints, producer, heartbeat_interval, misses, compat
        )
        self.compat = compat
        #: The plain protocol's dialect; None when the client speaks zbus's extensions.
        self.dialect = protocol.dialect
        self.endpoints = protocol.endpoints
        self.heartbeat_interval = heartbeat_interval
        self.misses = misses
        self.curve = check_client(curve)
        #: The clock the client and its subscriptions measure time with.
        self.clock: Clock = SystemClock()
        self._ctx: _C = context if context is not None else self._new_context()
        self._own_ctx = context is None
        self._plain_ctx = plain_context(self._ctx)
        self._pub: zmq.Socket[Any] | None = None
        self._closed = False
        self._subscriptions: weakref.WeakSet[SubscriptionShell] = weakref.WeakSet()

    @classmethod
    def _new_context(cls) -> _C:
        """The context of a client given none (terminated when it closes)."""
        raise NotImplementedError

    @property
    def producer(self) -> str:
        return self._protocol.outbox.producer

    malformed = Counter(
        "_protocol.outbox.malformed",
        "Malformed replies received on the publishing socket (dropped).",
    )

    def close(self, linger: float = 5.0) -> None:
        """Close the subscriptions, the sockets and the context if it is ours.

        Events published without a confirm may still be queued in this process: a bus
        that is busy takes them as fast as it commits (what one peer can make it hold is
        bounded). They get up to ``linger`` seconds to leave, and are dropped after
        that; 0 drops them at once.
        """
        if self._shut(linger) and self._own_ctx:
            self._ctx.term()  # waits for what lingers

    def _shut(self, linger: float) -> bool:
        """Close every socket (the publisher's lingering); False if already closed."""
        if self._closed:
            return False
        self._closed = True
        for sub in list(self._subscriptions):
            sub.close()
        self._drop_publisher(max(0, int(linger * 1000)))
        return True

    def _subscription_core(
        self, subtrees: Iterable[str] | str, since: int, page_limit: int
    ) -> SubscriptionLogic:
        if self._closed:
            raise RuntimeError("the client is closed")
        return self._protocol.subscription_core(subtrees, since, page_limit)

    def _socket(self, kind: int) -> zmq.Socket[Any]:
        """A new socket: linger 0, a CURVE client when configured.

        In the plain protocol a DEALER gets a printable identity of its own: the Node.js
        bus routes its replies by the identity as text, which a binary one does not
        survive.
        """
        sock: zmq.Socket[Any] = self._plain_ctx.socket(kind)
        sock.linger = 0
        if self.dialect is not None and kind == zmq.DEALER:
            sock.setsockopt(zmq.IDENTITY, f"zbus-{uuid.uuid4().hex}".encode())
        if self.curve is not None:
            make_client(sock, *self.curve)
        return sock

    def _publisher(self) -> zmq.Socket[Any]:
        if self._closed:
            raise RuntimeError("the client is closed")
        sock = self._pub
        if sock is None:
            sock = self._pub = self._socket(zmq.DEALER)
            protocol = self._protocol
            if len(protocol.endpoints) > 1:
                # With somewhere else to go, queue nothing for a bus not connected: a
                # send that waits its time out moves on (:meth:`_send_rest`).
                sock.immediate = True
            sock.connect(protocol.endpoints[protocol.publishing].collector)
        return sock

    def _drop_publisher(self, linger_ms: int = 0) -> None:
        if self._pub is not None:
            self._pub.close(linger=linger_ms)
            self._pub = None

    def _publishing(
        self, items: Iterable[Item], confirm: bool, wait: float
    ) -> Flow[list[int] | None] | None:
        """Publish what can go at once; the flow that waits for the rest (None: done).

        Without a confirm every message is sent without blocking, and only a full queue
        makes a flow (it waits up to ``wait`` seconds each time the socket takes
        nothing). A confirm always makes one.
        """
        plan = self._protocol.publication(items, confirm, wait, self.clock.time())
        if isinstance(plan, ConfirmedPublish):
            return self._confirm(plan)
        sock = self._publisher()
        for i, frames in enumerate(plan):
            try:
                sock.send_multipart(frames, _NOBLOCK)
            except zmq.Again:
                return self._send_rest(sock, plan, i, wait)
        return None

    def _send_rest(
        self, sock: zmq.Socket[Any], messages: list[list[bytes]], start: int, wait: float
    ) -> Flow[list[int] | None]:
        if not (yield from send_all(sock, messages, start, wait)):
            # A bus that takes nothing is gone or stuck: the next publish goes to the next
            # endpoints (the replicas of a group, or a backup), as a confirmed one would.
            self._drop_publisher()
            self._protocol.rotate_publisher()
            raise TimeoutError(f"the bus took nothing for {wait:g} s")
        return None

    def _confirm(self, pub: ConfirmedPublish) -> Flow[list[int] | None]:
        """Rounds of a confirmed publish: send what is unconfirmed, wait for the
        confirms until the round's deadline, else fail over to the next endpoints."""
        clock = self.clock
        while True:
            sock = self._publisher()
            if (yield from send_all(sock, pub.begin(clock.monotonic()), 0, pub.wait)):
                try:
                    while not pub.confirmed:
                        left = pub.deadline - clock.monotonic()
                        if left <= 0 or not (yield Wait((sock,), _POLLIN, int(left * 1000) + 1)):
                            break
                        pub.on_reply(sock.recv_multipart())
                    else:
                        return pub.sequences()
                except ReplicaUnavailable:
                    # A replica of a group that cannot take them now: the same uuids go
                    # to the next endpoint, after a short pause, until the failover time.
                    pub.timed_out = False
                    if not pub.unavailable(clock.monotonic()):
                        raise
                    yield Wait((sock,), 0, RETRY_PAUSE_MS)
            # Unconfirmed: the same uuids go to the next endpoints (publishing is
            # idempotent by uuid, so an event that did reach a bus answers its old
            # sequence there).
            self._drop_publisher()
            # A round without an answer (not a refusal): that endpoint is passed over.
            self._protocol.rotate_publisher(clock.monotonic(), silent=pub.timed_out)
            if not pub.rounds_left:
                raise TimeoutError(f"no confirmation within {pub.wait:g} s from any endpoint")


class SubscriptionShell:
    """A subscription's sockets around its protocol: it subscribes when made."""

    def __init__(
        self,
        client: ClientShell[Any],
        core: SubscriptionLogic,
        on_reset: Callable[[], None] | None,
    ) -> None:
        self._client = client
        self._clock = client.clock
        self._protocol = SubscriptionProtocol(client._protocol, core, on_reset)
        self._closed = False
        # The plain protocol's PUBLISHER connection, watched: each (re)connection may
        # have lost the subscription for a while (PlainSubscriptionCore.on_connected).
        self._monitor: zmq.Socket[Any] | None = None
        self._stream, self._snap = self._open()
        client._subscriptions.add(self)
        self._act(core.start(self._clock.monotonic()))

    # Counters; delivered counts the events handed to the user.
    @property
    def delivered(self) -> int:
        return self._protocol.delivered

    duplicates = Counter("_protocol.core.duplicates")
    repaired = Counter("_protocol.core.repaired")
    failovers = Counter("_protocol.core.failovers")
    resets = Counter("_protocol.core.resets")
    malformed = Counter(
        "_protocol.malformed", "Messages from the bus that did not parse (dropped)."
    )

    @property
    def last(self) -> int | None:
        """The highest sequence covered so far (None before the snapshot's read point)."""
        return self._protocol.core.last

    @property
    def endpoints(self) -> BusEndpoints:
        """The server this subscription reads from now."""
        return self._protocol.endpoints

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._close_sockets()

    def _close_sockets(self) -> None:
        for sock in (self._stream, self._snap, self._monitor):
            if sock is not None:
                sock.close(linger=0)
        self._monitor = None

    def _open(self) -> tuple[zmq.Socket[Any], zmq.Socket[Any]]:
        # The stream first: what it buffers meanwhile is merged with the snapshot.
        new, ends = self._client._socket, self._protocol.endpoints
        stream = new(zmq.SUB)
        if self._protocol.dialect is None:
            # In the plain protocol a drop cannot be repaired: ZeroMQ's default (1,000
            # BROADCASTs) stays, so that a slow subscriber has more slack there.
            stream.rcvhwm = STREAM_RCVHWM
            stream.subscribe(ext.STREAM_BATCH)
            stream.subscribe(ext.STREAM_HEARTBEAT)
            stream.connect(ends.stream)
        else:
            # The plain protocol: BROADCASTs by topic prefix, and zbus's HUGZ heartbeats.
            subtrees = self._protocol.subtrees
            for prefix in subtrees or ("",):
                stream.subscribe(prefix.encode())
            if subtrees:
                stream.subscribe(b"HUGZ")
            self._monitor = stream.get_monitor_socket(zmq.EVENT_CONNECTED)
            stream.connect(ends.publisher)
        snap = new(zmq.DEALER)
        snap.connect(ends.snapshot)
        return stream, snap

    def _waiting(self) -> tuple[zmq.Socket[Any], ...]:
        """The sockets to wait on for input."""
        if self._monitor is None:
            return (self._stream, self._snap)
        return (self._stream, self._snap, self._monitor)

    def _step(self, deadline: float | None, waited: bool) -> Event | int | None:
        """Everything :meth:`next` does between two waits: the next event, None (closed,
        or ``deadline`` passed), or how long to wait for input, in ms (-1: for ever).
        ``waited``: called again after such a wait."""
        protocol, clock = self._protocol, self._clock
        if waited:
            self._read()
            self._act(protocol.core.tick(clock.monotonic()))
        while True:
            if protocol.ready:
                event = protocol.pop()
                if event is not None:
                    return event
            if self._closed:
                return None
            now = clock.monotonic()
            if deadline is not None and now >= deadline:
                return None
            if not self._read():
                return protocol.wait_ms(deadline, now)
            self._act(protocol.core.tick(clock.monotonic()))

    def _read(self) -> bool:
        """Take what has arrived on the sockets, without waiting; True if anything."""
        got = False
        protocol, monotonic = self._protocol, self._clock.monotonic
        stream = self._stream
        for _ in range(READS_PER_WAKE):
            try:
                frames = stream.recv_multipart(_NOBLOCK)
            except zmq.Again:
                break
            got = True
            self._act(protocol.on_stream(frames, monotonic()))
            if stream is not self._stream:
                return True  # failed over: these sockets are gone
        monitor = self._monitor
        while monitor is not None:
            try:
                frames = monitor.recv_multipart(_NOBLOCK)
            except zmq.Again:
                break
            if parse_monitor_message(frames)["event"] == zmq.EVENT_CONNECTED:
                self._act(protocol.on_connected(monotonic()))
            if monitor is not self._monitor:
                return True
        snap = self._snap
        while True:
            try:
                frames = snap.recv_multipart(_NOBLOCK)
            except zmq.Again:
                return got
            got = True
            self._act(protocol.on_reply(frames, monotonic()))
            if snap is not self._snap:
                return True

    def _act(self, actions: Actions) -> None:
        if actions is NOTHING:
            return
        query = self._protocol.take(actions)
        if query is not None:
            # Unanswered, a query times out and the subscription fails over.
            with contextlib.suppress(zmq.Again):
                self._snap.send_multipart(query, _NOBLOCK)
        if actions.failover and not self._closed:
            # New sockets on the next endpoints (the same ones when there is only one).
            self._close_sockets()
            reconnected = self._protocol.fail_over(self._clock.monotonic())
            self._stream, self._snap = self._open()
            self._act(reconnected)
