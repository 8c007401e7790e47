"""zbus: a ZeroMQ messaging backbone (catalog, event bus, job broker, Spark workers).

``import zbus`` is the public API; everything named in ``__all__`` is promised and
keeps its name across minor versions. The modules behind it (``zbus.eventbus.client``,
``zbus.broker.client``, ...) stay importable but may move.

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
from zbus.common.protocols.errors import ProtocolError
from zbus.common.security import KeyPair, client_keys, generate_keys, load_keys
from zbus.common.version import __version__
from zbus.errors import ConfigError, ZbusError
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
    SQLitePositionStore,
    Subscription,
)

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
