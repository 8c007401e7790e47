"""The sans-I/O side of an event bus subscription: frames in, events and queries out.

:class:`SubscriptionProtocol` decodes what the shell read (stream batches and
heartbeats, snapshot pages, or the plain protocol's BROADCASTs and SYNCs), hands it to
the subscription core (:class:`~zbus.eventbus.core.sync.SubscriptionCore` or
:class:`~zbus.eventbus.core.plain_sync.PlainSubscriptionCore`) with the time, and keeps
what the core delivered until the user takes it. It never reads a socket or a clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from zbus.common.protocols import eventbus as eb
from zbus.common.protocols import eventbus_ext as ext
from zbus.common.protocols.errors import ProtocolError
from zbus.eventbus.client._log import log
from zbus.eventbus.client._protocol import ClientProtocol
from zbus.eventbus.client.endpoints import BusEndpoints
from zbus.eventbus.core.log import Event
from zbus.eventbus.core.plain_sync import PlainSubscriptionCore
from zbus.eventbus.core.sync import NOTHING, Actions, SubscriptionCore, SubscriptionLogic

__all__ = ["SubscriptionProtocol"]

_ROW_TYPES = [str, str, str, str, bytes]
_U64 = 1 << 64


def _rows_ok(first: int, rows: list[Any]) -> bool:
    """The shape the core trusts; decode_stream_fast leaves the rows unchecked."""
    return (
        type(first) is int
        and 0 < first < _U64
        and all(type(row) is list and list(map(type, row)) == _ROW_TYPES for row in rows)
    )


class SubscriptionProtocol:
    """A subscription between the frames that arrive and the user: counters, the events
    ready, the endpoints it reads from.

    Args:
        client: the client's protocol (its wire and its choice of endpoints).
        core: the subscription's core, from :meth:`ClientProtocol.subscription_core`.
        on_reset: run, in order with the events, where a reset sits.
    """

    def __init__(
        self,
        client: ClientProtocol,
        core: SubscriptionLogic,
        on_reset: Callable[[], None] | None,
    ) -> None:
        self.client = client
        self.core = core
        self.dialect = client.dialect
        self.on_reset = on_reset
        self.index = 0  # which endpoints of the client it reads from
        self.ready: deque[Event | None] = deque()  # None marks a reset, in order
        self.markers = 0
        self.malformed = 0

    @property
    def delivered(self) -> int:
        """The events handed to the user (the core's count less what is ready)."""
        return self.core.delivered - (len(self.ready) - self.markers)

    @property
    def endpoints(self) -> BusEndpoints:
        """The server this subscription reads from now."""
        return self.client.endpoints[self.index]

    @property
    def subtrees(self) -> tuple[str, ...]:
        """The plain protocol's topic prefixes (the PUBLISHER socket filters by them)."""
        return getattr(self.core, "subtrees", ())

    def pop(self) -> Event | None:
        """The next ready event, running the reset callback where a reset sits."""
        ready = self.ready
        while ready:
            item = ready.popleft()
            if item is not None:
                return item
            self.markers -= 1
            if self.on_reset is not None:
                self.on_reset()
        return None

    def take(self, actions: Actions) -> list[bytes] | None:
        """Keep what ``actions`` delivers; the query to send on the snapshot socket."""
        if actions.reset:
            self.ready.append(None)
            self.markers += 1
            log.warning("event bus history changed: subscription reset")
        if actions.events:
            self.ready.extend(actions.events)
        query = actions.query
        if query is None:
            return None
        if isinstance(query, eb.SyncStart):
            return eb.encode(query, self.dialect or eb.SPEC)
        return ext.encode(query)

    def fail_over(self, now: float) -> Actions:
        """The bus is silent: read from the next endpoints (the shell has closed the old
        sockets and opens new ones before it acts on the answer)."""
        self.index = self.client.next_endpoints(self.index)
        log.warning("event bus silent: failing over", extra={"endpoint": self.endpoints.stream})
        return self.core.reconnect(now)

    def wait_ms(self, deadline: float | None, now: float) -> int:
        """How long the shell may wait for input, in milliseconds (-1: for ever)."""
        ends = [d for d in (deadline, self.core.deadline()) if d is not None]
        return -1 if not ends else max(0, int((min(ends) - now) * 1000) + 1)

    # Input.
    def on_stream(self, frames: list[bytes], now: float) -> Actions:
        """A message of the STREAM socket (or, in the plain protocol, the PUBLISHER)."""
        if self.dialect is not None:
            return self._on_plain("publisher", frames, now)
        core = self.core
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

    def on_connected(self, now: float) -> Actions:
        """The plain PUBLISHER connection is up (again)."""
        assert isinstance(self.core, PlainSubscriptionCore)
        return self.core.on_connected(now)

    def on_reply(self, frames: list[bytes], now: float) -> Actions:
        """A reply on the SNAPSHOT socket: a page, or the plain protocol's SYNCs."""
        if self.dialect is not None:
            return self._on_plain("snapshot", frames, now)
        core = self.core
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

    def _on_plain(self, socket: str, frames: list[bytes], now: float) -> Actions:
        """The plain protocol: SYNC or SYNCEND on the SNAPSHOT socket, BROADCAST or HUGZ
        on the PUBLISHER."""
        core, dialect = self.core, self.dialect
        assert dialect is not None and isinstance(core, PlainSubscriptionCore)
        message: eb.Broadcast | eb.Heartbeat | eb.Sync | eb.SyncEnd
        try:
            if socket == "publisher":
                message = eb.decode_publisher(frames, dialect)
            else:
                message = eb.decode_snapshot_reply(frames, dialect)
        except ProtocolError as exc:
            self._malformed(socket, exc)
            return NOTHING
        if isinstance(message, eb.Broadcast):
            return core.on_broadcast(message, now)
        if isinstance(message, eb.Heartbeat):
            return core.on_heartbeat(message.sequence, now)
        if isinstance(message, eb.SyncEnd):
            return core.on_sync_end(message, now)
        return core.on_sync(message, now)

    def _malformed(self, socket: str, exc: ProtocolError) -> None:
        self.malformed += 1
        log.warning("malformed message dropped", extra={"socket": socket, "error": str(exc)})
