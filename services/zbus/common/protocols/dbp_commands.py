"""DBP commands: the dataclasses, their union, the dialects and the command frames.

Part of the DBP codec (:mod:`zbus.common.protocols.dbp` is the one import); kept apart
so that the catalog's core and the beacon can name commands without the framing code.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PROTOCOL = "dbp"
DATAGRAM = "dbp/udp"

# Command frames (seed 004, frame 1 of each command).
INFO_REQUEST = b"u_U"
INFO_REPLY = b"o_O"
REGISTRATION = b"UwU"
UPDATE = b"UoU"
APPROVED = b"OwO"
DENIED = b"(O_O)"
DENIED_HERMES = b"OmO"
HEARTBEAT = b"<3"
DISCONNECT = b"</3"
AWK = b"u.u"

#: Largest UDP datagram zbus sends or accepts: an Ethernet MTU of 1,500 bytes less
#: IPv4/IPv6 and UDP headers and some tunnel overhead, so a datagram is never fragmented.
MAX_DATAGRAM = 1400

JSONObject = dict[str, Any]


class TimeEncoding(enum.Enum):
    """How the time frame (frame 2) carries the epoch time.

    The spec only says "time (current epoch time)".
    """

    #: Decimal text such as ``b"1763800000.25"``: digits and at most one ``.``.
    ASCII = "ascii"
    #: 4 bytes, IEEE 754 single precision, little-endian (``struct`` ``'<f'``). Hermes
    #: packs with native ``'f'``, which is little-endian on the x86 and ARM machines it
    #: runs on; zbus always reads and writes little-endian so the bytes do not depend on
    #: the host. A float32 epoch time has a resolution of 128 s in the 2020s.
    FLOAT32 = "float32"
    #: 8 bytes, IEEE 754 double precision, big-endian (``'>d'``, network order).
    FLOAT64 = "float64"


class BeaconFormat(enum.Enum):
    """Which UDP beacon a dialect announces the catalog with (see ``beacon.py``)."""

    #: zbus's binary beacon: magic, version, instance UUID, TCP port, host.
    ZBUS = "zbus"
    #: Hermes's ``b"SHALOM <tcp port>"``.
    SHALOM = "shalom"


@dataclass(frozen=True, slots=True)
class Dialect:
    """How zbus writes DBP for one kind of peer. Decoding is the same in every dialect.

    Attributes:
        denied_token: frame 1 of DENIED: ``b"(O_O)"`` (spec) or ``b"OmO"`` (Hermes).
        time_encoding: the time encoding of commands whose ``time_encoding`` is None.
        empty_body_frame: send ``b""`` as frame 3 when a command has no body. Hermes
            needs it: its receiver drops any message shorter than
            ``[command, time, body]``.
        json_separators: ``json.dumps`` separators; Hermes uses Python's default.
        json_ensure_ascii: escape non-ASCII text in JSON bodies, as Hermes does.
        beacon: the beacon format announced and listened for.
    """

    denied_token: bytes = DENIED
    time_encoding: TimeEncoding = TimeEncoding.ASCII
    empty_body_frame: bool = False
    json_separators: tuple[str, str] = (",", ":")
    json_ensure_ascii: bool = False
    beacon: BeaconFormat = BeaconFormat.ZBUS

    def __post_init__(self) -> None:
        if self.denied_token not in (DENIED, DENIED_HERMES):
            raise ValueError(f"denied_token must be {DENIED!r} or {DENIED_HERMES!r}")


#: The spec as written, with ASCII decimal times and compact JSON.
SPEC = Dialect()
#: lnestelroad/Hermes (PyPI Hermes-lnestelroad 1.0.2), the spec editor's implementation.
HERMES = Dialect(
    denied_token=DENIED_HERMES,
    time_encoding=TimeEncoding.FLOAT32,
    empty_body_frame=True,
    json_separators=(", ", ": "),
    json_ensure_ascii=True,
    beacon=BeaconFormat.SHALOM,
)


# Every command carries ``time`` (seconds since the epoch) and ``time_encoding``.
# ``time_encoding=None`` means "the dialect's default" when encoding; decoding always
# fills in the encoding it saw, so a reply can use ``time_encoding=request.time_encoding``.


@dataclass(frozen=True, slots=True)
class InfoRequest:
    """C: REQUEST information about one service, or the list of active services.

    ``query`` is a service name; ``""`` or ``"*"`` asks for every active service (the
    spec: "either a specified services name or a list of currently active services").
    It must be printable text (spec: "printable string").
    """

    query: str
    time: float
    time_encoding: TimeEncoding | None = None

    @property
    def wants_list(self) -> bool:
        """True when the request asks for the list of all active services."""
        return self.query in ("", "*")


@dataclass(frozen=True, slots=True)
class InfoReply:
    """B: REPLY to an information request with a JSON object."""

    info: JSONObject
    time: float
    time_encoding: TimeEncoding | None = None


@dataclass(frozen=True, slots=True)
class Registration:
    """S: REGISTRATION with the service's description as a JSON object.

    The codec accepts any object; which keys a registration needs is the catalog's
    business (see :func:`missing_registration_fields`).
    """

    info: JSONObject
    time: float
    time_encoding: TimeEncoding | None = None


@dataclass(frozen=True, slots=True)
class Update:
    """S: UPDATE of some registered values, as a JSON object."""

    changes: JSONObject
    time: float
    time_encoding: TimeEncoding | None = None


@dataclass(frozen=True, slots=True)
class Approved:
    """B: APPROVED, with optional configuration changes (``{}`` for none)."""

    config: JSONObject
    time: float
    time_encoding: TimeEncoding | None = None


@dataclass(frozen=True, slots=True)
class Denied:
    """B: DENIED, with zero or more non-empty reasons, one frame each."""

    reasons: tuple[str, ...]
    time: float
    time_encoding: TimeEncoding | None = None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """S or B: HEARTBEAT naming the sending service."""

    service: str
    time: float
    time_encoding: TimeEncoding | None = None


@dataclass(frozen=True, slots=True)
class Disconnect:
    """S or B: DISCONNECT; the receiver sends nothing more to the sender."""

    time: float
    time_encoding: TimeEncoding | None = None


@dataclass(frozen=True, slots=True)
class Awk:
    """B: AWK, the acknowledgement of an UPDATE (Hermes calls it "Acknowledged")."""

    time: float
    time_encoding: TimeEncoding | None = None


DBPCommand = (
    InfoRequest
    | InfoReply
    | Registration
    | Update
    | Approved
    | Denied
    | Heartbeat
    | Disconnect
    | Awk
)

#: The service fields the spec requires "at a minimum" ("name, ip address, port,
#: function, and heartbeat timing"), under the keys zbus registers and stores them with.
REGISTRATION_FIELDS = ("name", "ip", "port", "function", "heartbeat_interval")

#: Every name a REGISTRATION or UPDATE may give a field of :data:`REGISTRATION_FIELDS`
#: under, the stored (canonical) one first: what a reader of the spec text would write.
REGISTRATION_ALIASES: dict[str, tuple[str, ...]] = {
    "name": ("name",),
    "ip": ("ip", "address", "ip_address"),
    "port": ("port",),
    "function": ("function",),
    "heartbeat_interval": ("heartbeat_interval", "heartbeat"),
}

# The ranges of the numbers DBP carries, shared by the catalog, its node library and
# their settings; docs/protocols/dbp.md lists them.
#: TCP and UDP ports named in a body (``port``, an interface's ``port``, ``udp_heartbeat``).
PORT_RANGE = (1, 65535)
#: Seconds between heartbeats (a registration's ``heartbeat_interval``, APPROVED's).
HEARTBEAT_INTERVAL_RANGE = (0.01, 3600.0)
#: Silent intervals after which a peer counts as gone (APPROVED's ``heartbeat_misses``).
HEARTBEAT_MISSES_RANGE = (1, 100)
#: Bytes of a REGISTRATION or UPDATE body, and of a node's information with every UPDATE
#: merged in (compact JSON): what the catalog stores and repeats in info replies.
MAX_INFO_BYTES = 65536
#: Characters of a service name and of an address (``ip``).
MAX_NAME_CHARS = 255


def missing_registration_fields(info: Mapping[str, Any]) -> tuple[str, ...]:
    """The keys of :data:`REGISTRATION_FIELDS` that ``info`` gives under none of their
    names (:data:`REGISTRATION_ALIASES`), or only as null.

    A Hermes registration (``name``, ``interfaces``, ``reg_time``, ``topics``) lacks all
    but ``name``; whether to approve it anyway is the catalog's decision.
    """
    return tuple(
        key
        for key in REGISTRATION_FIELDS
        if all(info.get(alias) is None for alias in REGISTRATION_ALIASES[key])
    )


_NAMES: dict[type, str] = {
    InfoRequest: "REQUEST",
    InfoReply: "REPLY",
    Registration: "REGISTRATION",
    Update: "UPDATE",
    Approved: "APPROVED",
    Denied: "DENIED",
    Heartbeat: "HEARTBEAT",
    Disconnect: "DISCONNECT",
    Awk: "AWK",
}


def name_of(cmd: object) -> str:
    return _NAMES.get(type(cmd), type(cmd).__name__)
