"""eMQP/1.0 commands: one frozen, slotted dataclass per command and their union.

Part of the eMQP codec (:mod:`zbus.common.protocols.emqp` is the facade). The frame
layout of each command is in its docstring and in ``docs/protocols/emqp.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Final, TypeAlias

__all__ = [
    "DEFAULT_QUEUE_WEIGHT",
    "MAX_QUEUE_WEIGHT",
    "MIN_QUEUE_WEIGHT",
    "PROTOCOL",
    "VERSION",
    "Ack",
    "Disconnect",
    "EmqpCommand",
    "Headers",
    "Heartbeat",
    "Inform",
    "JsonValue",
    "Kbye",
    "Queues",
    "Ready",
    "Reply",
    "Request",
    "Schedule",
    "Unschedule",
]

PROTOCOL: Final = "emqp"
#: The version this codec writes by default (frame 1 is ``b"eMQP/" + version``).
VERSION: Final = "1.0"
#: Weight given to queues named in the spec's CSV form, which carries no weights.
#: eventmq's own default queue list is ``[[10, "default"]]``.
DEFAULT_QUEUE_WEIGHT: Final = 10
#: The weights an INFORM may carry: a signed 64-bit integer, what any peer's JSON
#: library reads back as an integer. Anything beyond is refused, not rounded.
MIN_QUEUE_WEIGHT: Final = -(1 << 63)
MAX_QUEUE_WEIGHT: Final = (1 << 63) - 1

#: Headers in wire order; a bare flag such as ``reply-requested`` has the value ``""``.
Headers: TypeAlias = tuple[tuple[str, str], ...]
#: INFORM queues as ``(name, weight)`` pairs, in wire order.
Queues: TypeAlias = tuple[tuple[str, int], ...]
JsonValue: TypeAlias = bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None


# --------------------------------------------------------------------------- commands


@dataclass(frozen=True, slots=True)
class _Message:
    """What every command carries: its msgid (frame 3) and the version of frame 1.

    ``version`` is keyword-only, so each command's own fields follow ``msgid`` in its
    constructor as they follow it on the wire.
    """

    COMMAND: ClassVar[str]
    msgid: str
    version: str = field(default=VERSION, kw_only=True)


@dataclass(frozen=True, slots=True)
class Request(_Message):
    """REQUEST (7 frames): a client asks for a job on a named queue.

    The eventmq router forwards a client's REQUEST to a jobmanager unchanged (same msgid),
    so the broker sees and sends the same layout on both of its ROUTER sockets.

    Attributes:
        msgid: unique id of this message (frame 3); replies refer to it.
        queue: queue name (frame 4). eventmq routes an unknown name to ``default``.
        headers: frame 5, e.g. ``(("reply-requested", ""), ("timeout", "10"))``.
        body: frame 6, opaque in the spec; eventmq's JSON call (:func:`build_call_body`).
        version: the version of frame 1 (``"1.0"`` unless a peer sent another).
    """

    COMMAND: ClassVar[str] = "REQUEST"
    queue: str
    headers: Headers
    body: bytes


@dataclass(frozen=True, slots=True)
class Inform(_Message):
    """INFORM (5 or 6 frames): a worker (or eventmq scheduler) announces itself.

    Attributes:
        msgid: unique id; eventmq's router ACKs it.
        queues: ``(name, weight)`` pairs. Frame 4 is the spec's CSV of names (each gets
            :data:`DEFAULT_QUEUE_WEIGHT`) or eventmq's JSON ``[[weight, name], ...]``; both
            decode in every dialect, the dialect's ``json_queues`` picks the one encoded.
            An empty frame 4 (an eventmq scheduler sends one) is ``()``.
        worker_type: eventmq's frame 5, ``"worker"`` or ``"scheduler"``; ``None`` for the
            spec's 5-frame layout.
    """

    COMMAND: ClassVar[str] = "INFORM"
    queues: Queues
    worker_type: str | None = None


@dataclass(frozen=True, slots=True)
class Ready(_Message):
    """READY (4 frames): a worker has one free slot (eventmq sends one READY per slot)."""

    COMMAND: ClassVar[str] = "READY"


@dataclass(frozen=True, slots=True)
class Reply(_Message):
    """REPLY (5 or 6 frames). Three senders use it; the layouts do not overlap:

    - spec: ``[.., REPLY, msgid, reply]``: ``request_id`` is ``None``.
    - eventmq router to client, 5 frames: ``body`` is the request's msgid as text and
      only says the job was handed to a worker (not a result).
    - eventmq worker to router, 6 frames: ``body`` is ``{"value": ...}`` JSON
      (:func:`parse_reply_value`) and ``request_id`` is the REQUEST's msgid.

    Attributes:
        msgid: this message's own id.
        body: frame 4, opaque to the codec in every dialect.
        request_id: frame 5 when present, the msgid of the REQUEST answered.
    """

    COMMAND: ClassVar[str] = "REPLY"
    body: bytes
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class Heartbeat(_Message):
    """HEARTBEAT (4 or 5 frames); eventmq appends the sender's ``time.time()`` as text."""

    COMMAND: ClassVar[str] = "HEARTBEAT"
    time: str | None = None


@dataclass(frozen=True, slots=True)
class Disconnect(_Message):
    """DISCONNECT (4 frames): the peer is going away (eventmq: a request to shut down)."""

    COMMAND: ClassVar[str] = "DISCONNECT"


@dataclass(frozen=True, slots=True)
class Ack(_Message):
    """ACK (5 frames, eventmq): the router accepted the INFORM whose msgid is ``ref_id``."""

    COMMAND: ClassVar[str] = "ACK"
    ref_id: str


@dataclass(frozen=True, slots=True)
class Kbye(_Message):
    """KBYE (4 frames, eventmq): goodbye; the peer forgets the sender."""

    COMMAND: ClassVar[str] = "KBYE"


@dataclass(frozen=True, slots=True)
class _ScheduleFrames(_Message):
    """The frames SCHEDULE and UNSCHEDULE share (eventmq sends both through one function).

    Frames 4..8: queue, headers, interval as decimal text (``-1`` when ``cron`` is used),
    the JSON call body, the cron expression (empty when an interval is used).
    """

    queue: str
    headers: Headers
    interval: int
    body: bytes
    cron: str


@dataclass(frozen=True, slots=True)
class Schedule(_ScheduleFrames):
    """SCHEDULE (9 frames, eventmq): run a job every ``interval`` seconds or on ``cron``.

    Exactly one of the two is set: eventmq's client refuses both or neither, and its
    scheduler fails on an interval of -1 with an empty cron expression.
    """

    COMMAND: ClassVar[str] = "SCHEDULE"


@dataclass(frozen=True, slots=True)
class Unschedule(_ScheduleFrames):
    """UNSCHEDULE (9 frames, eventmq): the same frames as SCHEDULE.

    eventmq's scheduler finds the job by a hash of the call body alone, and the interval
    and cron frames carry whatever the caller passed (by default ``-1`` and ``""``), so
    they are not cross-checked here.
    """

    COMMAND: ClassVar[str] = "UNSCHEDULE"


EmqpCommand: TypeAlias = (
    Request | Inform | Ready | Reply | Heartbeat | Disconnect | Ack | Kbye | Schedule | Unschedule
)
