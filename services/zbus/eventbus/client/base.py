"""What the blocking and the asyncio event bus clients share: the bases that own sockets.

:class:`_Base` holds a client's endpoints, options, outbox and publishing socket;
:class:`_SubscriptionBase` holds a subscription's sockets, counters and ready events,
decodes what arrives and hands it to the sans-I/O
:class:`~zbus.eventbus.core.sync.SubscriptionCore`. The I/O loops themselves (blocking or
awaited) are in :mod:`zbus.eventbus.client.blocking` and
:mod:`zbus.eventbus.client.asyncio`.
"""

from __future__ import annotations

import time
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

import zmq
from zmq.utils.monitor import parse_monitor_message

from zbus.common.protocols import eventbus as eb
from zbus.common.protocols import eventbus_ext as ext
from zbus.common.protocols.errors import ProtocolError
from zbus.common.security import KeyPair, check_client, make_client
from zbus.eventbus.client.common import (
    PLAIN_DIALECTS,
    BusEndpoints,
    Compat,
    DialectError,
    EndpointsArg,
    Item,
    _Outbox,
    log,
)
from zbus.eventbus.core.plain_sync import PlainSubscriptionCore
from zbus.eventbus.core.sync import NOTHING, Actions, Event, SubscriptionCore, SubscriptionLogic

_READS_PER_WAKE = 32  # stream messages taken per turn, so a flood cannot starve the rest
# A subscriber's stream queue, in messages (up to a few hundred kB each): the client's own
# memory bound. Past it ZeroMQ stops reading, the bus drops, and the gap is repaired.
STREAM_RCVHWM = 128
_ROW_TYPES = [str, str, str, str, bytes]
_U64 = 1 << 64
_S = TypeVar("_S", bound="zmq.Socket[Any]")


def _endpoint_list(endpoints: EndpointsArg) -> tuple[BusEndpoints, ...]:
    items = [endpoints] if isinstance(endpoints, BusEndpoints | str) else list(endpoints)
    out = tuple(BusEndpoints.from_base(e) if isinstance(e, str) else e for e in items)
    if not out:
        raise ValueError("at least one set of bus endpoints is needed")
    return out


def _rows_ok(first: int, rows: list[Any]) -> bool:
    """The shape the core trusts; decode_stream_fast leaves the rows unchecked."""
    return (
        type(first) is int
        and 0 < first < _U64
        and all(type(row) is list and list(map(type, row)) == _ROW_TYPES for row in rows)
    )


class _Base(Generic[_S]):
    """What both clients share: endpoints, options, the outbox, the publishing socket.

    Every socket a client or its subscriptions open comes from :meth:`_socket`, so CURVE
    (``curve``) covers the ones re-created on failover and reconnect too.

    ``compat`` is the wire: ``"zbus"`` (zbus's extensions: batches, confirms, the
    stream), or the plain protocol in the server's dialects, ``"spec"`` (the RFC) and
    ``"node"`` (the Node.js reference bus: ASCII sequences, ',' lists).
    """

    def __init__(
        self,
        endpoints: EndpointsArg,
        producer: str,
        heartbeat_interval: float,
        misses: int,
        ctx: zmq.Context[_S],
        own_ctx: bool,
        curve: tuple[KeyPair, bytes] | None,
        compat: Compat = "zbus",
    ) -> None:
        if heartbeat_interval <= 0 or misses < 1:
            raise ValueError("heartbeat_interval must be positive and misses at least 1")
        if compat != "zbus" and compat not in PLAIN_DIALECTS:
            raise ValueError(f"compat must be 'zbus', 'spec' or 'node', not {compat!r}")
        self.compat = compat
        #: The plain protocol's dialect; None when the client speaks zbus's extensions.
        self.dialect: eb.Dialect | None = PLAIN_DIALECTS.get(compat)
        self.endpoints = _endpoint_list(endpoints)
        self.curve = check_client(curve)
        self.heartbeat_interval = heartbeat_interval
        self.misses = misses
        self._outbox = _Outbox(producer)
        self._ctx = ctx
        self._own_ctx = own_ctx
        self._pub: _S | None = None
        self._pub_index = 0  # which endpoints publishing goes to
        self._sndtimeo = -2
        self._closed = False
        self._subscriptions: weakref.WeakSet[_SubscriptionBase[_S]] = weakref.WeakSet()

    @property
    def producer(self) -> str:
        return self._outbox.producer

    @property
    def malformed(self) -> int:
        """Malformed replies received on the publishing socket (dropped)."""
        return self._outbox.malformed

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

    def _core(
        self, subtrees: Iterable[str] | str, since: int, page_limit: int
    ) -> SubscriptionLogic:
        if self._closed:
            raise RuntimeError("the client is closed")
        if isinstance(subtrees, str):
            subtrees = (subtrees,)
        if self.dialect is not None:
            return PlainSubscriptionCore(subtrees, since, self.heartbeat_interval, self.misses)
        return SubscriptionCore(subtrees, since, self.heartbeat_interval, self.misses, page_limit)

    def _socket(self, kind: int) -> _S:
        """A new socket of the client's context: linger 0, a CURVE client when configured.

        In the plain protocol a DEALER gets a printable identity of its own: the Node.js
        bus routes its replies by the identity as text, which a binary one does not
        survive.
        """
        sock = self._ctx.socket(kind)
        sock.linger = 0
        if self.dialect is not None and kind == zmq.DEALER:
            sock.setsockopt(zmq.IDENTITY, f"zbus-{uuid.uuid4().hex}".encode())
        if self.curve is not None:
            make_client(sock, *self.curve)
        return sock

    def _plain_frames(self, items: Iterable[Item], confirm: bool) -> list[list[bytes]]:
        """Spec PUBs for the plain protocol; a confirm is refused before anything is sent."""
        assert self.dialect is not None
        if confirm:
            raise DialectError(
                f"a confirmed publish needs zbus's extensions, which compat={self.compat!r} "
                "does not speak (and a Node.js bus cannot take); publish without confirm"
            )
        return self._outbox.pub_frames(items, self.dialect)

    def _publisher(self, wait: float) -> _S:
        if self._closed:
            raise RuntimeError("the client is closed")
        sock = self._pub
        if sock is None:
            sock = self._pub = self._socket(zmq.DEALER)
            sock.connect(self.endpoints[self._pub_index].collector)
            self._sndtimeo = -2
        ms = int(wait * 1000)
        if ms != self._sndtimeo:
            sock.sndtimeo = self._sndtimeo = ms  # zmq.asyncio honours it for awaited sends
        return sock

    def _drop_publisher(self, linger_ms: int = 0) -> None:
        if self._pub is not None:
            self._pub.close(linger=linger_ms)
            self._pub = None

    def _rotate_publisher(self) -> None:
        """Unconfirmed: the same uuids go to the next endpoints (publishing is idempotent
        by uuid, so an event that did reach a bus answers its old sequence there)."""
        self._drop_publisher()
        self._pub_index = (self._pub_index + 1) % len(self.endpoints)

    @staticmethod
    def _items(topic: str, data: Any, uuid: str | None) -> list[Item]:
        return [(topic, data) if uuid is None else (topic, data, uuid)]


class _SubscriptionBase(Generic[_S]):
    """A subscription between its sockets and the user: counters, events ready, decoding."""

    def __init__(
        self, client: _Base[_S], core: SubscriptionLogic, on_reset: Callable[[], None] | None
    ) -> None:
        self._client = client
        self._core = core
        self._dialect = client.dialect
        self._on_reset = on_reset
        self._index = 0  # which endpoints of the client it reads from
        self._ready: deque[Event | None] = deque()  # None marks a reset, in order
        self._markers = 0
        self._closed = False
        self.malformed = 0
        # The plain protocol's PUBLISHER connection, watched: each (re)connection may
        # have lost the subscription for a while (PlainSubscriptionCore.on_connected).
        self._monitor: _S | None = None
        self._stream, self._snap = self._open()
        client._subscriptions.add(self)

    # Counters; delivered counts the events handed to the user.
    @property
    def delivered(self) -> int:
        return self._core.delivered - (len(self._ready) - self._markers)

    @property
    def duplicates(self) -> int:
        return self._core.duplicates

    @property
    def repaired(self) -> int:
        return self._core.repaired

    @property
    def failovers(self) -> int:
        return self._core.failovers

    @property
    def resets(self) -> int:
        return self._core.resets

    @property
    def last(self) -> int | None:
        """The highest sequence covered so far (None before the snapshot's read point)."""
        return self._core.last

    @property
    def endpoints(self) -> BusEndpoints:
        """The server this subscription reads from now."""
        return self._client.endpoints[self._index]

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._close_sockets()

    def _close_sockets(self) -> None:
        for sock in (self._stream, self._snap, self._monitor):
            if sock is not None:
                sock.close(linger=0)
        self._monitor = None

    def _open(self) -> tuple[_S, _S]:
        # The stream first: what it buffers meanwhile is merged with the snapshot.
        new, ends = self._client._socket, self.endpoints
        stream = new(zmq.SUB)
        if self._dialect is None:
            # In the plain protocol a drop cannot be repaired: ZeroMQ's default (1,000
            # BROADCASTs) stays, so that a slow subscriber has more slack there.
            stream.rcvhwm = STREAM_RCVHWM
            stream.subscribe(ext.STREAM_BATCH)
            stream.subscribe(ext.STREAM_HEARTBEAT)
            stream.connect(ends.stream)
        else:
            # The plain protocol: BROADCASTs by topic prefix, and zbus's HUGZ heartbeats.
            subtrees = getattr(self._core, "subtrees", ())
            for prefix in subtrees or ("",):
                stream.subscribe(prefix.encode())
            if subtrees:
                stream.subscribe(b"HUGZ")
            self._monitor = stream.get_monitor_socket(zmq.EVENT_CONNECTED)
            stream.connect(ends.publisher)
        snap = new(zmq.DEALER)
        snap.connect(ends.snapshot)
        return stream, snap

    def _fail_over(self) -> Actions:
        """New sockets on the next endpoints (the same ones when there is only one)."""
        self._close_sockets()
        self._index = (self._index + 1) % len(self._client.endpoints)
        log.warning("event bus silent: failing over", extra={"endpoint": self.endpoints.stream})
        self._stream, self._snap = self._open()
        return self._core.reconnect(time.monotonic())

    def _pop(self) -> Event | None:
        """The next ready event, running the reset callback where a reset sits."""
        ready = self._ready
        while ready:
            item = ready.popleft()
            if item is not None:
                return item
            self._markers -= 1
            if self._on_reset is not None:
                self._on_reset()
        return None

    def _encode_query(self, query: ext.SnapshotQuery | eb.SyncStart) -> list[bytes]:
        if isinstance(query, eb.SyncStart):
            return eb.encode(query, self._dialect or eb.SPEC)
        return ext.encode(query)

    def _stream_actions(self, frames: list[bytes], now: float) -> Actions:
        if self._dialect is not None:
            return self._publisher_actions(frames, now)
        core = self._core
        assert isinstance(core, SubscriptionCore)
        try:
            decoded = ext.decode_stream_fast(frames)
            if type(decoded) is int:
                return core.on_heartbeat(decoded, now)
            assert isinstance(decoded, tuple)
            first, rows = decoded
            if not _rows_ok(first, rows):
                ext.decode_stream(frames)  # raises the error that says what is wrong
                raise ProtocolError(ext.PROTOCOL, "a stream batch", command="B")
        except ProtocolError as exc:
            self._malformed("stream", exc)
            return NOTHING
        return core.on_batch(first, rows, now)

    def _connected_actions(self, frames: list[bytes], now: float) -> Actions:
        """A monitor event of the plain PUBLISHER connection: connected (again)."""
        assert isinstance(self._core, PlainSubscriptionCore)
        if parse_monitor_message(frames)["event"] == zmq.EVENT_CONNECTED:
            return self._core.on_connected(now)
        return NOTHING

    def _publisher_actions(self, frames: list[bytes], now: float) -> Actions:
        """The plain protocol's PUBLISHER socket: BROADCAST or HUGZ."""
        assert self._dialect is not None and isinstance(self._core, PlainSubscriptionCore)
        try:
            message = eb.decode_publisher(frames, self._dialect)
        except ProtocolError as exc:
            self._malformed("publisher", exc)
            return NOTHING
        if isinstance(message, eb.Heartbeat):
            return self._core.on_heartbeat(message.sequence, now)
        return self._core.on_broadcast(message, now)

    def _reply_actions(self, frames: list[bytes], now: float) -> Actions:
        core = self._core
        if self._dialect is not None:
            assert isinstance(core, PlainSubscriptionCore)
            try:
                answer = eb.decode_snapshot_reply(frames, self._dialect)
            except ProtocolError as exc:
                self._malformed("snapshot", exc)
                return NOTHING
            if isinstance(answer, eb.SyncEnd):
                return core.on_sync_end(answer, now)
            return core.on_sync(answer, now)
        assert isinstance(core, SubscriptionCore)
        try:
            reply = ext.decode_snapshot_reply_fast(frames)
        except ProtocolError as exc:
            # Left unanswered, the query times out and the subscription fails over.
            self._malformed("snapshot", exc)
            return NOTHING
        if isinstance(reply, ext.Error):
            log.warning(
                "the bus refused a snapshot query",
                extra={"reason": reply.reason, "endpoint": self.endpoints.snapshot},
            )
            return core.fail()
        return core.on_page(reply, now)

    def _malformed(self, socket: str, exc: ProtocolError) -> None:
        self.malformed += 1
        log.warning("malformed message dropped", extra={"socket": socket, "error": str(exc)})

    def _queue(self, actions: Actions) -> None:
        if actions.reset:
            self._ready.append(None)
            self._markers += 1
            log.warning("event bus history changed: subscription reset")
        if actions.events:
            self._ready.extend(actions.events)

    def _wait_ms(self, deadline: float | None, now: float) -> int:
        ends = [d for d in (deadline, self._core.deadline()) if d is not None]
        return -1 if not ends else max(0, int((min(ends) - now) * 1000) + 1)
