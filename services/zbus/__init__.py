"""zbus: a ZeroMQ messaging backbone (catalog, event bus, job broker, Spark workers).

``import zbus`` is the public API; everything named in ``__all__`` is promised and
keeps its name across minor versions. The modules behind it (``zbus.eventbus.client``,
``zbus.broker.client``, ...) stay importable but may move. ``import zbus`` itself is
light (pyzmq, no client): a client is imported when one of its names is first used, as
in ``from zbus import EventBusClient`` or ``zbus.BrokerClient(...)``.

Publish and subscribe::

    with zbus.EventBusClient("tcp://127.0.0.1:5556", producer="me") as bus:
        bus.publish("/sensors/t1", {"celsius": 21.5}, confirm=True)

Speak mc0 (MCollective's 0MQ connector protocol) to the bus's mc0 door::

    with zbus.Mc0Client("tcp://127.0.0.1:61616") as client:
        client.subscribe("mcollective nodes")
        client.put("mcollective nodes", b"hello", {"X-REPLY-TO": "mcollective reply me"})
        print(client.next(timeout=5))

Receive every event under a prefix exactly once, in order, through the PPPP door::

    with zbus.PPPPSubscriber("tcp://127.0.0.1:5560", "/sensors/", name="me") as sub:
        for message in sub:
            print(message.topic, message.unpack())

Run jobs::

    with zbus.BrokerClient("tcp://127.0.0.1:47291") as broker:
        print(broker.submit_and_wait("default", "echo", args=(1, 2), timeout=10))
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from zbus.common.protocols.errors import ProtocolError
from zbus.common.security import KeyPair, client_keys, generate_keys, load_keys
from zbus.common.version import __version__
from zbus.errors import ConfigError, ZbusError

if TYPE_CHECKING:
    from zbus.broker.client import (
        AsyncBrokerClient,
        BrokerClient,
        BrokerClientError,
        BrokerUnavailable,
        JobFailed,
        JobOptions,
    )
    from zbus.broker.client.worker import UnknownJobError, Worker, current_job_id
    from zbus.catalog.client.discovery import BeaconSender, CatalogNotFound, discover
    from zbus.catalog.client.node import (
        CatalogError,
        CatalogNode,
        CatalogReplyError,
        CatalogUnavailable,
        NodeState,
        RegistrationDenied,
        ServiceInfo,
    )
    from zbus.eventbus.client import (
        AsyncEventBusClient,
        AsyncPPPPSubscriber,
        AsyncSubscription,
        BusEndpoints,
        DialectError,
        Event,
        EventBusClient,
        LogPage,
        LogQueryError,
        LogReader,
        Mc0Client,
        Mc0Error,
        Mc0Message,
        PositionStore,
        PositionStoreError,
        PPPPError,
        PPPPMessage,
        PPPPSubscriber,
        PublishError,
        ReplicaUnavailable,
        SQLitePositionStore,
        Subscription,
    )

# Each client's name, and the module it is imported from at its first use.
# Loading every client (codecs, cores, asyncio) costs several times ``import zmq,
# msgpack``, so ``import zbus`` loads only the light names above, and a client when one
# of its names is used. The TYPE_CHECKING block says the same to type checkers, which do
# not see __getattr__ (so a misspelt name stays an error); tests/unit/test_package.py
# checks that the two agree.
_CLIENTS = {
    "AsyncBrokerClient": "zbus.broker.client",
    "AsyncEventBusClient": "zbus.eventbus.client",
    "AsyncPPPPSubscriber": "zbus.eventbus.client",
    "AsyncSubscription": "zbus.eventbus.client",
    "BeaconSender": "zbus.catalog.client.discovery",
    "BrokerClient": "zbus.broker.client",
    "BrokerClientError": "zbus.broker.client",
    "BrokerUnavailable": "zbus.broker.client",
    "BusEndpoints": "zbus.eventbus.client",
    "CatalogError": "zbus.catalog.client.node",
    "CatalogNode": "zbus.catalog.client.node",
    "CatalogNotFound": "zbus.catalog.client.discovery",
    "CatalogReplyError": "zbus.catalog.client.node",
    "CatalogUnavailable": "zbus.catalog.client.node",
    "DialectError": "zbus.eventbus.client",
    "Event": "zbus.eventbus.client",
    "EventBusClient": "zbus.eventbus.client",
    "JobFailed": "zbus.broker.client",
    "JobOptions": "zbus.broker.client",
    "LogPage": "zbus.eventbus.client",
    "LogQueryError": "zbus.eventbus.client",
    "LogReader": "zbus.eventbus.client",
    "Mc0Client": "zbus.eventbus.client",
    "Mc0Error": "zbus.eventbus.client",
    "Mc0Message": "zbus.eventbus.client",
    "NodeState": "zbus.catalog.client.node",
    "PPPPError": "zbus.eventbus.client",
    "PPPPMessage": "zbus.eventbus.client",
    "PPPPSubscriber": "zbus.eventbus.client",
    "PositionStore": "zbus.eventbus.client",
    "PositionStoreError": "zbus.eventbus.client",
    "PublishError": "zbus.eventbus.client",
    "ReplicaUnavailable": "zbus.eventbus.client",
    "RegistrationDenied": "zbus.catalog.client.node",
    "SQLitePositionStore": "zbus.eventbus.client",
    "ServiceInfo": "zbus.catalog.client.node",
    "Subscription": "zbus.eventbus.client",
    "UnknownJobError": "zbus.broker.client.worker",
    "Worker": "zbus.broker.client.worker",
    "current_job_id": "zbus.broker.client.worker",
    "discover": "zbus.catalog.client.discovery",
}

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        """A client's name, imported at its first use (PEP 562)."""
        module = _CLIENTS.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # later lookups find it without calling this function
        return value


def __dir__() -> list[str]:
    """What ``dir(zbus)`` lists: every public name, loaded yet or not."""
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "AsyncBrokerClient",
    "AsyncEventBusClient",
    "AsyncPPPPSubscriber",
    "AsyncSubscription",
    "BeaconSender",
    "BrokerClient",
    "BrokerClientError",
    "BrokerUnavailable",
    "BusEndpoints",
    "CatalogError",
    "CatalogNode",
    "CatalogNotFound",
    "CatalogReplyError",
    "CatalogUnavailable",
    "ConfigError",
    "DialectError",
    "Event",
    "EventBusClient",
    "JobFailed",
    "JobOptions",
    "KeyPair",
    "LogPage",
    "LogQueryError",
    "LogReader",
    "Mc0Client",
    "Mc0Error",
    "Mc0Message",
    "NodeState",
    "PPPPError",
    "PPPPMessage",
    "PPPPSubscriber",
    "PositionStore",
    "PositionStoreError",
    "ProtocolError",
    "PublishError",
    "RegistrationDenied",
    "ReplicaUnavailable",
    "SQLitePositionStore",
    "ServiceInfo",
    "Subscription",
    "UnknownJobError",
    "Worker",
    "ZbusError",
    "__version__",
    "client_keys",
    "current_job_id",
    "discover",
    "generate_keys",
    "load_keys",
]
