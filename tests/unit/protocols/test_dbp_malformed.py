"""DBP codec, malformed input: garbage frames raise ProtocolError or decode to a command
that round-trips; targeted errors name the command and the frame; what the wire cannot
carry is refused on encoding.
"""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given, settings

from tests.conftest import FUZZ_EXAMPLES
from tests.support.dbp import ASCII, T_ASCII, T
from tests.unit.protocols.strategies import dbp_shaped_frames, frame_lists
from zbus.common.protocols import dbp
from zbus.common.protocols.dbp import (
    HERMES,
    SPEC,
    Approved,
    Awk,
    DBPCommand,
    Denied,
    Dialect,
    Heartbeat,
    InfoRequest,
    Registration,
    Update,
    decode,
    encode,
)
from zbus.common.protocols.errors import (
    FrameCountError,
    FrameValueError,
    ProtocolError,
    UnknownCommandError,
)

# --------------------------------------------------------------------------- garbage in


def _check_garbage(frames: list[bytes]) -> None:
    try:
        cmd = decode(frames)
    except ProtocolError:
        return
    # Whatever decodes is a command that encodes and decodes back to itself.
    assert cmd.time_encoding is not None
    for dialect in (SPEC, HERMES):
        assert decode(encode(cmd, dialect)) == cmd


@settings(max_examples=FUZZ_EXAMPLES)
@given(frame_lists)
def test_garbage_frames(frames: list[bytes]) -> None:
    _check_garbage(frames)


@settings(max_examples=FUZZ_EXAMPLES // 2)
@given(dbp_shaped_frames)
def test_garbage_dbp_shaped_frames(frames: list[bytes]) -> None:
    _check_garbage(frames)


@pytest.mark.parametrize(
    ("frames", "error", "match"),
    [
        ([], FrameCountError, r"^dbp <unknown command>: expected at least 3 frames"),
        ([b"", b"<3"], FrameCountError, r"^dbp <unknown command>: expected at least 3 frames"),
        ([b"x", b"<3", T_ASCII, b"s"], FrameValueError, r"^dbp <unknown command> frame 0: "),
        ([b"", b"O_o", T_ASCII], UnknownCommandError, r"^dbp <unknown command> frame 1: "),
        ([b"", b"", T_ASCII], UnknownCommandError, r"frame 1: expected a DBP command"),
        (
            [b"", b"<3", b"12:30", b"s"],
            FrameValueError,
            r"^dbp HEARTBEAT frame 2: expected time as ASCII decimal, a 4-byte float32 or",
        ),
        ([b"", b"<3", b"", b"s"], FrameValueError, r"^dbp HEARTBEAT frame 2: expected time"),
        ([b"", b"<3", b"-1.25", b"s"], FrameValueError, r"^dbp HEARTBEAT frame 2: expected time"),
        ([b"", b"<3", T_ASCII, b"s", b""], FrameCountError, r"^dbp HEARTBEAT: expected 3 or 4"),
        (
            [b"", b"<3", T_ASCII, b"\xff"],
            FrameValueError,
            r"^dbp HEARTBEAT frame 3: expected service name as UTF-8",
        ),
        (
            [b"", b"<3", b"9" * 400, b"s"],
            FrameValueError,
            r"^dbp HEARTBEAT frame 2: expected a finite, non-negative epoch time",
        ),
        (
            [b"", b"</3", struct.pack("<f", math.nan)],
            FrameValueError,
            r"^dbp DISCONNECT frame 2: expected a finite, non-negative epoch time",
        ),
        (
            [b"", b"u.u", struct.pack(">d", math.inf)],
            FrameValueError,
            r"^dbp AWK frame 2: expected a finite, non-negative",
        ),
        (
            [b"", b"u.u", struct.pack("<f", -1.0)],
            FrameValueError,
            r"^dbp AWK frame 2: expected a finite, non-negative",
        ),
        ([b"", b"u.u", T_ASCII, b"x"], FrameValueError, r"^dbp AWK frame 3: expected no body"),
        ([b"", b"</3", T_ASCII, b"", b""], FrameCountError, r"^dbp DISCONNECT: expected 3 to 4"),
        ([b"", b"u_U", T_ASCII], FrameCountError, r"^dbp REQUEST: expected 4 frames"),
        (
            [b"", b"u_U", T_ASCII, b"a\tb"],
            FrameValueError,
            r"^dbp REQUEST frame 3: expected query as printable text",
        ),
        ([b"", b"UwU", T_ASCII, b"{}", b"{}"], FrameCountError, r"^dbp REGISTRATION: expected 4"),
        (
            [b"", b"UwU", T_ASCII, b""],
            FrameValueError,
            r"^dbp REGISTRATION frame 3: expected service information as a UTF-8 JSON object",
        ),
        (
            [b"", b"UwU", T_ASCII, b"[1, 2]"],
            FrameValueError,
            r"^dbp REGISTRATION frame 3: expected service information as a JSON object",
        ),
        ([b"", b"UoU", T_ASCII, b"null"], FrameValueError, r"^dbp UPDATE frame 3: expected"),
        ([b"", b"UoU", T_ASCII, b'{"a": NaN}'], FrameValueError, r"^dbp UPDATE frame 3: "),
        ([b"", b"UoU", T_ASCII, b'{"a": -Infinity}'], FrameValueError, r"^dbp UPDATE frame 3"),
        ([b"", b"UoU", T_ASCII, b'{"a": "\xff"}'], FrameValueError, r"^dbp UPDATE frame 3"),
        ([b"", b"UoU", T_ASCII, '{"a": 1}'.encode("utf-16")], FrameValueError, r"UPDATE frame 3"),
        ([b"", b"UoU", T_ASCII, b'{"a": "\\ud800"}'], FrameValueError, r"^dbp UPDATE frame 3"),
        ([b"", b"UoU", T_ASCII, b"{} {}"], FrameValueError, r"^dbp UPDATE frame 3"),
        (
            [b"", b"o_O", T_ASCII, b'{"a": ' + b"1" * 5000 + b"}"],
            FrameValueError,
            r"^dbp REPLY frame 3: expected information as a UTF-8 JSON object",
        ),
        (
            [b"", b"o_O", T_ASCII, b'{"a": ' + b"[" * 100_000],
            FrameValueError,
            r"^dbp REPLY frame 3: expected information as a UTF-8 JSON object",
        ),
        (
            [b"", b"OwO", T_ASCII, b"{}", b"{}"],
            FrameCountError,
            r"^dbp APPROVED: expected 3 to 4 frames",
        ),
        ([b"", b"OwO", T_ASCII, b"[]"], FrameValueError, r"^dbp APPROVED frame 3: expected"),
        (
            [b"", b"(O_O)", T_ASCII, b"a", b""],
            FrameValueError,
            r"^dbp DENIED frame 4: expected a non-empty reason",
        ),
        (
            [b"", b"OmO", T_ASCII, b"a", b"\xc3"],
            FrameValueError,
            r"^dbp DENIED frame 4: expected reason as UTF-8",
        ),
    ],
)
def test_malformed_frames(frames: list[bytes], error: type[ProtocolError], match: str) -> None:
    with pytest.raises(error, match=match):
        decode(frames)


@pytest.mark.parametrize(
    ("cmd", "dialect", "match"),
    [
        (Heartbeat("s", math.nan), SPEC, r"^dbp HEARTBEAT: expected a finite, non-negative"),
        (Heartbeat("s", math.inf), SPEC, r"^dbp HEARTBEAT: expected a finite, non-negative"),
        (Heartbeat("s", -1.0), HERMES, r"^dbp HEARTBEAT: expected a finite, non-negative"),
        (Heartbeat("\ud800", T), SPEC, r"^dbp HEARTBEAT: expected service name encodable"),
        (Awk(1e39), HERMES, r"^dbp AWK: expected a time that fits a float32"),
        (InfoRequest("a\nb", T), SPEC, r"^dbp REQUEST: expected a printable query"),
        (Denied(("",), T), SPEC, r"^dbp DENIED: expected non-empty reasons"),
        (Update({"a": math.nan}, T), SPEC, r"^dbp UPDATE: expected a body that is valid JSON"),
        (Update({"a": object()}, T), SPEC, r"^dbp UPDATE: expected a body that is valid JSON"),
        (Registration([1], T), SPEC, r"^dbp REGISTRATION: expected a JSON object"),  # type: ignore[arg-type]
        (Approved([], T), SPEC, r"^dbp APPROVED: expected a JSON object"),  # type: ignore[arg-type]
    ],
)
def test_encode_rejects_what_the_wire_cannot_carry(
    cmd: DBPCommand, dialect: Dialect, match: str
) -> None:
    with pytest.raises(FrameValueError, match=match):
        encode(cmd, dialect)


def test_dialect_rejects_an_unknown_denied_token() -> None:
    with pytest.raises(ValueError, match="denied_token"):
        Dialect(denied_token=b"NO")


def test_info_request_list_queries() -> None:
    assert InfoRequest("", T).wants_list
    assert InfoRequest("*", T).wants_list
    assert not InfoRequest("broker", T).wants_list


def test_three_frame_heartbeat_is_nameless() -> None:
    assert decode([b"", b"<3", T_ASCII]) == Heartbeat("", T, ASCII)


def test_approved_with_explicit_empty_object() -> None:
    assert decode([b"", b"OwO", T_ASCII, b"{}"]) == Approved({}, T, ASCII)


def test_module_exports_resolve() -> None:
    for name in dbp.__all__:
        assert hasattr(dbp, name), name


def test_a_json_frame_past_its_bound_is_refused_before_it_is_parsed() -> None:
    # Valid JSON, one byte past the bound: refused by its size, whatever it holds.
    padding = dbp.MAX_JSON_FRAME_BYTES - len(b'{"name":"s","p":""}') + 1
    body = b'{"name":"s","p":"' + b"x" * padding + b'"}'
    assert len(body) == dbp.MAX_JSON_FRAME_BYTES + 1
    with pytest.raises(FrameValueError, match=r"REGISTRATION frame 3: expected service"):
        dbp.decode([b"", b"UwU", T_ASCII, body])
    # At the bound it is decoded (and the catalog then checks the 64 KiB compact size).
    cmd = dbp.decode([b"", b"UwU", T_ASCII, body[: -2 - 1] + b'"}'])
    assert isinstance(cmd, Registration)
