"""mc0 codec (seed 001, Marionette Collective 0MQ protocol draft 0.3), sans-I/O.

Every message is ``[VERB, KEY1, VAL1, ..., "", POSITIONAL...]`` (spec "Message
structure"): a verb, header pairs, then optionally an empty frame and positional frames.
The frames are those after the ROUTER identity, which the transport owns. The real
connector and the mc0d broker also put an empty frame before the verb; that is
``Dialect.delimiter`` (preset ``CONNECTOR``), never guessed from the bytes.

Decisions where the draft is loose (also in docs/protocols/mc0.md):

- Verbs, header keys and values, and topics are strict UTF-8 text; PUT and MESSAGE
  bodies are opaque bytes. Verbs are case-sensitive, as in mc0d.
- Reserved headers (spec "Reserved Headers": every key not prefixed with ``X-``,
  case-sensitive) are accepted only where they mean something, and any other reserved
  key is a ``FrameValueError``, so a typo is reported rather than silently ignored:
  ID on every verb but MESSAGE (the broker strips it there and a MESSAGE is never
  acknowledged); VERSION and TTL on CONNECT; TOPIC on PUT and MESSAGE; MESSAGE on ERROR.
- ``X-`` headers are kept on PUT and MESSAGE (the broker forwards them, as mc0d does) and
  on CONNECT (connection parameters are open-ended); elsewhere there is no field for
  them, so they are ignored, as extensions should be.
- Each header key appears at most once: mc0d keeps headers in a map, so a repeated key
  would silently replace the earlier value.
- PUT and MESSAGE need TOPIC and exactly one body frame after the empty frame; OK needs
  ID (it only ever answers a command that carried one). ERROR may carry MESSAGE, ID,
  both or neither: the spec shows ``['ERROR', 'ID', '1234']`` and ``['ERROR', 'MESSAGE', text]``,
  and mc0d sends both. SUB and UNSUB take any number of topic frames (also none). Other
  verbs take no empty frame and no positional frames.
- CONNECT's TTL is ASCII decimal milliseconds below 2**64; VERSION is any text (the
  connector sends "0.2", the spec shows "0.1" and is itself draft 0.3). No parameter is
  required; the broker picks defaults.
- Topics are any text, used verbatim.
- Header order on the wire carries no meaning (mc0d even reorders MESSAGE headers).
  ``encode`` writes the real peers' order: ID first, then the command's reserved headers,
  then ``X-`` headers in their given order; ERROR writes MESSAGE before ID, as mc0d does.
  Decoding accepts any order, so ``encode(decode(frames)) == frames`` holds for frames in
  that order.
- mc0d answers a second CONNECT with ``["ERROR", "Cannot CONNECT while CONNECTED"]``, a
  header key without a value; that is not accepted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

from zbus.common.protocols.errors import (
    FrameCountError,
    FrameValueError,
    ProtocolError,
    UnknownCommandError,
    text,
)

PROTOCOL = "mc0"

Headers: TypeAlias = tuple[tuple[str, str], ...]
"""Header pairs ``((key, value), ...)`` in wire order."""


@dataclass(frozen=True, slots=True)
class Dialect:
    """How a peer frames its messages.

    Attributes:
        delimiter: an empty frame comes before the verb, as the mcollective-zeromq
            connector (DEALER) and the mc0d broker send it.
    """

    delimiter: bool = False


SPEC = Dialect()
"""The draft: the verb is frame 0."""

CONNECTOR = Dialect(delimiter=True)
"""puppetlabs mcollective-zeromq connector and mc0d broker: ``["", VERB, ...]``."""


# --- commands -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Noop:
    """Either side: heartbeat. With an ID the broker answers OK."""

    id: str | None = None


@dataclass(frozen=True, slots=True)
class Connect:
    """Connector -> broker: start a session.

    ``params`` are the connection parameters in wire order (VERSION, TTL, ``X-...``);
    ID is not one of them.
    """

    params: Headers = ()
    id: str | None = None

    @property
    def version(self) -> str | None:
        return _lookup(self.params, "VERSION")

    @property
    def ttl(self) -> int | None:
        """TTL in milliseconds, if given."""
        value = _lookup(self.params, "TTL")
        return None if value is None else int(value)


@dataclass(frozen=True, slots=True)
class Disconnect:
    """Connector -> broker: end the session."""

    id: str | None = None


@dataclass(frozen=True, slots=True)
class Sub:
    """Connector -> broker: subscribe to ``topics``."""

    topics: tuple[str, ...] = ()
    id: str | None = None


@dataclass(frozen=True, slots=True)
class Unsub:
    """Connector -> broker: unsubscribe from ``topics``."""

    topics: tuple[str, ...] = ()
    id: str | None = None


@dataclass(frozen=True, slots=True)
class Put:
    """Connector -> broker: send ``body`` to every subscriber of ``topic``.

    ``headers`` are the ``X-`` headers, forwarded on the MESSAGE.
    """

    topic: str
    body: bytes
    headers: Headers = ()
    id: str | None = None


@dataclass(frozen=True, slots=True)
class Message:
    """Broker -> connector: a PUT delivered to a subscriber, with its ``X-`` headers."""

    topic: str
    body: bytes
    headers: Headers = ()


@dataclass(frozen=True, slots=True)
class Error:
    """Broker -> connector: something went wrong.

    ``message`` is the MESSAGE header (a description), ``id`` the failed command's ID;
    the spec shows ERROR with either one.
    """

    message: str | None = None
    id: str | None = None


@dataclass(frozen=True, slots=True)
class Ok:
    """Broker -> connector: the command with this ID was accepted."""

    id: str


Mc0Command: TypeAlias = Noop | Connect | Disconnect | Sub | Unsub | Put | Message | Error | Ok


def _lookup(headers: Headers, key: str) -> str | None:
    for name, value in headers:
        if name == key:
            return value
    return None


# --- encoding -------------------------------------------------------------------------


def encode(cmd: Mc0Command, dialect: Dialect = SPEC) -> list[bytes]:
    """The frames of ``cmd`` as ``dialect`` writes them.

    Raises:
        FrameValueError: ``cmd`` holds something that would not decode back to it: text
            that is not UTF-8-encodable, a header key not allowed there or repeated, or
            a TTL that is not decimal digits.
    """
    verb, headers, positional = _layout(cmd)
    frames = [b"", verb.encode()] if dialect.delimiter else [verb.encode()]
    for key, value in headers:
        frames.append(_encode_text(verb, key))
        frames.append(_encode_text(verb, value))
    if positional is not None:
        frames.append(b"")
        frames += positional
    return frames


def _layout(cmd: Mc0Command) -> tuple[str, Headers, list[bytes] | None]:
    """Verb, headers in the real peers' order, and positional frames (None: no empty frame)."""
    if isinstance(cmd, Ok):
        return "OK", (("ID", cmd.id),), None
    if isinstance(cmd, Error):
        message: Headers = () if cmd.message is None else (("MESSAGE", cmd.message),)
        return "ERROR", (*message, *_id(cmd.id)), None  # mc0d's order: MESSAGE, then ID
    if isinstance(cmd, Message):
        headers = _extensions("MESSAGE", cmd.headers, ())
        return "MESSAGE", (("TOPIC", cmd.topic), *headers), [cmd.body]
    ident = _id(cmd.id)
    if isinstance(cmd, Put):
        headers = _extensions("PUT", cmd.headers, ())
        return "PUT", (*ident, ("TOPIC", cmd.topic), *headers), [cmd.body]
    if isinstance(cmd, Sub | Unsub):
        verb = "SUB" if isinstance(cmd, Sub) else "UNSUB"
        return verb, ident, [_encode_text(verb, topic) for topic in cmd.topics]
    if isinstance(cmd, Connect):
        params = _extensions("CONNECT", cmd.params, ("VERSION", "TTL"))
        ttl = _lookup(params, "TTL")
        if ttl is not None and not _is_uint64(_encode_text("CONNECT", ttl)):
            raise FrameValueError(PROTOCOL, _TTL_EXPECTED, command="CONNECT", got=ttl)
        return "CONNECT", (*ident, *params), None
    return ("NOOP" if isinstance(cmd, Noop) else "DISCONNECT"), ident, None


def _id(ident: str | None) -> Headers:
    return () if ident is None else (("ID", ident),)


def _extensions(verb: str, pairs: Headers, reserved: tuple[str, ...]) -> Headers:
    """``pairs`` after checking that decode would read them back unchanged."""
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen or not (key.startswith("X-") or key in reserved):
            raise FrameValueError(PROTOCOL, _allowed_headers(verb, reserved), command=verb, got=key)
        seen.add(key)
    return pairs


def _encode_text(verb: str, value: str) -> bytes:
    try:
        return value.encode()
    except UnicodeEncodeError:
        raise FrameValueError(
            PROTOCOL, "text encodable as UTF-8", command=verb, got=value
        ) from None


# --- decoding -------------------------------------------------------------------------


def decode(frames: Sequence[bytes], dialect: Dialect = SPEC) -> Mc0Command:
    """Decode one mc0 message (either direction).

    Raises:
        ProtocolError: a ``FrameCountError``, ``UnknownCommandError`` or
            ``FrameValueError`` that names the verb and the frame.
    """
    start = _verb_index(frames, dialect)
    rule = _RULES.get(frames[start])
    if rule is None:
        raise UnknownCommandError(PROTOCOL, _VERB_LIST, frame=start, got=frames[start])
    verb, reserved, takes_positional = rule
    parts = _read(frames, start + 1, verb, reserved)
    if parts.positional_at is not None and not takes_positional:
        raise FrameCountError(
            PROTOCOL,
            "no empty frame and no positional frames after the headers",
            command=verb,
            frame=parts.positional_at - 1,
        )
    ident = parts.headers.get("ID")
    if verb == "PUT":
        return Put(parts.require("TOPIC"), parts.body(), parts.extensions(), ident)
    if verb == "MESSAGE":
        return Message(parts.require("TOPIC"), parts.body(), parts.extensions())
    if verb == "NOOP":
        return Noop(ident)
    if verb == "SUB":
        return Sub(parts.topics(), ident)
    if verb == "UNSUB":
        return Unsub(parts.topics(), ident)
    if verb == "CONNECT":
        ttl_at = parts.value_at.get("TTL")
        if ttl_at is not None and not _is_uint64(frames[ttl_at]):
            raise FrameValueError(
                PROTOCOL, _TTL_EXPECTED, command=verb, frame=ttl_at, got=frames[ttl_at]
            )
        params = tuple(pair for pair in parts.headers.items() if pair[0] != "ID")
        return Connect(params, ident)
    if verb == "DISCONNECT":
        return Disconnect(ident)
    if verb == "ERROR":
        return Error(parts.headers.get("MESSAGE"), ident)
    return Ok(parts.require("ID"))


def request_id(frames: Sequence[bytes], dialect: Dialect = SPEC) -> str | None:
    """The ID header of a message that may not decode, or ``None``; never raises.

    A broker answers a command it cannot handle with ERROR carrying the command's ID
    (mc0d does so for an unknown verb), so it needs the ID without a valid command.
    """
    start = 1 if dialect.delimiter else 0
    for i in range(start + 1, len(frames) - 1, 2):
        key = frames[i]
        if not key:
            break
        if key == b"ID":
            try:
                return bytes(frames[i + 1]).decode()
            except UnicodeDecodeError:
                return None
    return None


@dataclass(frozen=True, slots=True)
class _Parts:
    """A message split into its headers and positional frames."""

    frames: Sequence[bytes]
    verb: str
    headers: dict[str, str]  # in wire order; keys are unique
    value_at: dict[str, int]  # header key -> index of its value frame
    positional_at: int | None  # index of the first frame after the empty frame

    def require(self, key: str) -> str:
        value = self.headers.get(key)
        if value is None:
            raise FrameValueError(PROTOCOL, f"the {key} header", command=self.verb)
        return value

    def extensions(self) -> Headers:
        return tuple(pair for pair in self.headers.items() if pair[0].startswith("X-"))

    def topics(self) -> tuple[str, ...]:
        if self.positional_at is None:
            return ()
        return tuple(
            text(PROTOCOL, self.verb, self.frames, index, "topic")
            for index in range(self.positional_at, len(self.frames))
        )

    def body(self) -> bytes:
        at = self.positional_at
        if at is None or len(self.frames) - at != 1:
            got = "no empty frame" if at is None else f"{len(self.frames) - at} body frames"
            raise FrameCountError(
                PROTOCOL, "an empty frame, then one body frame", command=self.verb, got=got
            )
        return self.frames[at]


def _verb_index(frames: Sequence[bytes], dialect: Dialect) -> int:
    start = 0
    if dialect.delimiter:
        if frames and frames[0]:
            raise FrameValueError(
                PROTOCOL, "an empty delimiter frame before the verb", frame=0, got=frames[0]
            )
        start = 1
    if len(frames) <= start:
        want = "an empty delimiter frame and a verb" if dialect.delimiter else "a verb"
        raise FrameCountError(PROTOCOL, want, got=f"{len(frames)} frames")
    return start


def _read(frames: Sequence[bytes], first: int, verb: str, reserved: tuple[str, ...]) -> _Parts:
    headers: dict[str, str] = {}
    value_at: dict[str, int] = {}
    n = len(frames)
    for i in range(first, n, 2):
        if not frames[i]:  # spec: "optionally followed by the empty string and positionals"
            return _Parts(frames, verb, headers, value_at, i + 1)
        key = text(PROTOCOL, verb, frames, i, "header key")
        if i + 1 == n:
            raise FrameCountError(
                PROTOCOL, f"a value frame after header {key}", command=verb, frame=i
            )
        if key in headers or not (key.startswith("X-") or key in reserved):
            raise FrameValueError(
                PROTOCOL, _allowed_headers(verb, reserved), command=verb, frame=i, got=frames[i]
            )
        headers[key] = text(PROTOCOL, verb, frames, i + 1, f"{key} value")
        value_at[key] = i + 1
    return _Parts(frames, verb, headers, value_at, None)


def _allowed_headers(verb: str, reserved: tuple[str, ...]) -> str:
    names = " or ".join((*reserved, "X-..."))
    return f"{names} headers on {verb}, each at most once"


def _is_uint64(raw: bytes) -> bool:
    """ASCII decimal digits of a value below 2**64 (bytes.isdigit is ASCII-only)."""
    return 0 < len(raw) <= 20 and raw.isdigit() and int(raw) < 1 << 64


_TTL_EXPECTED = "TTL as ASCII decimal milliseconds below 2**64"

# verb -> (name, reserved headers it accepts, whether an empty frame and positional
# frames may follow the headers)
_RULES: dict[bytes, tuple[str, tuple[str, ...], bool]] = {
    b"NOOP": ("NOOP", ("ID",), False),
    b"CONNECT": ("CONNECT", ("ID", "VERSION", "TTL"), False),
    b"DISCONNECT": ("DISCONNECT", ("ID",), False),
    b"SUB": ("SUB", ("ID",), True),
    b"UNSUB": ("UNSUB", ("ID",), True),
    b"PUT": ("PUT", ("ID", "TOPIC"), True),
    b"MESSAGE": ("MESSAGE", ("TOPIC",), True),
    b"ERROR": ("ERROR", ("MESSAGE", "ID"), False),
    b"OK": ("OK", ("ID",), False),
}
_VERB_LIST = "a verb: " + ", ".join(name for name, _, _ in _RULES.values())

__all__ = [
    "CONNECTOR",
    "PROTOCOL",
    "SPEC",
    "Connect",
    "Dialect",
    "Disconnect",
    "Error",
    "Headers",
    "Mc0Command",
    "Message",
    "Noop",
    "Ok",
    "ProtocolError",
    "Put",
    "Sub",
    "Unsub",
    "decode",
    "encode",
    "request_id",
]
