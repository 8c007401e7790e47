"""eMQP/1.0, the EventMQ job protocol: a sans-I/O codec.

Every message, after the ROUTER identity frame the transport takes off, is::

    [b"", b"eMQP/1.0", COMMAND, msgid, ...command frames]

The empty frame 0 and the version frame 1 are listed by the spec in every command table,
so they belong to the codec (ADR 0001). ``docs/protocols/emqp.md`` lists every layout and
every decision taken where the spec is silent; the short version:

- The spec dialect (:data:`SPEC`) follows the eMQP tables. :data:`EVENTMQ` is what
  eventmq 0.3.13 sends: JSON INFORM queues, a JSON call body on REQUEST and SCHEDULE,
  and the commands ACK, KBYE, SCHEDULE and UNSCHEDULE that the spec does not list.
- Trailing frames that eventmq appends (the INFORM client type, the worker REPLY's
  request id, the HEARTBEAT time) are optional fields: ``None`` means the spec's shorter
  layout, so they decode and encode the same way in every dialect.
- Headers are eventmq's comma-separated text (``reply-requested,retry-count:1``), the only
  encoding any peer uses for the spec's "dictionary of headers".
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from typing import Any, ClassVar, Final, NoReturn, TypeAlias

from services.common.protocols.errors import (
    FrameCountError,
    FrameValueError,
    UnknownCommandError,
    ascii_uint,
    expect_count,
    text,
)

__all__ = [
    "DEFAULT_QUEUE_WEIGHT",
    "EVENTMQ",
    "PROTOCOL",
    "SPEC",
    "VERSION",
    "Ack",
    "Dialect",
    "Disconnect",
    "EmqpCommand",
    "EventmqCall",
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
    "build_call_body",
    "build_reply_value",
    "decode",
    "encode",
    "format_headers",
    "has_header",
    "header",
    "parse_call_body",
    "parse_headers",
    "parse_reply_value",
]

PROTOCOL: Final = "emqp"
#: The version this codec writes by default (frame 1 is ``b"eMQP/" + version``).
VERSION: Final = "1.0"
#: Weight given to queues named in the spec's CSV form, which carries no weights.
#: eventmq's own default queue list is ``[[10, "default"]]``.
DEFAULT_QUEUE_WEIGHT: Final = 10

#: Headers in wire order; a bare flag such as ``reply-requested`` has the value ``""``.
Headers: TypeAlias = tuple[tuple[str, str], ...]
#: INFORM queues as ``(name, weight)`` pairs, in wire order.
Queues: TypeAlias = tuple[tuple[str, int], ...]
JsonValue: TypeAlias = bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None

_V10: Final = b"eMQP/1.0"
# A version frame other than 1.0 is accepted when it is "eMQP/" and a dotted number, and
# recorded on the command: eventmq never checks the frame, and a future minor version
# should reach the service (which may refuse it) rather than be dropped as noise here.
_VERSION_RE: Final = re.compile(rb"eMQP/([0-9]{1,9}(?:\.[0-9]{1,9}){0,3})")
_VERSION_TEXT_RE: Final = re.compile(r"[0-9]{1,9}(?:\.[0-9]{1,9}){0,3}")
_VERSION_FRAMES: dict[str, bytes] = {VERSION: _V10}

_CACHE_LIMIT: Final = 512


# --------------------------------------------------------------------------- commands


@dataclass(frozen=True, slots=True)
class Request:
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
    msgid: str
    queue: str
    headers: Headers
    body: bytes
    version: str = field(default=VERSION, kw_only=True)


@dataclass(frozen=True, slots=True)
class Inform:
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
    msgid: str
    queues: Queues
    worker_type: str | None = None
    version: str = field(default=VERSION, kw_only=True)


@dataclass(frozen=True, slots=True)
class Ready:
    """READY (4 frames): a worker has one free slot (eventmq sends one READY per slot)."""

    COMMAND: ClassVar[str] = "READY"
    msgid: str
    version: str = field(default=VERSION, kw_only=True)


@dataclass(frozen=True, slots=True)
class Reply:
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
    msgid: str
    body: bytes
    request_id: str | None = None
    version: str = field(default=VERSION, kw_only=True)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """HEARTBEAT (4 or 5 frames); eventmq appends the sender's ``time.time()`` as text."""

    COMMAND: ClassVar[str] = "HEARTBEAT"
    msgid: str
    time: str | None = None
    version: str = field(default=VERSION, kw_only=True)


@dataclass(frozen=True, slots=True)
class Disconnect:
    """DISCONNECT (4 frames): the peer is going away (eventmq: a request to shut down)."""

    COMMAND: ClassVar[str] = "DISCONNECT"
    msgid: str
    version: str = field(default=VERSION, kw_only=True)


@dataclass(frozen=True, slots=True)
class Ack:
    """ACK (5 frames, eventmq): the router accepted the INFORM whose msgid is ``ref_id``."""

    COMMAND: ClassVar[str] = "ACK"
    msgid: str
    ref_id: str
    version: str = field(default=VERSION, kw_only=True)


@dataclass(frozen=True, slots=True)
class Kbye:
    """KBYE (4 frames, eventmq): goodbye; the peer forgets the sender."""

    COMMAND: ClassVar[str] = "KBYE"
    msgid: str
    version: str = field(default=VERSION, kw_only=True)


@dataclass(frozen=True, slots=True)
class Schedule:
    """SCHEDULE (9 frames, eventmq): run a job every ``interval`` seconds or on ``cron``.

    Frames 4..8: queue, headers, interval as decimal text (``-1`` when ``cron`` is used),
    the JSON call body, the cron expression (empty when an interval is used). Exactly one
    of the two is set: eventmq's client refuses both or neither, and its scheduler fails on
    an interval of -1 with an empty cron expression.
    """

    COMMAND: ClassVar[str] = "SCHEDULE"
    msgid: str
    queue: str
    headers: Headers
    interval: int
    body: bytes
    cron: str
    version: str = field(default=VERSION, kw_only=True)


@dataclass(frozen=True, slots=True)
class Unschedule:
    """UNSCHEDULE (9 frames, eventmq): the same frames as SCHEDULE.

    eventmq's client sends it through the same function as SCHEDULE, so the layout is
    identical; its scheduler finds the job by a hash of the call body alone, and the
    interval and cron frames carry whatever the caller passed (by default ``-1`` and
    ``""``), so they are not cross-checked here.
    """

    COMMAND: ClassVar[str] = "UNSCHEDULE"
    msgid: str
    queue: str
    headers: Headers
    interval: int
    body: bytes
    cron: str
    version: str = field(default=VERSION, kw_only=True)


EmqpCommand: TypeAlias = (
    Request | Inform | Ready | Reply | Heartbeat | Disconnect | Ack | Kbye | Schedule | Unschedule
)


# --------------------------------------------------------------------------- dialect

_Decoder: TypeAlias = Callable[[Sequence[bytes], "Dialect", str], EmqpCommand]


@dataclass(frozen=True, slots=True)
class Dialect:
    """What a peer speaks beyond the spec tables. Chosen by configuration, never guessed.

    Attributes:
        json_bodies: REQUEST, SCHEDULE and UNSCHEDULE bodies must be eventmq's JSON call
            ``["run", {"callable": ..., "path": ..., ...}]``; checked on decode and on encode
            (a malformed body stops a real eventmq jobmanager's loop).
        json_queues: encode INFORM queues as eventmq's JSON ``[[weight, name], ...]``
            rather than the spec's CSV of names. Decoding accepts both in any dialect.
        eventmq_commands: ACK, KBYE, SCHEDULE and UNSCHEDULE are commands; without it they
            are unknown, as in the spec.
    """

    json_bodies: bool = False
    json_queues: bool = False
    eventmq_commands: bool = False
    _decoders: dict[bytes, _Decoder] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        table = {
            spec.frame: spec.decoder
            for spec in _COMMANDS.values()
            if self.eventmq_commands or not spec.eventmq_only
        }
        object.__setattr__(self, "_decoders", table)


# --------------------------------------------------------------------------- headers


_HEADERS_EXPECTED: Final = (
    "headers as comma-separated 'name' or 'name:value' items"
    " (no empty name, no empty value after ':')"
)
_HEADERS_BY_FRAME: dict[bytes, Headers] = {}
_FRAME_BY_HEADERS: dict[Headers, bytes] = {}


def _split_headers(raw: str) -> Headers | None:
    """Headers of ``raw``, or ``None`` when it is not canonical header text."""
    if not raw:
        return ()
    out: list[tuple[str, str]] = []
    for item in raw.split(","):
        name, colon, value = item.partition(":")
        # "name:" would decode to the same pair as a bare "name" and break the byte-exact
        # round trip of eventmq's text, so it is refused rather than normalised.
        if not name or (colon and not value):
            return None
        out.append((name, value))
    return tuple(out)


def parse_headers(raw: str) -> Headers:
    """Parse eventmq's header text, e.g. ``"reply-requested,retry-count:1,timeout:10"``.

    Raises:
        FrameValueError: on an empty item, an empty name or an empty value after ``:``.
    """
    headers = _split_headers(raw)
    if headers is None:
        raise FrameValueError(PROTOCOL, _HEADERS_EXPECTED, got=raw)
    return headers


def format_headers(headers: Headers) -> str:
    """The header text of ``headers``: the exact inverse of :func:`parse_headers`.

    Raises:
        FrameValueError: when a name is empty or holds ``,`` or ``:``, or a value holds ``,``.
    """
    parts: list[str] = []
    for name, value in headers:
        if not name or "," in name or ":" in name or "," in value:
            raise FrameValueError(
                PROTOCOL,
                "header names without ',' or ':' and values without ','",
                got=(name, value),
            )
        parts.append(f"{name}:{value}" if value else name)
    return ",".join(parts)


def header(headers: Headers, name: str) -> str | None:
    """The value of the first header called ``name`` (``""`` for a flag), or ``None``."""
    for key, value in headers:
        if key == name:
            return value
    return None


def has_header(headers: Headers, name: str) -> bool:
    """Whether a header (flag or valued) called ``name`` is present."""
    return any(key == name for key, _ in headers)


def _decode_headers(frames: Sequence[bytes], command: str, index: int) -> Headers:
    raw = frames[index]
    # Header texts repeat from message to message ("reply-requested,timeout:10"), so the
    # parsed tuples (immutable, safe to share) are cached by their frame.
    cached = _HEADERS_BY_FRAME.get(raw)
    if cached is not None:
        return cached
    headers = _split_headers(text(PROTOCOL, command, frames, index, "headers"))
    if headers is None:
        raise FrameValueError(PROTOCOL, _HEADERS_EXPECTED, command=command, frame=index, got=raw)
    if len(_HEADERS_BY_FRAME) >= _CACHE_LIMIT:
        _HEADERS_BY_FRAME.clear()
    _HEADERS_BY_FRAME[raw] = headers
    return headers


def _encode_headers(headers: Headers, command: str) -> bytes:
    cached = _FRAME_BY_HEADERS.get(headers)
    if cached is not None:
        return cached
    try:
        raw = format_headers(headers).encode()
    except FrameValueError as exc:
        raise FrameValueError(PROTOCOL, exc.expected, command=command, got=headers) from None
    if len(_FRAME_BY_HEADERS) >= _CACHE_LIMIT:
        _FRAME_BY_HEADERS.clear()
    _FRAME_BY_HEADERS[headers] = raw
    return raw


# --------------------------------------------------------------------------- eventmq bodies


@dataclass(frozen=True, slots=True, kw_only=True)
class EventmqCall:
    """eventmq's job: ``path.callable(*args, **kwargs)``, run by its jobmanager.

    ``path`` may name a class as ``"package.module:Class"``; the class is then built with
    ``class_args`` and ``class_kwargs`` and ``callable`` is a method of it. The keyword
    arguments are dicts, as JSON gives them, so a call compares by value but is not
    hashable.
    """

    callable: str
    path: str
    args: tuple[JsonValue, ...] = ()
    kwargs: dict[str, JsonValue] = field(default_factory=dict)
    class_args: tuple[JsonValue, ...] = ()
    class_kwargs: dict[str, JsonValue] = field(default_factory=dict)


_CALL_EXPECTED: Final = 'eventmq call body ["run", {"callable": ..., "path": ..., ...}]'
_BODY_FRAME: Final = {"REQUEST": 6, "SCHEDULE": 7, "UNSCHEDULE": 7}


# The keys eventmq's worker reads besides "callable" and "path"; it defaults missing ones.
_CALL_OPTIONAL: Final = (
    ("args", list, "a JSON list"),
    ("kwargs", dict, "a JSON object"),
    ("class_args", list, "a JSON list"),
    ("class_kwargs", dict, "a JSON object"),
)


def _bad_call(body: bytes, command: str, frame: int, problem: str) -> FrameValueError:
    return FrameValueError(
        PROTOCOL, f"{_CALL_EXPECTED} {problem}", command=command, frame=frame, got=body
    )


def _check_call(body: bytes, command: str, frame: int) -> dict[str, Any]:
    """The call parameters of an eventmq JSON body, or FrameValueError naming the problem."""
    try:
        data = json.loads(body.decode())
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise _bad_call(body, command, frame, "as UTF-8 JSON") from None
    if type(data) is not list or len(data) != 2:
        raise _bad_call(body, command, frame, "as a JSON list of 2 items")
    if data[0] != "run":
        # "run" is the only subcommand eventmq's jobmanager executes.
        raise _bad_call(body, command, frame, 'with the subcommand "run"')
    params = data[1]
    if type(params) is not dict:
        raise _bad_call(body, command, frame, "with a JSON object of call parameters")
    for key in ("callable", "path"):
        value = params.get(key)
        if type(value) is not str or not value:
            raise _bad_call(body, command, frame, f"with {key!r} as non-empty text")
    for key, kind, what in _CALL_OPTIONAL:
        # A JSON null is refused too: eventmq's worker would call f(*None) and fail the job.
        if key in params and type(params[key]) is not kind:
            raise _bad_call(body, command, frame, f"with {key!r} as {what}")
    return params


def parse_call_body(body: bytes, command: str = "REQUEST") -> EventmqCall:
    """Parse eventmq's JSON call body of a REQUEST, SCHEDULE or UNSCHEDULE.

    Missing optional keys take eventmq's defaults; keys other than the six of
    :class:`EventmqCall` are ignored, as eventmq's worker does.

    Raises:
        FrameValueError: naming ``command``, its body frame and the problem.
    """
    params = _check_call(body, command, _BODY_FRAME.get(command, 6))
    return EventmqCall(
        callable=params["callable"],
        path=params["path"],
        args=tuple(params.get("args", ())),
        kwargs=params.get("kwargs", {}),
        class_args=tuple(params.get("class_args", ())),
        class_kwargs=params.get("class_kwargs", {}),
    )


def build_call_body(call: EventmqCall) -> bytes:
    """The body eventmq's client would send for ``call``, byte for byte.

    Raises:
        FrameValueError: when ``callable`` or ``path`` is empty, or an argument is not
            something JSON can encode.
    """
    if not call.callable or not call.path:
        raise FrameValueError(PROTOCOL, f"{_CALL_EXPECTED} with non-empty 'callable' and 'path'")
    try:
        # json.dumps with its default separators and key order is what eventmq sends.
        text_ = json.dumps(
            [
                "run",
                {
                    "callable": call.callable,
                    "path": call.path,
                    "args": list(call.args),
                    "kwargs": call.kwargs,
                    "class_args": list(call.class_args),
                    "class_kwargs": call.class_kwargs,
                },
            ]
        )
    except (TypeError, ValueError) as exc:
        raise FrameValueError(
            PROTOCOL, "call arguments that JSON can encode", got=str(exc)
        ) from None
    return text_.encode()


_VALUE_EXPECTED: Final = 'worker result {"value": ...} as UTF-8 JSON'


def build_reply_value(value: JsonValue) -> bytes:
    """The body of a worker REPLY carrying ``value``, as eventmq's jobmanager writes it.

    Raises:
        FrameValueError: when JSON cannot encode ``value``.
    """
    try:
        return json.dumps({"value": value}).encode()
    except (TypeError, ValueError) as exc:
        raise FrameValueError(PROTOCOL, _VALUE_EXPECTED, command="REPLY", got=str(exc)) from None


def parse_reply_value(body: bytes) -> JsonValue:
    """The ``value`` of a worker REPLY body ``{"value": ...}``.

    Raises:
        FrameValueError: when ``body`` is not a JSON object with a ``value`` key.
    """
    try:
        data = json.loads(body.decode())
    except (ValueError, RecursionError):
        raise FrameValueError(
            PROTOCOL, _VALUE_EXPECTED, command="REPLY", frame=4, got=body
        ) from None
    if not isinstance(data, dict) or "value" not in data:
        raise FrameValueError(PROTOCOL, _VALUE_EXPECTED, command="REPLY", frame=4, got=body)
    value: JsonValue = data["value"]
    return value


# --------------------------------------------------------------------------- frame helpers


def _bad_text(
    frames: Sequence[bytes], command: str, fields: tuple[tuple[int, str], ...]
) -> NoReturn:
    """Raise the error for the first of ``fields`` that is not UTF-8."""
    for index, what in fields:
        text(PROTOCOL, command, frames, index, what)
    raise AssertionError("a frame failed to decode but decodes now")  # pragma: no cover


def _empty_id(frames: Sequence[bytes], command: str, index: int, what: str) -> FrameValueError:
    return FrameValueError(
        PROTOCOL, f"{what} as non-empty UTF-8 text", command=command, frame=index, got=frames[index]
    )


def _check_id(value: str, command: str, what: str) -> None:
    """Encoding-side guard: ids are keys in the peers' tables, so never empty."""
    if not value:
        raise FrameValueError(PROTOCOL, f"{what} as non-empty text", command=command, got=value)


def _new_version_frame(version: str, command: str) -> bytes:
    if not _VERSION_TEXT_RE.fullmatch(version):
        raise FrameValueError(PROTOCOL, "a version such as '1.0'", command=command, got=version)
    frame = b"eMQP/" + version.encode()
    if len(_VERSION_FRAMES) < 16:
        _VERSION_FRAMES[version] = frame
    return frame


def _only_eventmq(command: str, dialect: Dialect) -> None:
    if not dialect.eventmq_commands:
        raise UnknownCommandError(
            PROTOCOL, "a dialect with eventmq_commands to send it", command=command
        )


def _interval(frames: Sequence[bytes], command: str) -> int:
    # eventmq writes str(interval_secs or -1): "-1" stands for "use the cron expression".
    if frames[6] == b"-1":
        return -1
    return ascii_uint(PROTOCOL, command, frames, 6, "interval in seconds (or -1)")


# --------------------------------------------------------------------------- decoders

# A frozen dataclass's __init__ sets each field through object.__setattr__, which costs
# more than decoding the frames does. On the two hottest paths (REQUEST, REPLY) the
# decoder fills the same slots through their descriptors: the result is an ordinary
# instance, equal to and indistinguishable from one built by the constructor.
_new = object.__new__
# Built from fields() so that a field added to either class without updating its decoder
# below fails on first use: the unpacking there no longer matches.
_SET_REQUEST = tuple(Request.__dict__[f.name].__set__ for f in dataclass_fields(Request))
_SET_REPLY = tuple(Reply.__dict__[f.name].__set__ for f in dataclass_fields(Reply))


def _decode_request(frames: Sequence[bytes], dialect: Dialect, version: str) -> Request:
    if len(frames) != 7:
        expect_count(PROTOCOL, "REQUEST", frames, 7)
    try:
        msgid = frames[3].decode()
        queue = frames[4].decode()
    except UnicodeDecodeError:
        _bad_text(frames, "REQUEST", ((3, "message id"), (4, "queue name")))
    if not msgid:
        raise _empty_id(frames, "REQUEST", 3, "message id")
    headers = _HEADERS_BY_FRAME.get(frames[5])
    if headers is None:
        headers = _decode_headers(frames, "REQUEST", 5)
    body = frames[6]
    if dialect.json_bodies:
        _check_call(body, "REQUEST", 6)
    set_msgid, set_queue, set_headers, set_body, set_version = _SET_REQUEST
    cmd = _new(Request)
    set_msgid(cmd, msgid)
    set_queue(cmd, queue)
    set_headers(cmd, headers)
    set_body(cmd, body)
    set_version(cmd, version)
    return cmd


def _decode_queues(frames: Sequence[bytes]) -> Queues:
    raw = text(PROTOCOL, "INFORM", frames, 4, "queue names")
    if not raw:
        return ()
    if raw[0] == "[":
        # eventmq's JSON list of [weight, name]. A CSV whose first name began with "["
        # cannot be told apart, so the encoder never writes one (see _encode_queues).
        expected = "queues as a JSON list of [weight, name] pairs with non-empty names"
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            data = None
        if not isinstance(data, list):
            raise FrameValueError(PROTOCOL, expected, command="INFORM", frame=4, got=frames[4])
        queues: list[tuple[str, int]] = []
        for item in data:
            if (
                not isinstance(item, list)
                or len(item) != 2
                or type(item[0]) is not int
                or not isinstance(item[1], str)
                or not item[1]
            ):
                raise FrameValueError(PROTOCOL, expected, command="INFORM", frame=4, got=frames[4])
            queues.append((item[1], item[0]))
        return tuple(queues)
    names = raw.split(",")
    if not all(names):
        raise FrameValueError(
            PROTOCOL,
            "queue names as comma-separated non-empty names",
            command="INFORM",
            frame=4,
            got=frames[4],
        )
    return tuple((name, DEFAULT_QUEUE_WEIGHT) for name in names)


def _decode_inform(frames: Sequence[bytes], dialect: Dialect, version: str) -> Inform:
    n = len(frames)
    if n not in {5, 6}:
        expect_count(PROTOCOL, "INFORM", frames, 5, 6)
    msgid = text(PROTOCOL, "INFORM", frames, 3, "message id")
    if not msgid:
        raise _empty_id(frames, "INFORM", 3, "message id")
    queues = _decode_queues(frames)
    worker_type = text(PROTOCOL, "INFORM", frames, 5, "client type") if n == 6 else None
    return Inform(msgid, queues, worker_type, version=version)


def _decode_ready(frames: Sequence[bytes], dialect: Dialect, version: str) -> Ready:
    if len(frames) != 4:
        expect_count(PROTOCOL, "READY", frames, 4)
    msgid = text(PROTOCOL, "READY", frames, 3, "message id")
    if not msgid:
        raise _empty_id(frames, "READY", 3, "message id")
    return Ready(msgid, version=version)


def _decode_reply(frames: Sequence[bytes], dialect: Dialect, version: str) -> Reply:
    n = len(frames)
    if n not in {5, 6}:
        expect_count(PROTOCOL, "REPLY", frames, 5, 6)
    try:
        msgid = frames[3].decode()
        request_id = frames[5].decode() if n == 6 else None
    except UnicodeDecodeError:
        _bad_text(frames, "REPLY", ((3, "message id"), (5, "request id")))
    if not msgid:
        raise _empty_id(frames, "REPLY", 3, "message id")
    if request_id == "":
        raise _empty_id(frames, "REPLY", 5, "request id")
    set_msgid, set_body, set_request_id, set_version = _SET_REPLY
    cmd = _new(Reply)
    set_msgid(cmd, msgid)
    set_body(cmd, frames[4])
    set_request_id(cmd, request_id)
    set_version(cmd, version)
    return cmd


def _decode_heartbeat(frames: Sequence[bytes], dialect: Dialect, version: str) -> Heartbeat:
    n = len(frames)
    if n not in {4, 5}:
        expect_count(PROTOCOL, "HEARTBEAT", frames, 4, 5)
    msgid = text(PROTOCOL, "HEARTBEAT", frames, 3, "message id")
    if not msgid:
        raise _empty_id(frames, "HEARTBEAT", 3, "message id")
    time = text(PROTOCOL, "HEARTBEAT", frames, 4, "sender time") if n == 5 else None
    return Heartbeat(msgid, time, version=version)


def _decode_disconnect(frames: Sequence[bytes], dialect: Dialect, version: str) -> Disconnect:
    if len(frames) != 4:
        expect_count(PROTOCOL, "DISCONNECT", frames, 4)
    msgid = text(PROTOCOL, "DISCONNECT", frames, 3, "message id")
    if not msgid:
        raise _empty_id(frames, "DISCONNECT", 3, "message id")
    return Disconnect(msgid, version=version)


def _decode_ack(frames: Sequence[bytes], dialect: Dialect, version: str) -> Ack:
    if len(frames) != 5:
        expect_count(PROTOCOL, "ACK", frames, 5)
    msgid = text(PROTOCOL, "ACK", frames, 3, "message id")
    if not msgid:
        raise _empty_id(frames, "ACK", 3, "message id")
    ref_id = text(PROTOCOL, "ACK", frames, 4, "acknowledged message id")
    if not ref_id:
        raise _empty_id(frames, "ACK", 4, "acknowledged message id")
    return Ack(msgid, ref_id, version=version)


def _decode_kbye(frames: Sequence[bytes], dialect: Dialect, version: str) -> Kbye:
    if len(frames) != 4:
        expect_count(PROTOCOL, "KBYE", frames, 4)
    msgid = text(PROTOCOL, "KBYE", frames, 3, "message id")
    if not msgid:
        raise _empty_id(frames, "KBYE", 3, "message id")
    return Kbye(msgid, version=version)


def _decode_schedule_frames(
    frames: Sequence[bytes], dialect: Dialect, command: str
) -> tuple[str, str, Headers, int, bytes, str]:
    if len(frames) != 9:
        expect_count(PROTOCOL, command, frames, 9)
    msgid = text(PROTOCOL, command, frames, 3, "message id")
    if not msgid:
        raise _empty_id(frames, command, 3, "message id")
    queue = text(PROTOCOL, command, frames, 4, "queue name")
    headers = _decode_headers(frames, command, 5)
    interval = _interval(frames, command)
    body = frames[7]
    if dialect.json_bodies:
        _check_call(body, command, 7)
    cron = text(PROTOCOL, command, frames, 8, "cron expression")
    return msgid, queue, headers, interval, body, cron


def _decode_schedule(frames: Sequence[bytes], dialect: Dialect, version: str) -> Schedule:
    msgid, queue, headers, interval, body, cron = _decode_schedule_frames(
        frames, dialect, "SCHEDULE"
    )
    if (interval == -1) != bool(cron):
        raise FrameValueError(
            PROTOCOL,
            "a cron expression when the interval is -1 and none otherwise",
            command="SCHEDULE",
            frame=8,
            got=frames[8],
        )
    return Schedule(msgid, queue, headers, interval, body, cron, version=version)


def _decode_unschedule(frames: Sequence[bytes], dialect: Dialect, version: str) -> Unschedule:
    msgid, queue, headers, interval, body, cron = _decode_schedule_frames(
        frames, dialect, "UNSCHEDULE"
    )
    return Unschedule(msgid, queue, headers, interval, body, cron, version=version)


@dataclass(frozen=True, slots=True)
class _CommandSpec:
    name: str
    frame: bytes
    low: int
    high: int
    decoder: _Decoder
    eventmq_only: bool


_COMMANDS: Final[dict[bytes, _CommandSpec]] = {
    spec.frame: spec
    for spec in (
        _CommandSpec("REQUEST", b"REQUEST", 7, 7, _decode_request, False),
        _CommandSpec("INFORM", b"INFORM", 5, 6, _decode_inform, False),
        _CommandSpec("READY", b"READY", 4, 4, _decode_ready, False),
        _CommandSpec("REPLY", b"REPLY", 5, 6, _decode_reply, False),
        _CommandSpec("HEARTBEAT", b"HEARTBEAT", 4, 5, _decode_heartbeat, False),
        _CommandSpec("DISCONNECT", b"DISCONNECT", 4, 4, _decode_disconnect, False),
        _CommandSpec("ACK", b"ACK", 5, 5, _decode_ack, True),
        _CommandSpec("KBYE", b"KBYE", 4, 4, _decode_kbye, True),
        _CommandSpec("SCHEDULE", b"SCHEDULE", 9, 9, _decode_schedule, True),
        _CommandSpec("UNSCHEDULE", b"UNSCHEDULE", 9, 9, _decode_unschedule, True),
    )
}
_SPEC_NAMES: Final = ", ".join(s.name for s in _COMMANDS.values() if not s.eventmq_only)
_EVENTMQ_NAMES: Final = ", ".join(s.name for s in _COMMANDS.values() if s.eventmq_only)

#: The eMQP/1.0 tables as written.
SPEC: Final = Dialect()
#: eventmq 0.3.13 (see PEERS.md): JSON bodies and queues, ACK/KBYE/SCHEDULE/UNSCHEDULE.
EVENTMQ: Final = Dialect(json_bodies=True, json_queues=True, eventmq_commands=True)


def decode(frames: Sequence[bytes], dialect: Dialect = SPEC) -> EmqpCommand:
    """Decode one eMQP message (the frames after the ROUTER identity).

    Args:
        frames: the message's frames as ``bytes`` (pyzmq's ``recv_multipart()``).
        dialect: what the peer speaks; :data:`SPEC` unless configured otherwise.

    Raises:
        ProtocolError: a :class:`FrameCountError`, :class:`UnknownCommandError` or
            :class:`FrameValueError` naming the command, the frame and what was expected.
    """
    # Fast path: the envelope every well-formed 1.0 message has.
    if len(frames) >= 4 and not frames[0] and frames[1] == _V10:
        decoder = dialect._decoders.get(frames[2])
        if decoder is not None:
            return decoder(frames, dialect, VERSION)
    return _decode_envelope(frames, dialect)


def _decode_envelope(frames: Sequence[bytes], dialect: Dialect) -> EmqpCommand:
    """Check the envelope frame by frame, so the error names the first thing wrong."""
    n = len(frames)
    spec = _COMMANDS.get(frames[2]) if n >= 3 else None
    name = spec.name if spec is not None else None
    if n < 4:
        if spec is not None:
            expect_count(PROTOCOL, spec.name, frames, spec.low, spec.high)
        raise FrameCountError(PROTOCOL, "at least 4 frames", got=f"{n} frames")
    if frames[0]:
        raise FrameValueError(PROTOCOL, "an empty frame", command=name, frame=0, got=frames[0])
    match = _VERSION_RE.fullmatch(frames[1])
    if match is None:
        raise FrameValueError(
            PROTOCOL,
            "the protocol version b'eMQP/1.0' (or b'eMQP/' and another version number)",
            command=name,
            frame=1,
            got=frames[1],
        )
    decoder = dialect._decoders.get(frames[2])
    if decoder is None:
        known = _SPEC_NAMES
        if not dialect.eventmq_commands:
            known += f" ({_EVENTMQ_NAMES} need the eventmq_commands dialect option)"
        raise UnknownCommandError(PROTOCOL, f"one of {known}", frame=2, got=frames[2])
    return decoder(frames, dialect, match.group(1).decode("ascii"))


# --------------------------------------------------------------------------- encoders


def _encode_request(cmd: Request, dialect: Dialect) -> list[bytes]:
    if not cmd.msgid:
        _check_id(cmd.msgid, "REQUEST", "message id")
    if dialect.json_bodies:
        _check_call(cmd.body, "REQUEST", 6)
    return [
        b"",
        _VERSION_FRAMES.get(cmd.version) or _new_version_frame(cmd.version, "REQUEST"),
        b"REQUEST",
        cmd.msgid.encode(),
        cmd.queue.encode(),
        _encode_headers(cmd.headers, "REQUEST"),
        cmd.body,
    ]


def _encode_queues(queues: Queues, dialect: Dialect) -> bytes:
    # An empty list is an empty frame in both forms: eventmq never sends "[]".
    if not queues:
        return b""
    if dialect.json_queues:
        for name, weight in queues:
            if not name or type(weight) is not int:
                raise FrameValueError(
                    PROTOCOL,
                    "queues as (non-empty name, int weight) pairs",
                    command="INFORM",
                    got=(name, weight),
                )
        return json.dumps([[weight, name] for name, weight in queues]).encode()
    names: list[str] = []
    for name, weight in queues:
        if weight != DEFAULT_QUEUE_WEIGHT:
            raise FrameValueError(
                PROTOCOL,
                f"weight {DEFAULT_QUEUE_WEIGHT}: the spec's CSV queue list carries no weights"
                " (a dialect with json_queues does)",
                command="INFORM",
                got=(name, weight),
            )
        if not name or "," in name:
            raise FrameValueError(
                PROTOCOL, "queue names without ',' and not empty", command="INFORM", got=name
            )
        names.append(name)
    if names[0][0] == "[":
        raise FrameValueError(
            PROTOCOL,
            "a first queue name not starting with '[' (it would read as JSON)",
            command="INFORM",
            got=names[0],
        )
    return ",".join(names).encode()


def _encode_inform(cmd: Inform, dialect: Dialect) -> list[bytes]:
    _check_id(cmd.msgid, "INFORM", "message id")
    frames = [
        b"",
        _VERSION_FRAMES.get(cmd.version) or _new_version_frame(cmd.version, "INFORM"),
        b"INFORM",
        cmd.msgid.encode(),
        _encode_queues(cmd.queues, dialect),
    ]
    if cmd.worker_type is not None:
        frames.append(cmd.worker_type.encode())
    return frames


def _encode_ready(cmd: Ready, dialect: Dialect) -> list[bytes]:
    _check_id(cmd.msgid, "READY", "message id")
    version = _VERSION_FRAMES.get(cmd.version) or _new_version_frame(cmd.version, "READY")
    return [b"", version, b"READY", cmd.msgid.encode()]


def _encode_reply(cmd: Reply, dialect: Dialect) -> list[bytes]:
    if not cmd.msgid:
        _check_id(cmd.msgid, "REPLY", "message id")
    version = _VERSION_FRAMES.get(cmd.version) or _new_version_frame(cmd.version, "REPLY")
    if cmd.request_id is None:
        return [b"", version, b"REPLY", cmd.msgid.encode(), cmd.body]
    if not cmd.request_id:
        _check_id(cmd.request_id, "REPLY", "request id")
    return [b"", version, b"REPLY", cmd.msgid.encode(), cmd.body, cmd.request_id.encode()]


def _encode_heartbeat(cmd: Heartbeat, dialect: Dialect) -> list[bytes]:
    _check_id(cmd.msgid, "HEARTBEAT", "message id")
    version = _VERSION_FRAMES.get(cmd.version) or _new_version_frame(cmd.version, "HEARTBEAT")
    frames = [b"", version, b"HEARTBEAT", cmd.msgid.encode()]
    if cmd.time is not None:
        frames.append(cmd.time.encode())
    return frames


def _encode_disconnect(cmd: Disconnect, dialect: Dialect) -> list[bytes]:
    _check_id(cmd.msgid, "DISCONNECT", "message id")
    version = _VERSION_FRAMES.get(cmd.version) or _new_version_frame(cmd.version, "DISCONNECT")
    return [b"", version, b"DISCONNECT", cmd.msgid.encode()]


def _encode_ack(cmd: Ack, dialect: Dialect) -> list[bytes]:
    _only_eventmq("ACK", dialect)
    _check_id(cmd.msgid, "ACK", "message id")
    _check_id(cmd.ref_id, "ACK", "acknowledged message id")
    version = _VERSION_FRAMES.get(cmd.version) or _new_version_frame(cmd.version, "ACK")
    return [b"", version, b"ACK", cmd.msgid.encode(), cmd.ref_id.encode()]


def _encode_kbye(cmd: Kbye, dialect: Dialect) -> list[bytes]:
    _only_eventmq("KBYE", dialect)
    _check_id(cmd.msgid, "KBYE", "message id")
    version = _VERSION_FRAMES.get(cmd.version) or _new_version_frame(cmd.version, "KBYE")
    return [b"", version, b"KBYE", cmd.msgid.encode()]


def _encode_schedule(cmd: Schedule | Unschedule, dialect: Dialect) -> list[bytes]:
    command = cmd.COMMAND
    _only_eventmq(command, dialect)
    _check_id(cmd.msgid, command, "message id")
    if type(cmd.interval) is not int or not -1 <= cmd.interval < 1 << 64:
        raise FrameValueError(
            PROTOCOL, "an interval in seconds, or -1", command=command, got=cmd.interval
        )
    if isinstance(cmd, Schedule) and (cmd.interval == -1) != bool(cmd.cron):
        raise FrameValueError(
            PROTOCOL,
            "a cron expression when the interval is -1 and none otherwise",
            command=command,
            got=(cmd.interval, cmd.cron),
        )
    if dialect.json_bodies:
        _check_call(cmd.body, command, 7)
    version = _VERSION_FRAMES.get(cmd.version) or _new_version_frame(cmd.version, command)
    return [
        b"",
        version,
        command.encode(),
        cmd.msgid.encode(),
        cmd.queue.encode(),
        _encode_headers(cmd.headers, command),
        str(cmd.interval).encode(),
        cmd.body,
        cmd.cron.encode(),
    ]


_ENCODERS: Final[dict[type, Callable[[Any, Dialect], list[bytes]]]] = {
    Request: _encode_request,
    Inform: _encode_inform,
    Ready: _encode_ready,
    Reply: _encode_reply,
    Heartbeat: _encode_heartbeat,
    Disconnect: _encode_disconnect,
    Ack: _encode_ack,
    Kbye: _encode_kbye,
    Schedule: _encode_schedule,
    Unschedule: _encode_schedule,
}


def encode(cmd: EmqpCommand, dialect: Dialect = SPEC) -> list[bytes]:
    """Encode ``cmd`` as the frames to send after the ROUTER identity.

    Args:
        cmd: the command.
        dialect: what the receiving peer speaks.

    Raises:
        ProtocolError: when ``cmd`` cannot be written in ``dialect`` (an eventmq command
            in the spec dialect, a queue weight the CSV form cannot carry, an invalid
            JSON call body where the dialect requires one, an empty id, ...), so that
            nothing leaves that the receiving decoder would refuse or read differently.
        TypeError: when ``cmd`` is not an eMQP command.
    """
    encoder = _ENCODERS.get(type(cmd))
    if encoder is None:
        raise TypeError(f"not an eMQP command: {cmd!r}")
    try:
        return encoder(cmd, dialect)
    except UnicodeEncodeError as exc:
        # Only lone surrogates get here: str.encode refuses them in strict UTF-8.
        raise FrameValueError(
            PROTOCOL, "text that UTF-8 can encode", command=cmd.COMMAND, got=exc.object
        ) from None
