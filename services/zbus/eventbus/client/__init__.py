"""Clients of the event bus: batched, confirmed, idempotent publishing and exact subscriptions.

:class:`EventBusClient` (blocking) and :class:`AsyncEventBusClient` (``zmq.asyncio``)
speak zbus's extensions (ADR 0002): ``ZB-PUB`` batches on the COLLECTOR, paged
``ZB-SNAPSHOT`` queries on the SNAPSHOT socket, and the batched STREAM. The subscription
logic (snapshot/stream merge, gap repair, failover, reset) is the sans-I/O
:class:`~zbus.eventbus.core.sync.SubscriptionCore`; these modules only move frames.

Threads: a client's publishing methods belong to one thread at a time, and so does each
subscription; a subscription and the publisher may live in different threads.

Without ``confirm`` publishing is fire-and-forget: :meth:`close` gives what is still
queued up to ``linger`` seconds (5 by default) to reach the bus and drops the rest; ask
for a confirm where an event must not be lost.

With ``compat="spec"`` or ``compat="node"`` the clients keep to the plain protocol, for
buses that speak nothing else (the Node.js reference bus): spec PUBs, SYNCSTART and the
PUBLISHER socket, no confirms (:class:`~zbus.eventbus.core.plain_sync.PlainSubscriptionCore`).

Each client is written once: its logic is sans-I/O (the subscription and PPPP cores in
:mod:`zbus.eventbus.core`, and the client's own in the private modules ``_protocol``,
``_subscription`` and ``_outbox``), the steps between two waits are shared by both shells
(``_shell``, ``_pppp_shell``), and the blocking and asyncio classes differ only in how
they wait (``_waiting``). The public parts, all re-exported here (import from this
module):

- :mod:`zbus.eventbus.client.endpoints`: :class:`BusEndpoints`;
- :mod:`zbus.eventbus.client.errors`: :class:`PublishError`, :class:`DialectError`,
  :class:`PPPPError`;
- :mod:`zbus.eventbus.client.blocking`: :class:`EventBusClient`, :class:`Subscription`;
- :mod:`zbus.eventbus.client.asyncio`: :class:`AsyncEventBusClient`,
  :class:`AsyncSubscription`;
- :mod:`zbus.eventbus.client.log_reader`: :class:`LogReader`, paged reads of a bus's log;
- :mod:`zbus.eventbus.client.mc0`: :class:`Mc0Client`, a blocking client of the bus's
  mc0 door (or of any mc0 broker);
- :mod:`zbus.eventbus.client.pppp` and :mod:`zbus.eventbus.client.pppp_asyncio`:
  :class:`PPPPSubscriber` and :class:`AsyncPPPPSubscriber`, subscribers of the bus's
  PPPP door (exactly once, in order per channel, ACKed), with
  :class:`~zbus.common.positions.SQLitePositionStore` to keep the application's place.
"""

from zbus.common.positions import PositionStore, PositionStoreError, SQLitePositionStore
from zbus.eventbus.client._outbox import CHUNK_BYTES as CHUNK_BYTES
from zbus.eventbus.client._outbox import CHUNK_EVENTS as CHUNK_EVENTS
from zbus.eventbus.client._outbox import Item as Item
from zbus.eventbus.client._protocol import Compat as Compat
from zbus.eventbus.client.asyncio import AsyncEventBusClient, AsyncSubscription
from zbus.eventbus.client.blocking import EventBusClient, Subscription
from zbus.eventbus.client.endpoints import BusEndpoints
from zbus.eventbus.client.endpoints import EndpointsArg as EndpointsArg
from zbus.eventbus.client.errors import (
    DialectError,
    PPPPError,
    PublishError,
    ReplicaUnavailable,
)
from zbus.eventbus.client.log_reader import LogPage, LogQueryError, LogReader
from zbus.eventbus.client.mc0 import Mc0Client, Mc0Error, Mc0Message
from zbus.eventbus.client.pppp import PPPPMessage, PPPPSubscriber
from zbus.eventbus.client.pppp_asyncio import AsyncPPPPSubscriber
from zbus.eventbus.core.log import Event

__all__ = [
    "AsyncEventBusClient",
    "AsyncPPPPSubscriber",
    "AsyncSubscription",
    "BusEndpoints",
    "DialectError",
    "Event",
    "EventBusClient",
    "LogPage",
    "LogQueryError",
    "LogReader",
    "Mc0Client",
    "Mc0Error",
    "Mc0Message",
    "PPPPError",
    "PPPPMessage",
    "PPPPSubscriber",
    "PositionStore",
    "PositionStoreError",
    "PublishError",
    "ReplicaUnavailable",
    "SQLitePositionStore",
    "Subscription",
]
