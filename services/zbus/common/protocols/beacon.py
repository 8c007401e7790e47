"""UDP beacons that announce the DBP catalog: sans-I/O codec.

The DBP spec promises a beacon "so anyone who knows what to listen for can find" the
catalog, but defines no payload (seed 004, "Goals"). There are two formats, and the
DBP dialect picks which one is sent and listened for (``Dialect.beacon``); decoding
never guesses a format from the bytes.

zbus beacon (:class:`Beacon`, ``BeaconFormat.ZBUS``), all integers in network order::

    offset  size  field
    0       4     b"ZBUS"
    4       1     version, 1 (0 is invalid)
    5       16    instance: the catalog process's UUID, new at every start
    21      2     TCP port of the DBP ROUTER socket; 0 announces that the catalog leaves
    23      1     n, the length of host
    24      n     host: where to connect, UTF-8; empty means the beacon's source address

It follows the ZRE beacon of Zyre (``ZRE``, version, UUID, port; port 0 for departure),
so a listener drops foreign datagrams by comparing the first 5 bytes, and a restarted
catalog is told from the old one by its UUID. The host is added because the source
address of a datagram is often not the address to connect to: a catalog in a container
or behind NAT announces the name its clients can reach. A datagram of version 1 ends
after the host; a later version may append fields after it, which this decoder skips,
so older listeners keep working.

Hermes beacon (:class:`HermesBeacon`, ``BeaconFormat.SHALOM``): the ASCII text
``SHALOM <tcp port>``, e.g. ``b"SHALOM 5246"``, as lnestelroad/Hermes broadcasts it to
UDP port 5245 once a second.
"""

from __future__ import annotations

from dataclasses import dataclass

from zbus.common.protocols.dbp import SPEC, BeaconFormat, Dialect
from zbus.common.protocols.errors import FrameValueError, UnknownCommandError

__all__ = [
    "BEACON_PORT",
    "MAGIC",
    "SHALOM",
    "VERSION",
    "Beacon",
    "HermesBeacon",
    "decode_beacon",
    "encode_beacon",
]

PROTOCOL = "beacon"

#: UDP port the catalog broadcasts its beacon to (zbus and Hermes alike).
BEACON_PORT = 5245
MAGIC = b"ZBUS"
VERSION = 1
SHALOM = b"SHALOM "

_HEADER = 24  # magic, version, instance, port, host length


@dataclass(frozen=True, slots=True)
class Beacon:
    """The zbus catalog beacon.

    Attributes:
        instance: 16 bytes, the catalog process's UUID (``uuid.UUID.bytes``).
        port: TCP port of the catalog's DBP socket; 0 means the catalog is leaving.
        host: host name or address to connect to; ``""`` means the beacon's source.
        version: the format version; 1 is the one this module writes.
    """

    instance: bytes
    port: int
    host: str = ""
    version: int = VERSION


@dataclass(frozen=True, slots=True)
class HermesBeacon:
    """The Hermes beacon, ``SHALOM <port>``: only the catalog's TCP port."""

    port: int


def encode_beacon(beacon: Beacon | HermesBeacon) -> bytes:
    """The datagram for ``beacon``; its type picks the format.

    Raises:
        FrameValueError: a field does not fit the format.
    """
    if type(beacon) is HermesBeacon:
        if not 1 <= beacon.port <= 0xFFFF:
            raise FrameValueError(PROTOCOL, "a port in 1..65535", command="SHALOM", got=beacon.port)
        return SHALOM + str(beacon.port).encode("ascii")
    if type(beacon) is not Beacon:
        raise TypeError(f"not a beacon: {beacon!r}")
    if len(beacon.instance) != 16:
        raise FrameValueError(
            PROTOCOL, "a 16-byte instance UUID", command="ZBUS", got=beacon.instance
        )
    if not 0 <= beacon.port <= 0xFFFF:
        raise FrameValueError(PROTOCOL, "a port in 0..65535", command="ZBUS", got=beacon.port)
    if not 1 <= beacon.version <= 0xFF:
        raise FrameValueError(PROTOCOL, "a version in 1..255", command="ZBUS", got=beacon.version)
    try:
        host = beacon.host.encode("utf-8")
    except UnicodeEncodeError:
        raise FrameValueError(
            PROTOCOL, "a host encodable as UTF-8", command="ZBUS", got=beacon.host
        ) from None
    if len(host) > 0xFF:
        raise FrameValueError(
            PROTOCOL, "a host of at most 255 UTF-8 bytes", command="ZBUS", got=beacon.host
        )
    return b"".join(
        (
            MAGIC,
            bytes((beacon.version,)),
            bytes(beacon.instance),
            beacon.port.to_bytes(2, "big"),
            bytes((len(host),)),
            host,
        )
    )


def decode_beacon(data: bytes, dialect: Dialect = SPEC) -> Beacon | HermesBeacon:
    """Decode a beacon datagram in the format of ``dialect.beacon``.

    Raises:
        ProtocolError: ``data`` is not a beacon of that format.
    """
    data = bytes(data)
    if dialect.beacon is BeaconFormat.SHALOM:
        return _decode_shalom(data)
    return _decode_zbus(data)


def _decode_zbus(data: bytes) -> Beacon:
    if data[:4] != MAGIC:
        raise UnknownCommandError(
            PROTOCOL, "a zbus beacon starting with b'ZBUS'", command="ZBUS", got=data
        )
    if len(data) < _HEADER:
        raise FrameValueError(
            PROTOCOL,
            f"at least {_HEADER} bytes (magic, version, UUID, port, host length)",
            command="ZBUS",
            got=data,
        )
    version = data[4]
    if version == 0:
        raise FrameValueError(PROTOCOL, "a version of 1 or more", command="ZBUS", got=data)
    end = _HEADER + data[23]
    if len(data) < end:
        raise FrameValueError(PROTOCOL, f"{data[23]} bytes of host", command="ZBUS", got=data)
    if version == 1 and len(data) != end:
        raise FrameValueError(
            PROTOCOL, "a version 1 beacon to end after the host", command="ZBUS", got=data
        )
    try:
        host = data[_HEADER:end].decode("utf-8")
    except UnicodeDecodeError:
        raise FrameValueError(PROTOCOL, "the host as UTF-8", command="ZBUS", got=data) from None
    return Beacon(data[5:21], int.from_bytes(data[21:23], "big"), host, version)


def _decode_shalom(data: bytes) -> HermesBeacon:
    if not data.startswith(SHALOM):
        raise UnknownCommandError(
            PROTOCOL, "a Hermes beacon starting with b'SHALOM '", command="SHALOM", got=data
        )
    digits = data[len(SHALOM) :]
    # Canonical decimal only (no sign, no spaces, no leading zero), as Hermes writes it.
    if not (digits.isdigit() and len(digits) <= 5 and digits[:1] != b"0"):
        raise FrameValueError(
            PROTOCOL, "a port in ASCII decimal after 'SHALOM '", command="SHALOM", got=data
        )
    port = int(digits)
    if port > 0xFFFF:
        raise FrameValueError(PROTOCOL, "a port in 1..65535", command="SHALOM", got=data)
    return HermesBeacon(port)
