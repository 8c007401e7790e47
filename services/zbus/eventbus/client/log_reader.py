"""Paged, blocking reads of an event bus's log: :class:`LogReader`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple, Self

import zmq

from zbus.common.protocols import eventbus_ext as ext
from zbus.common.security import KeyPair, check_client, make_client
from zbus.errors import ZbusError
from zbus.eventbus.client.endpoints import BusEndpoints
from zbus.eventbus.core.log import Event
from zbus.eventbus.core.sync import check_subtrees

__all__ = ["LogPage", "LogQueryError", "LogReader"]


class LogQueryError(ZbusError):
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

    Args:
        endpoint: the SNAPSHOT socket (a bus's base endpoint) or a :class:`BusEndpoints`.
        timeout: seconds to wait for each page.
        curve: ``(this reader's key pair, the bus's public key)`` to read from a bus that
            runs CURVE; the DEALER (re-opened after a timeout too) is then a CURVE client.
            A bus whose ZAP allow-list does not hold the key answers nothing: a page
            times out.

    Raises:
        ConfigError: a ``curve`` key pair without its secret key.
    """

    def __init__(
        self,
        endpoint: BusEndpoints | str,
        *,
        timeout: float = 10.0,
        curve: tuple[KeyPair, bytes] | None = None,
    ) -> None:
        self.endpoint = endpoint.snapshot if isinstance(endpoint, BusEndpoints) else endpoint
        self.timeout = timeout
        self.curve = check_client(curve)
        self._sock: zmq.Socket[Any] | None = None

    def page(
        self, subtrees: Iterable[str] | str = (), after: int = 0, limit: int = 1000
    ) -> LogPage:
        """Events with seq > ``after`` under ``subtrees`` (prefixes; none: all), ``limit`` at most.

        Raises:
            ValueError: ``after``, ``limit`` or the subtrees out of the bus's ranges.
            TimeoutError: no answer within ``timeout``.
            LogQueryError: the bus refused the query.
            ProtocolError: the answer is not a page.
        """
        if not (1 <= limit <= ext.MAX_LIMIT and 0 <= after < 1 << 63):  # the log's range
            raise ValueError(f"need 0 <= after < 2**63 and 1 <= limit <= {ext.MAX_LIMIT}")
        subtrees = check_subtrees((subtrees,) if isinstance(subtrees, str) else subtrees)
        sock = self._sock
        if sock is None:
            sock = self._sock = zmq.Context.instance().socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            if self.curve is not None:
                make_client(sock, *self.curve)
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
