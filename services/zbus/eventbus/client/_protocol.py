"""The sans-I/O core of an event bus client: what it publishes where, and what it does
when a bus does not answer. No sockets, no clock: the shells
(:mod:`zbus.eventbus.client.blocking`, :mod:`zbus.eventbus.client.asyncio`) move the
frames, wait, and pass the time in.

:class:`ClientProtocol` holds a client's options, its outbox and the choice of
endpoints: :meth:`ClientProtocol.next_endpoints` is the one place that decides where a
publisher or a subscription goes when the bus it talks to is silent (failover).
:class:`ConfirmedPublish` is one confirmed publish: rounds of ``ZB-PUB`` batches, one
per endpoints at most, each waiting for the confirms of what is still unconfirmed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, TypeAlias

from zbus.common.protocols import eventbus as eb
from zbus.eventbus.client._outbox import Chunks, Item, Outbox
from zbus.eventbus.client.endpoints import BusEndpoints, EndpointsArg, endpoint_list
from zbus.eventbus.client.errors import DialectError
from zbus.eventbus.core.plain_sync import PlainSubscriptionCore
from zbus.eventbus.core.sync import SubscriptionCore, SubscriptionLogic

__all__ = ["FAILOVER_SECONDS", "PLAIN_DIALECTS", "ClientProtocol", "Compat", "ConfirmedPublish"]

#: How long a confirmed publish goes on trying the replicas of a group that answer
#: "unavailable" (no leader yet, or one whose in-sync replicas lag) before it fails.
FAILOVER_SECONDS = 10.0
#: The pause before the next endpoint, after an "unavailable".
RETRY_PAUSE_MS = 50
#: How long publishing passes over an endpoint that answered nothing in a round, while
#: another one may answer (the replicas of a group: a dead leader's is skipped).
SILENT_SECONDS = 5.0

Compat: TypeAlias = Literal["zbus", "spec", "node"]
#: The wire dialect of each ``compat`` that keeps to the plain protocol.
PLAIN_DIALECTS: dict[str, eb.Dialect] = {"spec": eb.SPEC, "node": eb.NODE_REFERENCE}


class ConfirmedPublish:
    """One confirmed publish of ``chunks``: a round per endpoints at most.

    A round (:meth:`begin`) sends every chunk that holds an unconfirmed event and waits
    ``wait`` seconds for the confirms (:meth:`on_reply`). Publishing is idempotent by
    uuid, so a chunk sent again to the next endpoints is safe: an event that reached a
    bus answers its old sequence there.
    """

    def __init__(self, outbox: Outbox, chunks: Chunks, wait: float, rounds: int) -> None:
        self.wait = wait
        self.deadline = 0.0
        self._outbox = outbox
        self._chunks = chunks
        self._rounds = rounds
        self._seqs: dict[str, int] = {}
        self._wanted: set[str] = set()
        self._failover_until: float | None = None
        self.timed_out = True  # the round ended without an answer (False: a refusal)

    def begin(self, now: float) -> list[list[bytes]]:
        """A new round: the ZB-PUBs of the chunks not confirmed yet; its deadline is
        ``now + wait``."""
        self._rounds -= 1
        self.timed_out = True
        seqs = self._seqs
        chunks = [rows for rows in self._chunks if any(r[3] not in seqs for r in rows)]
        self._wanted = {r[3] for rows in chunks for r in rows}
        self.deadline = now + self.wait
        frames = self._outbox.frames
        return [frames(rows, True) for rows in chunks]

    def on_reply(self, frames: list[bytes]) -> None:
        """A reply on the publishing socket.

        Raises:
            PublishError: the bus refused the events (``ZB-ERROR``).
        """
        self._outbox.take_reply(frames, self._seqs)

    @property
    def confirmed(self) -> bool:
        """Every event of the round is confirmed."""
        return self._wanted <= self._seqs.keys()

    def unavailable(self, now: float) -> bool:
        """A replica answered "unavailable": whether to go on to the next endpoint (a
        round that does not count, until ``FAILOVER_SECONDS`` after the first one)."""
        if self._failover_until is None:
            self._failover_until = now + FAILOVER_SECONDS
        if now >= self._failover_until:
            return False
        self._rounds += 1
        return True

    @property
    def rounds_left(self) -> bool:
        """Whether another endpoints may be tried after a round that failed."""
        return self._rounds > 0

    def sequences(self) -> list[int]:
        """The sequences, in the order the events were given."""
        seqs = self._seqs
        return [seqs[r[3]] for rows in self._chunks for r in rows]


class ClientProtocol:
    """A client's options, outbox and choice of endpoints; see
    :class:`~zbus.eventbus.client.EventBusClient` for the arguments.

    ``compat`` is the wire: ``"zbus"`` (zbus's extensions: batches, confirms, the
    stream), or the plain protocol in the server's dialects, ``"spec"`` (the RFC) and
    ``"node"`` (the Node.js reference bus: ASCII sequences, ',' lists).

    Raises:
        ValueError: bad endpoints or options.
    """

    def __init__(
        self,
        endpoints: EndpointsArg,
        producer: str,
        heartbeat_interval: float,
        misses: int,
        compat: Compat = "zbus",
    ) -> None:
        if heartbeat_interval <= 0 or misses < 1:
            raise ValueError("heartbeat_interval must be positive and misses at least 1")
        if compat != "zbus" and compat not in PLAIN_DIALECTS:
            raise ValueError(f"compat must be 'zbus', 'spec' or 'node', not {compat!r}")
        self.compat = compat
        #: The plain protocol's dialect; None when the client speaks zbus's extensions.
        self.dialect: eb.Dialect | None = PLAIN_DIALECTS.get(compat)
        self.endpoints = endpoint_list(endpoints)
        self.heartbeat_interval = heartbeat_interval
        self.misses = misses
        self.outbox = Outbox(producer)
        self.publishing = 0  # the index of the endpoints publishing goes to
        self._silent: dict[int, float] = {}  # endpoints index -> passed over until

    def next_endpoints(self, index: int) -> int:
        """Where to go when the bus at ``endpoints[index]`` is silent: the next one, in
        order (the same one when there is only one). Publishing and every subscription
        fail over through here."""
        return (index + 1) % len(self.endpoints)

    def rotate_publisher(self, now: float | None = None, *, silent: bool = False) -> BusEndpoints:
        """Publishing fails over (a confirm unanswered or refused): the endpoints it goes
        to now. With ``silent``, the endpoints left answered nothing, and are passed over
        for ``SILENT_SECONDS`` after ``now`` (monotonic) while another is left: a dead
        leader's is not waited on again while its replicas elect another."""
        if silent and now is not None:
            self._silent[self.publishing] = now + SILENT_SECONDS
        index = self.publishing
        for _ in range(len(self.endpoints)):
            index = self.next_endpoints(index)
            if now is None or self._silent.get(index, 0.0) <= now:
                break
        else:
            index = self.next_endpoints(self.publishing)
        self.publishing = index
        return self.endpoints[self.publishing]

    def subscription_core(
        self, subtrees: Iterable[str] | str, since: int, page_limit: int
    ) -> SubscriptionLogic:
        """The sans-I/O core of a new subscription, for the client's wire."""
        if isinstance(subtrees, str):
            subtrees = (subtrees,)
        if self.dialect is not None:
            return PlainSubscriptionCore(subtrees, since, self.heartbeat_interval, self.misses)
        return SubscriptionCore(subtrees, since, self.heartbeat_interval, self.misses, page_limit)

    def publication(
        self, items: Iterable[Item], confirm: bool, wait: float, wall: float
    ) -> list[list[bytes]] | ConfirmedPublish:
        """What publishing ``items`` takes, stamped ``wall``: the messages to send when
        no confirm is asked (ZB-PUB batches, or spec PUBs in the plain protocol), or a
        :class:`ConfirmedPublish` of up to one round per endpoints.

        Raises:
            ValueError: a bad topic or uuid (before anything is sent).
            DialectError: ``confirm`` in the plain protocol.
        """
        outbox = self.outbox
        if self.dialect is None:
            chunks = outbox.chunks(items, wall)
            if confirm:
                return ConfirmedPublish(outbox, chunks, wait, len(self.endpoints))
            frames = outbox.frames
            return [frames(rows, False) for rows in chunks]
        if confirm:
            raise DialectError(
                f"a confirmed publish needs zbus's extensions, which compat={self.compat!r} "
                "does not speak (and a Node.js bus cannot take); publish without confirm"
            )
        return outbox.pub_frames(items, self.dialect, wall)

    @staticmethod
    def items(topic: str, data: Any, uuid: str | None) -> list[Item]:
        """The items of a single publish."""
        return [(topic, data) if uuid is None else (topic, data, uuid)]
