"""eMQP/1.0 encoding: ``encode(cmd, dialect) -> list[bytes]``.

Part of the eMQP codec (:mod:`zbus.common.protocols.emqp` is the facade). The
encoder refuses whatever the receiving dialect's decoder would refuse or read
differently, so that a round trip is exact.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Final

from zbus.common.protocols.emqp_commands import (
    DEFAULT_QUEUE_WEIGHT,
    MAX_QUEUE_WEIGHT,
    MIN_QUEUE_WEIGHT,
    PROTOCOL,
    VERSION,
    Ack,
    Disconnect,
    EmqpCommand,
    Heartbeat,
    Inform,
    Kbye,
    Queues,
    Ready,
    Reply,
    Request,
    Schedule,
    Unschedule,
)
from zbus.common.protocols.emqp_decode import SPEC, VERSION_FRAME, Dialect
from zbus.common.protocols.emqp_eventmq import check_call, encode_headers
from zbus.common.protocols.errors import FrameValueError, NumberRangeError, UnknownCommandError

__all__ = ["encode"]

_VERSION_TEXT_RE: Final = re.compile(r"[0-9]{1,9}(?:\.[0-9]{1,9}){0,3}")
_VERSION_FRAMES: dict[str, bytes] = {VERSION: VERSION_FRAME}


# --------------------------------------------------------------------------- frame helpers


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


# --------------------------------------------------------------------------- encoders


def _encode_request(cmd: Request, dialect: Dialect) -> list[bytes]:
    if not cmd.msgid:
        _check_id(cmd.msgid, "REQUEST", "message id")
    if dialect.json_bodies:
        check_call(cmd.body, "REQUEST", 6)
    return [
        b"",
        _VERSION_FRAMES.get(cmd.version) or _new_version_frame(cmd.version, "REQUEST"),
        b"REQUEST",
        cmd.msgid.encode(),
        cmd.queue.encode(),
        encode_headers(cmd.headers, "REQUEST"),
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
            if not MIN_QUEUE_WEIGHT <= weight <= MAX_QUEUE_WEIGHT:
                raise NumberRangeError(
                    PROTOCOL, "queue weights in -2**63..2**63-1", command="INFORM", got=weight
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
    frames = _encode_envelope(cmd, dialect)
    frames.append(_encode_queues(cmd.queues, dialect))
    if cmd.worker_type is not None:
        frames.append(cmd.worker_type.encode())
    return frames


def _encode_reply(cmd: Reply, dialect: Dialect) -> list[bytes]:
    if not cmd.msgid:
        _check_id(cmd.msgid, "REPLY", "message id")
    version = _VERSION_FRAMES.get(cmd.version) or _new_version_frame(cmd.version, "REPLY")
    if cmd.request_id is None:
        return [b"", version, b"REPLY", cmd.msgid.encode(), cmd.body]
    if not cmd.request_id:
        _check_id(cmd.request_id, "REPLY", "request id")
    return [b"", version, b"REPLY", cmd.msgid.encode(), cmd.body, cmd.request_id.encode()]


def _encode_envelope(cmd: EmqpCommand, dialect: Dialect) -> list[bytes]:
    """The frames up to the msgid: all of READY and DISCONNECT, the start of the others."""
    command = cmd.COMMAND
    _check_id(cmd.msgid, command, "message id")
    version = _VERSION_FRAMES.get(cmd.version) or _new_version_frame(cmd.version, command)
    return [b"", version, command.encode(), cmd.msgid.encode()]


def _encode_eventmq_envelope(cmd: EmqpCommand, dialect: Dialect) -> list[bytes]:
    """The envelope of a command only eventmq speaks: all of KBYE, the start of the others."""
    _only_eventmq(cmd.COMMAND, dialect)
    return _encode_envelope(cmd, dialect)


def _encode_heartbeat(cmd: Heartbeat, dialect: Dialect) -> list[bytes]:
    frames = _encode_envelope(cmd, dialect)
    if cmd.time is not None:
        frames.append(cmd.time.encode())
    return frames


def _encode_ack(cmd: Ack, dialect: Dialect) -> list[bytes]:
    frames = _encode_eventmq_envelope(cmd, dialect)
    _check_id(cmd.ref_id, "ACK", "acknowledged message id")
    frames.append(cmd.ref_id.encode())
    return frames


def _encode_schedule(cmd: Schedule | Unschedule, dialect: Dialect) -> list[bytes]:
    command = cmd.COMMAND
    frames = _encode_eventmq_envelope(cmd, dialect)
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
        check_call(cmd.body, command, 7)
    frames += (
        cmd.queue.encode(),
        encode_headers(cmd.headers, command),
        str(cmd.interval).encode(),
        cmd.body,
        cmd.cron.encode(),
    )
    return frames


_ENCODERS: Final[dict[type, Callable[[Any, Dialect], list[bytes]]]] = {
    Request: _encode_request,
    Inform: _encode_inform,
    Ready: _encode_envelope,
    Reply: _encode_reply,
    Heartbeat: _encode_heartbeat,
    Disconnect: _encode_envelope,
    Ack: _encode_ack,
    Kbye: _encode_eventmq_envelope,
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
