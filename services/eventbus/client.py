"""Clients of the event bus: batched, confirmed, idempotent publishing and exact subscriptions.

:class:`EventBusClient` (blocking) and :class:`AsyncEventBusClient` (``zmq.asyncio``)
speak zbus's extensions (ADR 0002): ``ZB-PUB`` batches on the COLLECTOR, paged
``ZB-SNAPSHOT`` queries on the SNAPSHOT socket, and the batched STREAM. The subscription
logic (snapshot/stream merge, gap repair, failover, reset) is the sans-I/O
:class:`~services.eventbus.sync.SubscriptionCore`; this module only moves frames.

Threads: a client's publishing methods belong to one thread at a time, and so does each
subscription; a subscription and the publisher may live in different threads.

Without ``confirm`` publishing is fire-and-forget and :meth:`close` drops whatever is
still queued (linger 0): ask for a confirm where an event must not be lost.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, NamedTuple, Self, TypeAlias, TypeVar

import msgpack
import zmq
import zmq.asyncio

from services.common.protocols import eventbus_ext as ext
from services.common.protocols.errors import ProtocolError
from services.eventbus.sync import NOTHING, Actions, Event, SubscriptionCore

log = logging.getLogger(__name__)

__all__ = [
    "AsyncEventBusClient",
    "AsyncSubscription",
    "BusEndpoints",
    "Event",
    "EventBusClient",
    "LogPage",
    "LogQueryError",
    "LogReader",
    "PublishError",
    "Subscription",
]

CHUNK_EVENTS = 1000  # events per ZB-PUB, at most
CHUNK_BYTES = 4 * 1024 * 1024  # and about this much data: the bus refuses huge messages
_READS_PER_WAKE = 32  # stream messages taken per turn, so a flood cannot starve the rest
_UUID_TABLE = str.maketrans("123456789abcdefABCDEF", "0" * 21)
_UUID_SHAPE = "00000000-0000-0000-0000-000000000000"
_VARIANT = {c: "89ab"[int(c, 16) & 3] for c in "0123456789abcdef"}
_ROW_TYPES = [str, str, str, str, bytes]
_U64 = 1 << 64
_S = TypeVar("_S", bound="zmq.Socket[Any]")


class PublishError(Exception):
    """The bus refused a confirmed publish (``ZB-ERROR``): the reason is its text."""


@dataclass(frozen=True, slots=True)
class BusEndpoints:
    """The four sockets of one bus server."""

    snapshot: str
    publisher: str
    collector: str
    stream: str

    @classmethod
    def from_base(cls, base: str) -> BusEndpoints:
        """``tcp://host:P`` -> SNAPSHOT P, PUBLISHER P+1, COLLECTOR P+2, STREAM P+3."""
        scheme, sep, rest = base.partition("://")
        host, colon, port_text = rest.rpartition(":")
        if scheme != "tcp" or not sep or not colon or not host or not port_text.isdigit():
            raise ValueError(f"expected tcp://host:port, got {base!r}")
        port = int(port_text)
        if not 1 <= port <= 65532:
            raise ValueError(f"port {port} leaves no room for P+1..P+3")
        return cls(*(f"tcp://{host}:{port + i}" for i in range(4)))

    @classmethod
    def from_info(cls, info: Mapping[str, Any]) -> BusEndpoints:
        """From ``GET /api/v1/info``: the whole answer or its ``endpoints`` map."""
        endpoints = info.get("endpoints", info)
        if not isinstance(endpoints, Mapping):
            raise ValueError("info has no endpoints map")
        names = ("snapshot", "publisher", "collector", "stream")
        missing = [n for n in names if not isinstance(endpoints.get(n), str)]
        if missing:
            raise ValueError(f"info endpoints lack {', '.join(missing)}")
        return cls(*(endpoints[n] for n in names))


EndpointsArg: TypeAlias = BusEndpoints | str | Sequence[BusEndpoints | str]
Item: TypeAlias = tuple[str, Any] | tuple[str, Any, str]


def _endpoint_list(endpoints: EndpointsArg) -> tuple[BusEndpoints, ...]:
    items = [endpoints] if isinstance(endpoints, BusEndpoints | str) else list(endpoints)
    out = tuple(BusEndpoints.from_base(e) if isinstance(e, str) else e for e in items)
    if not out:
        raise ValueError("at least one set of bus endpoints is needed")
    return out


def _uuid4s(n: int) -> list[str]:
    """n random (version 4) uuids: one urandom call, a fraction of uuid.uuid4()'s cost."""
    h = os.urandom(16 * n).hex()
    return [
        f"{h[i : i + 8]}-{h[i + 8 : i + 12]}-4{h[i + 13 : i + 16]}-"
        f"{_VARIANT[h[i + 16]]}{h[i + 17 : i + 20]}-{h[i + 20 : i + 32]}"
        for i in range(0, 32 * n, 32)
    ]


def _rows_ok(first: int, rows: list[Any]) -> bool:
    """The shape the core trusts; decode_stream_fast leaves the rows unchecked."""
    return (
        type(first) is int
        and 0 < first < _U64
        and all(type(row) is list and list(map(type, row)) == _ROW_TYPES for row in rows)
    )


class _Outbox:
    """ZB-PUB frames and the matching of confirmations: everything but the I/O."""

    def __init__(self, producer: str) -> None:
        if not isinstance(producer, str):
            raise TypeError("producer must be a string")
        self.producer = producer
        self.malformed = 0
        self._pack = msgpack.Packer(use_bin_type=True).pack
        self._ms = -1
        self._stamp = ""

    def stamp(self) -> str:
        """The current time in ISO-8601, UTC, milliseconds (cached per millisecond)."""
        ms = time.time_ns() // 1_000_000
        if ms != self._ms:
            when = datetime.fromtimestamp(ms / 1000, UTC)
            self._stamp = when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
            self._ms = ms
        return self._stamp

    def chunks(self, items: Iterable[Item]) -> list[list[list[Any]]]:
        """Rows ``[topic, producer, ts, uuid, data]`` in chunks the bus accepts.

        Raises:
            ValueError: a topic that is empty or starts with NUL, or a malformed uuid.
        """
        stamp, producer, pack = self.stamp(), self.producer, self._pack
        rows: list[list[Any]] = []
        no_uuid: list[int] = []
        for item in items:
            topic, data = item[0], item[1]
            if type(topic) is not str or not topic or topic[0] == "\0":
                raise ValueError(f"a topic is non-empty text not starting with NUL: {topic!r}")
            uuid = item[2] if len(item) > 2 else None
            if uuid is None:
                no_uuid.append(len(rows))
            elif not isinstance(uuid, str) or uuid.translate(_UUID_TABLE) != _UUID_SHAPE:
                raise ValueError(f"a uuid has the 36-character canonical form: {uuid!r}")
            rows.append([topic, producer, stamp, uuid, data if type(data) is bytes else pack(data)])
        for i, uuid in zip(no_uuid, _uuid4s(len(no_uuid)), strict=True):
            rows[i][3] = uuid
        out: list[list[list[Any]]] = []
        chunk: list[list[Any]] = []
        size = 0
        for row in rows:
            cost = len(row[0]) + len(row[4]) + 64
            if chunk and (len(chunk) >= CHUNK_EVENTS or size + cost > CHUNK_BYTES):
                out.append(chunk)
                chunk, size = [], 0
            chunk.append(row)
            size += cost
        if chunk:
            out.append(chunk)
        return out

    def frames(self, rows: list[list[Any]], confirm: bool) -> list[bytes]:
        return [ext.PUB_BATCH, b"\x01" if confirm else b"\x00", self._pack(rows)]

    @staticmethod
    def unconfirmed(chunks: list[list[list[Any]]], seqs: dict[str, int]) -> list[list[list[Any]]]:
        return [rows for rows in chunks if any(r[3] not in seqs for r in rows)]

    @staticmethod
    def sequences(chunks: list[list[list[Any]]], seqs: dict[str, int]) -> list[int]:
        return [seqs[r[3]] for rows in chunks for r in rows]

    def take_reply(self, frames: list[bytes], seqs: dict[str, int]) -> None:
        """Record the sequences a ZB-CONFIRM gives; raise PublishError for a ZB-ERROR.

        Only confirmed publishes are answered (the client checks every event, so the
        bus refuses nothing else), and one peer's batches are answered in order, so a
        ZB-ERROR is the answer to what is being waited for.
        """
        try:
            reply = ext.decode_collector_reply(frames)
        except ProtocolError as exc:
            self.malformed += 1
            log.warning("malformed reply from the bus dropped", extra={"error": str(exc)})
            return
        if isinstance(reply, ext.Error):
            raise PublishError(reply.reason)
        seqs.update(reply.sequences)


class _Base(Generic[_S]):
    """What both clients share: endpoints, options, the outbox, the publishing socket."""

    def __init__(
        self,
        endpoints: EndpointsArg,
        producer: str,
        heartbeat_interval: float,
        misses: int,
        ctx: zmq.Context[_S],
        own_ctx: bool,
    ) -> None:
        if heartbeat_interval <= 0 or misses < 1:
            raise ValueError("heartbeat_interval must be positive and misses at least 1")
        self.endpoints = _endpoint_list(endpoints)
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

    def close(self) -> None:
        """Close the subscriptions and sockets (linger 0) and the context if it is ours."""
        if self._closed:
            return
        self._closed = True
        for sub in list(self._subscriptions):
            sub.close()
        self._drop_publisher()
        if self._own_ctx:
            self._ctx.term()

    def _core(self, subtrees: Iterable[str] | str, since: int, page_limit: int) -> SubscriptionCore:
        if self._closed:
            raise RuntimeError("the client is closed")
        if isinstance(subtrees, str):
            subtrees = (subtrees,)
        return SubscriptionCore(subtrees, since, self.heartbeat_interval, self.misses, page_limit)

    def _publisher(self, wait: float) -> _S:
        if self._closed:
            raise RuntimeError("the client is closed")
        sock = self._pub
        if sock is None:
            sock = self._pub = self._ctx.socket(zmq.DEALER)
            sock.linger = 0
            sock.connect(self.endpoints[self._pub_index].collector)
            self._sndtimeo = -2
        ms = int(wait * 1000)
        if ms != self._sndtimeo:
            sock.sndtimeo = self._sndtimeo = ms  # zmq.asyncio honours it for awaited sends
        return sock

    def _drop_publisher(self) -> None:
        if self._pub is not None:
            self._pub.close(linger=0)
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
        self, client: _Base[_S], core: SubscriptionCore, on_reset: Callable[[], None] | None
    ) -> None:
        self._client = client
        self._core = core
        self._on_reset = on_reset
        self._index = 0  # which endpoints of the client it reads from
        self._ready: deque[Event | None] = deque()  # None marks a reset, in order
        self._markers = 0
        self._closed = False
        self.malformed = 0
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
            self._stream.close(linger=0)
            self._snap.close(linger=0)

    def _open(self) -> tuple[_S, _S]:
        # The stream first: what it buffers meanwhile is merged with the snapshot.
        ctx, ends = self._client._ctx, self.endpoints
        stream = ctx.socket(zmq.SUB)
        stream.linger = 0
        stream.subscribe(ext.STREAM_BATCH)
        stream.subscribe(ext.STREAM_HEARTBEAT)
        stream.connect(ends.stream)
        snap = ctx.socket(zmq.DEALER)
        snap.linger = 0
        snap.connect(ends.snapshot)
        return stream, snap

    def _fail_over(self) -> Actions:
        """New sockets on the next endpoints (the same ones when there is only one)."""
        self._stream.close(linger=0)
        self._snap.close(linger=0)
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

    def _stream_actions(self, frames: list[bytes], now: float) -> Actions:
        try:
            decoded = ext.decode_stream_fast(frames)
            if type(decoded) is int:
                return self._core.on_heartbeat(decoded, now)
            assert isinstance(decoded, tuple)
            first, rows = decoded
            if not _rows_ok(first, rows):
                ext.decode_stream(frames)  # raises the error that says what is wrong
                raise ProtocolError(ext.PROTOCOL, "a stream batch", command="B")
        except ProtocolError as exc:
            self._malformed("stream", exc)
            return NOTHING
        return self._core.on_batch(first, rows, now)

    def _reply_actions(self, frames: list[bytes], now: float) -> Actions:
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
            return self._core.fail()
        return self._core.on_page(reply, now)

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


# --------------------------------------------------------------------------- blocking
class Subscription(_SubscriptionBase["zmq.Socket[Any]"]):
    """An iterator of :class:`Event`: snapshot first, then live, with no gap or duplicate."""

    def __init__(
        self, client: EventBusClient, core: SubscriptionCore, on_reset: Callable[[], None] | None
    ) -> None:
        super().__init__(client, core, on_reset)
        self._act(core.start(time.monotonic()))

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        event = self.next()
        if event is None:
            raise StopIteration
        return event

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def next(self, timeout: float | None = None) -> Event | None:
        """The next event; None when ``timeout`` seconds pass first or once closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._ready:
                event = self._pop()
                if event is not None:
                    return event
            if self._closed:
                return None
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return None
            if not self._read():
                zmq.select([self._stream, self._snap], [], [], self._wait_ms(deadline, now) / 1000)
                self._read()
            self._act(self._core.tick(time.monotonic()))

    def _read(self) -> bool:
        """Take what has arrived on both sockets, without waiting; True if anything."""
        got = False
        stream = self._stream
        for _ in range(_READS_PER_WAKE):
            try:
                frames = stream.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            got = True
            self._act(self._stream_actions(frames, time.monotonic()))
            if stream is not self._stream:
                return True  # failed over: these sockets are gone
        snap = self._snap
        while True:
            try:
                frames = snap.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return got
            got = True
            self._act(self._reply_actions(frames, time.monotonic()))
            if snap is not self._snap:
                return True

    def _act(self, actions: Actions) -> None:
        if actions is NOTHING:
            return
        self._queue(actions)
        if actions.query is not None:
            # Unanswered, a query times out and the subscription fails over.
            with contextlib.suppress(zmq.Again):
                self._snap.send_multipart(ext.encode(actions.query), zmq.NOBLOCK)
        if actions.failover and not self._closed:
            self._act(self._fail_over())


class EventBusClient(_Base["zmq.Socket[Any]"]):
    """A blocking client of one bus, or of a primary and its backups in order."""

    def __init__(
        self,
        endpoints: EndpointsArg,
        *,
        producer: str,
        heartbeat_interval: float = 1.0,
        misses: int = 3,
        context: zmq.Context[Any] | None = None,
    ) -> None:
        ctx = context if context is not None else zmq.Context()
        super().__init__(endpoints, producer, heartbeat_interval, misses, ctx, context is None)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def subscribe(
        self,
        subtrees: Iterable[str] | str = (),
        since: int = 0,
        *,
        page_limit: int = 1000,
        on_reset: Callable[[], None] | None = None,
    ) -> Subscription:
        """Events under ``subtrees`` (topic prefixes; none: all) changed after ``since``.

        The latest event of each matching topic comes first, then every new one.
        ``on_reset`` runs, in the consuming thread and in order with the events, when the
        bus behind the subscription turned out to have another history: what follows is
        a full snapshot of it.
        """
        return Subscription(self, self._core(subtrees, since, page_limit), on_reset)

    def publish(
        self,
        topic: str,
        data: Any,
        *,
        confirm: bool = False,
        timeout: float = 5.0,
        uuid: str | None = None,
    ) -> int | None:
        """Publish one event; with ``confirm``, wait until it is in the log: its sequence.

        ``data`` that is not bytes is packed with msgpack. Publishing is idempotent by
        ``uuid`` (a new one when None): a confirm that times out is retried with the same
        uuid on the next endpoints, and an event already stored answers its old sequence.

        Raises:
            ValueError: an empty topic, one starting with NUL, or a malformed uuid.
            TimeoutError: not sent, or not confirmed by any endpoint, within ``timeout``.
            PublishError: the bus refused the event.
        """
        seqs = self._publish(self._items(topic, data, uuid), confirm, timeout)
        return None if seqs is None else seqs[0]

    def publish_many(
        self, items: Iterable[Item], *, confirm: bool = False, timeout: float = 5.0
    ) -> list[int] | None:
        """Publish ``(topic, data)`` or ``(topic, data, uuid)`` items in ZB-PUB batches.

        With ``confirm``, every batch is sent before any confirm is awaited, and the
        sequences come back in item order. ``timeout`` bounds each endpoint's turn.
        """
        return self._publish(items, confirm, timeout)

    def _publish(self, items: Iterable[Item], confirm: bool, wait: float) -> list[int] | None:
        outbox = self._outbox
        chunks = outbox.chunks(items)
        if not confirm:
            sock = self._publisher(wait)
            try:
                for rows in chunks:
                    sock.send_multipart(outbox.frames(rows, False))
            except zmq.Again:
                raise TimeoutError(f"the bus took nothing for {wait:g} s") from None
            return None
        seqs: dict[str, int] = {}
        for _ in self.endpoints:
            if self._confirm_round(outbox.unconfirmed(chunks, seqs), seqs, wait):
                return outbox.sequences(chunks, seqs)
            self._rotate_publisher()
        raise TimeoutError(f"no confirmation within {wait:g} s from any endpoint")

    def _confirm_round(
        self, chunks: list[list[list[Any]]], seqs: dict[str, int], wait: float
    ) -> bool:
        deadline = time.monotonic() + wait
        sock = self._publisher(wait)
        try:
            for rows in chunks:
                sock.send_multipart(self._outbox.frames(rows, True))
        except zmq.Again:
            return False
        wanted = {r[3] for rows in chunks for r in rows}
        while not wanted <= seqs.keys():
            left = deadline - time.monotonic()
            if left <= 0 or not sock.poll(int(left * 1000) + 1, zmq.POLLIN):
                return False
            self._outbox.take_reply(sock.recv_multipart(), seqs)
        return True


class LogQueryError(Exception):
    """The bus refused a log query (``ZB-ERROR``): the reason is its text."""


class LogPage(NamedTuple):
    """One page of the log: ``events`` in sequence order; ``next_after`` is the ``after``
    of the following page (None: nothing more matched when it was read); ``last_sequence``
    is the bus's last sequence, taken just before the page was read."""

    events: list[Event]
    next_after: int | None
    last_sequence: int


class LogReader:
    """Blocking reads of a bus's log (ZB-SNAPSHOT, mode "log") over one DEALER; one thread.

    ``endpoint`` is the SNAPSHOT socket (a bus's base endpoint) or a :class:`BusEndpoints`.
    """

    def __init__(self, endpoint: BusEndpoints | str, *, timeout: float = 10.0) -> None:
        self.endpoint = endpoint.snapshot if isinstance(endpoint, BusEndpoints) else endpoint
        self.timeout = timeout
        self._sock: zmq.Socket[Any] | None = None

    def page(
        self, subtrees: Iterable[str] | str = (), after: int = 0, limit: int = 1000
    ) -> LogPage:
        """Events with seq > ``after`` under ``subtrees`` (prefixes; none: all), ``limit`` at most.

        Raises:
            TimeoutError: no answer within ``timeout``.
            LogQueryError: the bus refused the query.
            ProtocolError: the answer is not a page.
        """
        if not (1 <= limit <= ext.MAX_LIMIT and 0 <= after < 1 << 63):  # the log's range
            raise ValueError(f"need 0 <= after < 2**63 and 1 <= limit <= {ext.MAX_LIMIT}")
        subtrees = (subtrees,) if isinstance(subtrees, str) else tuple(subtrees)
        sock = self._sock
        if sock is None:
            sock = self._sock = zmq.Context.instance().socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(self.endpoint)
        sock.send_multipart(ext.encode(ext.SnapshotQuery(subtrees, after, None, "log", limit)))
        if not sock.poll(int(self.timeout * 1000), zmq.POLLIN):
            self.close()  # a late answer must not pass for the next page's
            raise TimeoutError(f"no answer from the bus at {self.endpoint} in {self.timeout:g} s")
        reply = ext.decode_snapshot_reply_fast(sock.recv_multipart())
        if isinstance(reply, ext.Error):
            raise LogQueryError(f"the bus at {self.endpoint} refused a log query: {reply.reason}")
        new = tuple.__new__  # what Event(...) makes, at a fraction of the cost
        events = [
            new(Event, (e.sequence, e.topic, e.producer, e.timestamp, e.uuid, e.data))
            for e in reply.events
        ]
        nxt = None if reply.next is None else int(reply.next)
        return LogPage(events, nxt, reply.sequence)

    def last_sequence(self) -> int:
        """The bus's last sequence (an empty page: no event is past the largest cursor)."""
        return self.page(after=(1 << 63) - 1, limit=1).last_sequence

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------------------ async
class AsyncSubscription(_SubscriptionBase[zmq.asyncio.Socket]):
    """An async iterator of :class:`Event`; see :class:`Subscription`."""

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        event = await self.next()
        if event is None:
            raise StopAsyncIteration
        return event

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    async def _start(self) -> None:
        await self._act(self._core.start(time.monotonic()))

    # The timeout parameters mirror the blocking client's API.
    async def next(self, timeout: float | None = None) -> Event | None:  # noqa: ASYNC109
        """The next event; None when ``timeout`` seconds pass first or once closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._ready:
                event = self._pop()
                if event is not None:
                    return event
            if self._closed:
                return None
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return None
            if not await self._read():
                poller = zmq.asyncio.Poller()
                poller.register(self._stream, zmq.POLLIN)
                poller.register(self._snap, zmq.POLLIN)
                await poller.poll(self._wait_ms(deadline, now))
                await self._read()
            await self._act(self._core.tick(time.monotonic()))

    async def _read(self) -> bool:
        got = False
        stream = self._stream
        for _ in range(_READS_PER_WAKE):
            try:
                frames = await stream.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            got = True
            await self._act(self._stream_actions(frames, time.monotonic()))
            if stream is not self._stream:
                return True
        snap = self._snap
        while True:
            try:
                frames = await snap.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return got
            got = True
            await self._act(self._reply_actions(frames, time.monotonic()))
            if snap is not self._snap:
                return True

    async def _act(self, actions: Actions) -> None:
        if actions is NOTHING:
            return
        self._queue(actions)
        if actions.query is not None:
            with contextlib.suppress(zmq.Again):
                await self._snap.send_multipart(ext.encode(actions.query), zmq.NOBLOCK)
        if actions.failover and not self._closed:
            await self._act(self._fail_over())


class AsyncEventBusClient(_Base[zmq.asyncio.Socket]):
    """The asyncio client: :class:`EventBusClient`'s API, awaited."""

    def __init__(
        self,
        endpoints: EndpointsArg,
        *,
        producer: str,
        heartbeat_interval: float = 1.0,
        misses: int = 3,
        context: zmq.asyncio.Context | None = None,
    ) -> None:
        ctx = context if context is not None else zmq.asyncio.Context()
        super().__init__(endpoints, producer, heartbeat_interval, misses, ctx, context is None)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    async def subscribe(
        self,
        subtrees: Iterable[str] | str = (),
        since: int = 0,
        *,
        page_limit: int = 1000,
        on_reset: Callable[[], None] | None = None,
    ) -> AsyncSubscription:
        """See :meth:`EventBusClient.subscribe`."""
        sub = AsyncSubscription(self, self._core(subtrees, since, page_limit), on_reset)
        await sub._start()
        return sub

    async def publish(
        self,
        topic: str,
        data: Any,
        *,
        confirm: bool = False,
        timeout: float = 5.0,  # noqa: ASYNC109
        uuid: str | None = None,
    ) -> int | None:
        """See :meth:`EventBusClient.publish`."""
        seqs = await self._publish(self._items(topic, data, uuid), confirm, timeout)
        return None if seqs is None else seqs[0]

    async def publish_many(
        self,
        items: Iterable[Item],
        *,
        confirm: bool = False,
        timeout: float = 5.0,  # noqa: ASYNC109
    ) -> list[int] | None:
        """See :meth:`EventBusClient.publish_many`."""
        return await self._publish(items, confirm, timeout)

    async def _publish(self, items: Iterable[Item], confirm: bool, wait: float) -> list[int] | None:
        outbox = self._outbox
        chunks = outbox.chunks(items)
        if not confirm:
            sock = self._publisher(wait)
            try:
                for rows in chunks:
                    await sock.send_multipart(outbox.frames(rows, False))
            except zmq.Again:
                raise TimeoutError(f"the bus took nothing for {wait:g} s") from None
            return None
        seqs: dict[str, int] = {}
        for _ in self.endpoints:
            if await self._confirm_round(outbox.unconfirmed(chunks, seqs), seqs, wait):
                return outbox.sequences(chunks, seqs)
            self._rotate_publisher()
        raise TimeoutError(f"no confirmation within {wait:g} s from any endpoint")

    async def _confirm_round(
        self, chunks: list[list[list[Any]]], seqs: dict[str, int], wait: float
    ) -> bool:
        deadline = time.monotonic() + wait
        sock = self._publisher(wait)
        try:
            for rows in chunks:
                await sock.send_multipart(self._outbox.frames(rows, True))
        except zmq.Again:
            return False
        wanted = {r[3] for rows in chunks for r in rows}
        while not wanted <= seqs.keys():
            left = deadline - time.monotonic()
            if left <= 0 or not await sock.poll(int(left * 1000) + 1):
                return False
            self._outbox.take_reply(await sock.recv_multipart(), seqs)
        return True
