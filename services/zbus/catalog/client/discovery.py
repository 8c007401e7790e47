"""Finding the DBP catalog: its UDP beacon, sent and heard.

The DBP spec attaches a beacon to the catalog "so anyone who knows what to listen for
can find" it (seed 004, "Goals"); ``services/zbus/common/protocols/beacon.py`` defines the
two payloads. :class:`BeaconSender` announces a catalog once a second on UDP port 5245
(as Hermes does); :func:`discover` listens for one and returns the catalog's TCP
endpoint.

Broadcast does not cross hosts in containers or Kubernetes, so :func:`discover` takes a
``fallback`` endpoint to use when nothing is heard. Loopback broadcast is not reliable
either, so a sender can address any list of destinations, e.g. ``127.0.0.1`` and
``255.255.255.255`` together.

Listeners bind with ``SO_REUSEADDR`` and ``SO_REUSEPORT``, so several of them run on one
host. Broadcast datagrams reach all of them; a unicast datagram (to ``127.0.0.1``)
reaches one of them only, which is how the kernel shares a reused port.

Example::

    endpoint = await discover(3.0, fallback="tcp://catalog:5246")
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import uuid
from collections.abc import Sequence
from typing import Final

from zbus.catalog.client.base import StartStop
from zbus.common.protocols.beacon import (
    BEACON_PORT,
    Beacon,
    HermesBeacon,
    decode_beacon,
    encode_beacon,
)
from zbus.common.protocols.dbp import SPEC, BeaconFormat, Dialect
from zbus.common.protocols.errors import ProtocolError
from zbus.errors import ZbusError

__all__ = ["BROADCAST", "BeaconSender", "CatalogNotFound", "discover"]

log = logging.getLogger(__name__)

#: The limited broadcast address: every host on the local network segment.
BROADCAST: Final = "255.255.255.255"
#: The catalog's DBP ROUTER port (seed 004).
CATALOG_PORT: Final = 5246


class CatalogNotFound(ZbusError, LookupError):
    """No catalog beacon was heard and no fallback endpoint was configured."""


def _endpoint(host: str, port: int) -> str:
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


class BeaconSender(StartStop):
    """Announce a catalog's TCP port by UDP beacon every ``interval`` seconds.

    Args:
        tcp_port: the catalog's DBP ROUTER port, announced in the beacon.
        addresses: where to send, each to ``beacon_port`` (default: broadcast).
        beacon_port: the UDP port listeners bind (5245).
        interval: seconds between beacons (Hermes and Zyre: once a second).
        dialect: ``SPEC`` sends the zbus beacon, ``HERMES`` sends ``SHALOM <port>``.
        host: the zbus beacon's host, for catalogs whose source address is not the one
            to connect to (containers, NAT); ``""`` means the source address.
        instance: the zbus beacon's 16-byte instance UUID (default: a new one).

    The zbus beacon's last datagram, sent by :meth:`stop`, carries port 0: "the catalog
    is leaving".
    """

    def __init__(
        self,
        tcp_port: int = CATALOG_PORT,
        *,
        addresses: Sequence[str] = (BROADCAST,),
        beacon_port: int = BEACON_PORT,
        interval: float = 1.0,
        dialect: Dialect = SPEC,
        host: str = "",
        instance: bytes | None = None,
    ) -> None:
        if not interval > 0:
            raise ValueError("interval must be positive")
        self.addresses = tuple(addresses)
        self.beacon_port = beacon_port
        self.interval = interval
        self.dialect = dialect
        self.instance = instance if instance is not None else uuid.uuid4().bytes
        self.host = host
        self.tcp_port = tcp_port
        #: ``sent``: datagrams sent; ``errors``: sends the network refused.
        self.counters: dict[str, int] = {"sent": 0, "errors": 0}
        self._refused: set[str] = set()
        self.payload = self._payload(tcp_port)
        self._sock: socket.socket | None = None
        self._task: asyncio.Task[None] | None = None

    def _payload(self, port: int) -> bytes:
        if self.dialect.beacon is BeaconFormat.SHALOM:
            return encode_beacon(HermesBeacon(port))
        return encode_beacon(Beacon(self.instance, port, self.host))

    async def start(self) -> None:
        """Open the socket and start sending (the first beacon goes out at once)."""
        if self._task is not None:
            return
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        sock.setblocking(False)
        self._sock = sock
        self._task = asyncio.create_task(self._send_loop(), name="catalog-beacon")

    async def stop(self) -> None:
        """Stop sending; a zbus beacon announces the departure with port 0."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._sock is not None:
            if self.dialect.beacon is BeaconFormat.ZBUS:
                self._send_once(self._payload(0))
            self._sock.close()
            self._sock = None

    def _send_once(self, payload: bytes) -> None:
        assert self._sock is not None
        for address in self.addresses:
            try:
                self._sock.sendto(payload, (address, self.beacon_port))
            except OSError as exc:
                # No route for broadcast, a full buffer: the next beacon tries again. The
                # first refusal of each address is a warning, the rest are counted.
                self.counters["errors"] += 1
                level = logging.DEBUG if address in self._refused else logging.WARNING
                self._refused.add(address)
                log.log(level, "beacon to %s:%s not sent: %s", address, self.beacon_port, exc)
            else:
                self.counters["sent"] += 1

    async def _send_loop(self) -> None:
        while True:
            self._send_once(self.payload)
            await asyncio.sleep(self.interval)  # the beacon's period


def _listener(bind: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.setblocking(False)
        sock.bind((bind, port))
    except OSError:
        sock.close()
        raise
    return sock


async def discover(
    timeout: float,  # noqa: ASYNC109
    *,
    port: int = BEACON_PORT,
    fallback: str | None = None,
    dialect: Dialect = SPEC,
    bind: str = "0.0.0.0",
) -> str:
    """Listen for a catalog beacon and return the catalog's TCP endpoint.

    The endpoint is ``tcp://<host>:<port>``: the zbus beacon's host when it names one,
    else the beacon's source address. Datagrams that are not beacons of ``dialect``'s
    format, and zbus beacons announcing a departure (port 0), are ignored.

    Returns:
        The endpoint heard, or ``fallback`` when nothing was heard within ``timeout``
        seconds (or the beacon port could not be bound).

    Raises:
        CatalogNotFound: nothing was heard and ``fallback`` is None.
    """
    loop = asyncio.get_running_loop()
    try:
        sock = _listener(bind, port)
    except OSError as exc:
        if fallback is not None:
            log.warning("cannot listen for catalog beacons on udp %s: %s", port, exc)
            return fallback
        raise CatalogNotFound(
            f"cannot listen for catalog beacons on UDP port {port} ({exc}) and no fallback "
            "endpoint is configured"
        ) from exc
    try:
        async with asyncio.timeout(timeout):
            while True:
                data, (source, *_) = await loop.sock_recvfrom(sock, 2048)
                try:
                    beacon = decode_beacon(data, dialect)
                except ProtocolError:
                    continue
                if beacon.port == 0:
                    continue
                host = beacon.host if isinstance(beacon, Beacon) and beacon.host else source
                return _endpoint(host, beacon.port)
    except TimeoutError:
        if fallback is not None:
            return fallback
        raise CatalogNotFound(
            f"no catalog beacon heard on UDP port {port} within {timeout:g} s and no "
            "fallback endpoint is configured (beacons do not cross hosts in containers: "
            "configure the catalog's endpoint)"
        ) from None
    finally:
        sock.close()
