"""Clients of the event bus: batched, confirmed, idempotent publishing and exact subscriptions.

:class:`EventBusClient` (blocking) and :class:`AsyncEventBusClient` (``zmq.asyncio``)
speak zbus's extensions (ADR 0002): ``ZB-PUB`` batches on the COLLECTOR, paged
``ZB-SNAPSHOT`` queries on the SNAPSHOT socket, and the batched STREAM. The subscription
logic (snapshot/stream merge, gap repair, failover, reset) is the sans-I/O
:class:`~services.eventbus.sync.SubscriptionCore`; these modules only move frames.

Threads: a client's publishing methods belong to one thread at a time, and so does each
subscription; a subscription and the publisher may live in different threads.

Without ``confirm`` publishing is fire-and-forget and :meth:`close` drops whatever is
still queued (linger 0): ask for a confirm where an event must not be lost.

The parts, all re-exported here (import from this module):

- :mod:`services.eventbus.client_common`: :class:`BusEndpoints`, :class:`PublishError`
  and the outbox that builds ``ZB-PUB`` batches and matches their confirms;
- :mod:`services.eventbus.client_base`: what both clients and their subscriptions share;
- :mod:`services.eventbus.client_blocking`: :class:`EventBusClient`, :class:`Subscription`;
- :mod:`services.eventbus.client_async`: :class:`AsyncEventBusClient`,
  :class:`AsyncSubscription`;
- :mod:`services.eventbus.log_reader`: :class:`LogReader`, paged reads of a bus's log.
"""

from services.eventbus.client_async import AsyncEventBusClient, AsyncSubscription
from services.eventbus.client_blocking import EventBusClient, Subscription
from services.eventbus.client_common import CHUNK_BYTES as CHUNK_BYTES
from services.eventbus.client_common import CHUNK_EVENTS as CHUNK_EVENTS
from services.eventbus.client_common import BusEndpoints, PublishError
from services.eventbus.client_common import EndpointsArg as EndpointsArg
from services.eventbus.client_common import Item as Item
from services.eventbus.log_reader import LogPage, LogQueryError, LogReader
from services.eventbus.sync import Event

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
