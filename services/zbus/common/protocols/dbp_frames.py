"""DBP frame helpers: the time frame's three encodings and the JSON and text bodies.

Part of the DBP codec (:mod:`zbus.common.protocols.dbp` is the one import). Every
function raises :class:`~zbus.common.protocols.errors.FrameValueError` naming the
command, the frame and what was expected.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from zbus.common.protocols.dbp_commands import PROTOCOL, Dialect, JSONObject, TimeEncoding
from zbus.common.protocols.errors import FrameValueError, expect_count

_F32 = struct.Struct("<f")
_F64 = struct.Struct(">d")
_INF = math.inf
_ASCII = TimeEncoding.ASCII
_FLOAT32 = TimeEncoding.FLOAT32
_FLOAT64 = TimeEncoding.FLOAT64


def encode_time(command: str, value: float, encoding: TimeEncoding) -> bytes:
    if not 0.0 <= value < _INF:
        raise FrameValueError(
            PROTOCOL, "a finite, non-negative epoch time", command=command, got=value
        )
    if encoding is _ASCII:
        # repr() is the shortest text that reads back as the same double. abs() turns
        # -0.0 into 0.0, since a sign is not a digit.
        out = repr(abs(value))
        if "e" in out:
            # Very large or very small: write the same digits without an exponent.
            out = format(Decimal(out), "f")
        return out.encode("ascii")
    if encoding is _FLOAT32:
        try:
            return _F32.pack(value)
        except OverflowError:
            raise FrameValueError(
                PROTOCOL, "a time that fits a float32", command=command, got=value
            ) from None
    return _F64.pack(value)


def decode_time(command: str, raw: bytes) -> tuple[float, TimeEncoding]:
    # ASCII is tried first: a frame of digits with at most one "." is ASCII even when it
    # is 4 or 8 bytes long. The float32 or float64 values whose bytes are all digits and
    # dots are below 0.001, so no real epoch time is lost to this rule.
    if raw.replace(b".", b"", 1).isdigit():
        value = float(raw)
        encoding = _ASCII
    elif len(raw) == 4:
        value = _F32.unpack(raw)[0]
        encoding = _FLOAT32
    elif len(raw) == 8:
        value = _F64.unpack(raw)[0]
        encoding = _FLOAT64
    else:
        raise FrameValueError(
            PROTOCOL,
            "time as ASCII decimal, a 4-byte float32 or an 8-byte float64",
            command=command,
            frame=2,
            got=raw,
        )
    if not 0.0 <= value < _INF:
        raise FrameValueError(
            PROTOCOL, "a finite, non-negative epoch time", command=command, frame=2, got=raw
        )
    return value, encoding


# --------------------------------------------------------------------------- bodies


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# The most bytes a JSON frame may have on the wire: four times the 64 KiB that the
# compact form of a registration may take (MAX_INFO_BYTES), room for any indentation.
# A longer frame is refused before it is parsed, so that a peer cannot make the decoder
# build an object of its choosing size.
MAX_JSON_FRAME_BYTES = 4 * 65536


def decode_json(command: str, frames: Sequence[bytes], index: int, what: str) -> JSONObject:
    raw = frames[index]
    if len(raw) > MAX_JSON_FRAME_BYTES:
        raise FrameValueError(
            PROTOCOL,
            f"{what} of at most {MAX_JSON_FRAME_BYTES} bytes",
            command=command,
            frame=index,
            got=f"{len(raw)} bytes",
        )
    try:
        # Decode the UTF-8 first: json.loads(bytes) would also accept UTF-16 and UTF-32.
        body = bytes(raw).decode("utf-8")
        value = json.loads(body, parse_constant=_reject_constant)
        if "\\u" in body:
            # An escape can smuggle in a lone surrogate, which is not Unicode text and
            # could not be written back as UTF-8.
            json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (ValueError, RecursionError):
        # ValueError covers bad UTF-8, bad JSON, NaN/Infinity and integers beyond
        # Python's digit limit; RecursionError covers absurd nesting.
        raise FrameValueError(
            PROTOCOL, f"{what} as a UTF-8 JSON object", command=command, frame=index, got=raw
        ) from None
    if not isinstance(value, dict):
        raise FrameValueError(
            PROTOCOL, f"{what} as a JSON object", command=command, frame=index, got=raw
        )
    return value


def encode_json(command: str, value: JSONObject, dialect: Dialect) -> bytes:
    if not isinstance(value, dict):
        raise FrameValueError(PROTOCOL, "a JSON object (dict)", command=command, got=value)
    try:
        return json.dumps(
            value,
            separators=dialect.json_separators,
            ensure_ascii=dialect.json_ensure_ascii,
            allow_nan=False,
        ).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:
        raise FrameValueError(
            PROTOCOL, f"a body that is valid JSON ({exc})", command=command, got=value
        ) from None


def encode_text(command: str, value: str, what: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise FrameValueError(
            PROTOCOL, f"{what} encodable as UTF-8", command=command, got=value
        ) from None


def no_body(command: str, frames: Sequence[bytes]) -> None:
    """Frames 3+ of a command without a body: nothing, or Hermes's single ``b""``."""
    if len(frames) > 3:
        expect_count(PROTOCOL, command, frames, 3, 4)
        if frames[3]:
            raise FrameValueError(
                PROTOCOL, "no body (or one empty frame)", command=command, frame=3, got=frames[3]
            )
