"""DBP codec: round trips in every dialect, golden frames (spec and Hermes), garbage in,
and the UDP heartbeat datagram."""

from __future__ import annotations

import math
import struct
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import FUZZ_EXAMPLES
from tests.unit.protocols.strategies import frame, frame_lists
from zbus.common.protocols import dbp
from zbus.common.protocols.dbp import (
    HERMES,
    MAX_DATAGRAM,
    SPEC,
    Approved,
    Awk,
    DBPCommand,
    Denied,
    Dialect,
    Disconnect,
    Heartbeat,
    InfoReply,
    InfoRequest,
    Registration,
    TimeEncoding,
    Update,
    decode,
    decode_datagram,
    encode,
    encode_datagram,
    missing_registration_fields,
)
from zbus.common.protocols.errors import (
    FrameCountError,
    FrameValueError,
    ProtocolError,
    UnknownCommandError,
)

DIALECTS = [pytest.param(SPEC, id="spec"), pytest.param(HERMES, id="hermes")]

ASCII = TimeEncoding.ASCII
FLOAT32 = TimeEncoding.FLOAT32
FLOAT64 = TimeEncoding.FLOAT64

T = 1763800000.25
T_ASCII = b"1763800000.25"
T_F64 = struct.pack(">d", T)
# What Hermes writes for the same moment: struct.pack("f", time.time()) on x86.
T_F32 = struct.pack("<f", T)
T32 = struct.unpack("<f", T_F32)[0]  # 1763800064.0: float32 has 128 s steps here
FLOAT32_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]


def f32(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def expected(cmd: DBPCommand, dialect: Dialect) -> DBPCommand:
    """What decoding ``encode(cmd, dialect)`` must give."""
    encoding = cmd.time_encoding or dialect.time_encoding
    when = f32(cmd.time) if encoding is FLOAT32 else cmd.time
    return replace(cmd, time=when, time_encoding=encoding)


# --------------------------------------------------------------------------- strategies

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=5)
encodings = st.sampled_from([None, ASCII, FLOAT32, FLOAT64])


@st.composite
def stamps(draw: st.DrawFn, dialect: Dialect) -> tuple[float, TimeEncoding | None]:
    """A time and a time encoding (None: the dialect's) that can carry it."""
    encoding = draw(encodings)
    if (encoding or dialect.time_encoding) is FLOAT32:
        when = draw(st.floats(min_value=0.0, max_value=FLOAT32_MAX))
    else:
        when = draw(st.floats(min_value=0.0, allow_infinity=False))
    return when, encoding


def commands(dialect: Dialect) -> st.SearchStrategy[DBPCommand]:
    def with_time(cls: Any, *bodies: st.SearchStrategy[Any]) -> st.SearchStrategy[DBPCommand]:
        return st.tuples(*bodies, stamps(dialect)).map(lambda v: cls(*v[:-1], *v[-1]))

    return st.one_of(
        with_time(InfoRequest, st.text(max_size=20).filter(str.isprintable)),
        with_time(InfoReply, json_objects),
        with_time(Registration, json_objects),
        with_time(Update, json_objects),
        with_time(Approved, json_objects),
        with_time(Denied, st.lists(st.text(min_size=1, max_size=20), max_size=3).map(tuple)),
        with_time(Heartbeat, st.text(max_size=40)),
        with_time(Disconnect),
        with_time(Awk),
    )


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("dialect", DIALECTS)
@settings(max_examples=500)
@given(data=st.data())
def test_every_command_round_trips(dialect: Dialect, data: st.DataObject) -> None:
    cmd = data.draw(commands(dialect))
    frames = encode(cmd, dialect)
    assert frames[0] == b""
    assert all(type(f) is bytes for f in frames)
    decoded = decode(frames, dialect)
    assert decoded == expected(cmd, dialect)
    # The decoded command names its encoding, so re-encoding gives the same frames.
    assert encode(decoded, dialect) == frames


@pytest.mark.parametrize("dialect", DIALECTS)
@given(data=st.data())
def test_heartbeat_and_disconnect_datagrams_round_trip(
    dialect: Dialect, data: st.DataObject
) -> None:
    when, encoding = data.draw(stamps(dialect))
    cmd: Heartbeat | Disconnect = data.draw(
        st.builds(Heartbeat, st.text(max_size=100), st.just(when), st.just(encoding))
        | st.just(Disconnect(when, encoding))
    )
    datagram = encode_datagram(cmd, dialect)
    assert len(datagram) <= MAX_DATAGRAM
    assert decode_datagram(datagram, dialect) == expected(cmd, dialect)


# --------------------------------------------------------------------------- golden frames

GOLDEN_SPEC: list[tuple[DBPCommand, list[bytes]]] = [
    (InfoRequest("catalog", T), [b"", b"u_U", T_ASCII, b"catalog"]),
    (InfoRequest("", T), [b"", b"u_U", T_ASCII, b""]),
    (InfoRequest("*", T), [b"", b"u_U", T_ASCII, b"*"]),
    (
        InfoReply({"catalog": {"ip": "10.0.0.2", "port": 5246}}, T),
        [b"", b"o_O", T_ASCII, b'{"catalog":{"ip":"10.0.0.2","port":5246}}'],
    ),
    (
        Registration(
            {
                "name": "broker",
                "ip": "10.0.0.3",
                "port": 47291,
                "function": "eMQP job broker",
                "heartbeat_interval": 2.5,
            },
            T,
        ),
        [
            b"",
            b"UwU",
            T_ASCII,
            b'{"name":"broker","ip":"10.0.0.3","port":47291,"function":"eMQP job broker",'
            b'"heartbeat_interval":2.5}',
        ],
    ),
    (
        Update({"name": "broker", "port": 47292}, T),
        [b"", b"UoU", T_ASCII, b'{"name":"broker","port":47292}'],
    ),
    (Approved({}, T), [b"", b"OwO", T_ASCII]),
    (
        Approved({"heartbeat_interval": 1.0}, T),
        [b"", b"OwO", T_ASCII, b'{"heartbeat_interval":1.0}'],
    ),
    (Denied((), T), [b"", b"(O_O)", T_ASCII]),
    (
        Denied(("not on the allow-list", "über"), T),
        [b"", b"(O_O)", T_ASCII, b"not on the allow-list", b"\xc3\xbcber"],
    ),
    (Heartbeat("broker", T), [b"", b"<3", T_ASCII, b"broker"]),
    (Disconnect(T), [b"", b"</3", T_ASCII]),
    (Awk(T), [b"", b"u.u", T_ASCII]),
    # The other encodings, when a command asks for them.
    (Heartbeat("broker", T, FLOAT64), [b"", b"<3", T_F64, b"broker"]),
    (Heartbeat("broker", T32, FLOAT32), [b"", b"<3", T_F32, b"broker"]),
]

HERMES_REGISTRATION = (
    b'{"name": "Rohan", "interfaces": {"router": {"ip": "10.0.0.7", "port": 5247}}, '
    b'"reg_time": "Sat Nov 22 08:35:32 2025", "topics": null}'
)
HERMES_INFO = {
    "name": "Rohan",
    "interfaces": {"router": {"ip": "10.0.0.7", "port": 5247}},
    "reg_time": "Sat Nov 22 08:35:32 2025",
    "topics": None,
}

# Frames as Hermes 1.0.2 sends them: float32 time, Python's default json.dumps, a b""
# body where it has nothing to say, and OmO for DENIED.
GOLDEN_HERMES: list[tuple[DBPCommand, list[bytes]]] = [
    (Registration(HERMES_INFO, T32), [b"", b"UwU", T_F32, HERMES_REGISTRATION]),
    (
        Update({"name": "Rohan", "port": 5300}, T32),
        [b"", b"UoU", T_F32, b'{"name": "Rohan", "port": 5300}'],
    ),
    (Update({"name": "Zoë"}, T32), [b"", b"UoU", T_F32, b'{"name": "Zo\\u00eb"}']),
    (Approved({}, T32), [b"", b"OwO", T_F32, b""]),
    (Denied((), T32), [b"", b"OmO", T_F32, b""]),
    (Denied(("unknown service",), T32), [b"", b"OmO", T_F32, b"unknown service"]),
    (Awk(T32), [b"", b"u.u", T_F32, b""]),
    (Disconnect(T32), [b"", b"</3", T_F32, b""]),
    (InfoRequest("", T32), [b"", b"u_U", T_F32, b""]),
    (InfoRequest("Rohan", T32), [b"", b"u_U", T_F32, b"Rohan"]),
    (
        InfoReply({"Error": "No Registered Service With the Name x"}, T32),
        [b"", b"o_O", T_F32, b'{"Error": "No Registered Service With the Name x"}'],
    ),
    (Heartbeat("Rohan", T32), [b"", b"<3", T_F32, b"Rohan"]),
]


@pytest.mark.parametrize(("cmd", "frames"), GOLDEN_SPEC)
def test_golden_spec_frames(cmd: DBPCommand, frames: list[bytes]) -> None:
    assert encode(cmd, SPEC) == frames
    assert decode(frames, SPEC) == expected(cmd, SPEC)


@pytest.mark.parametrize(("cmd", "frames"), GOLDEN_HERMES)
def test_golden_hermes_frames(cmd: DBPCommand, frames: list[bytes]) -> None:
    assert encode(cmd, HERMES) == frames
    decoded = decode(frames, HERMES)
    assert decoded == replace(cmd, time_encoding=FLOAT32)
    assert encode(decoded, HERMES) == frames


def test_hermes_time_frame_is_little_endian_float32() -> None:
    frames = encode(Heartbeat("Rohan", T), HERMES)
    assert frames[2] == b"\xe8\x42\xd2\x4e" == struct.pack("<f", T)
    assert decode(frames).time == 1763800064.0


def test_hermes_registration_is_accepted_and_its_missing_fields_listed() -> None:
    cmd = decode([b"", b"UwU", T_F32, HERMES_REGISTRATION], SPEC)
    assert cmd == Registration(HERMES_INFO, T32, FLOAT32)
    assert isinstance(cmd, Registration)
    assert missing_registration_fields(cmd.info) == ("ip", "port", "function", "heartbeat_interval")
    full = {"name": "a", "ip": "h", "port": 1, "function": "f", "heartbeat_interval": 1.0}
    assert missing_registration_fields(full) == ()
    assert missing_registration_fields({**full, "port": None}) == ("port",)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_both_denied_tokens_decode_in_every_dialect(dialect: Dialect) -> None:
    for token in (b"(O_O)", b"OmO"):
        assert decode([b"", token, T_ASCII, b"no"], dialect) == Denied(("no",), T, ASCII)
    assert encode(Denied(("no",), T), dialect)[1] == dialect.denied_token


def test_a_reply_can_answer_in_the_encoding_of_the_request() -> None:
    for raw, encoding in ((T_ASCII, ASCII), (T_F32, FLOAT32), (T_F64, FLOAT64)):
        request = decode([b"", b"UwU", raw, b"{}"], SPEC)
        assert request.time_encoding is encoding
        reply = encode(Approved({}, T, request.time_encoding), SPEC)
        assert reply[2] == encode(Awk(T, encoding))[2]
        assert decode(reply).time_encoding is encoding


def test_dialect_default_time_encoding_applies_only_without_one() -> None:
    assert encode(Awk(T), SPEC)[2] == T_ASCII
    assert encode(Awk(T), HERMES)[2] == T_F32
    assert encode(Awk(T, ASCII), HERMES)[2] == T_ASCII
    assert encode(Awk(T, FLOAT64), SPEC)[2] == T_F64


@pytest.mark.parametrize(
    ("raw", "when", "encoding"),
    [
        (b"1234", 1234.0, ASCII),  # 4 bytes, but digits: ASCII wins over float32
        (b"12.5", 12.5, ASCII),
        (b"12345678", 12345678.0, ASCII),  # 8 bytes, but digits: ASCII wins over float64
        (b"1763800000", 1763800000.0, ASCII),
        (b".5", 0.5, ASCII),
        (b"7.", 7.0, ASCII),
        (b"1.2.", f32(struct.unpack("<f", b"1.2.")[0]), FLOAT32),  # two dots: not ASCII
        (struct.pack("<f", 0.0), 0.0, FLOAT32),
        (struct.pack(">d", 5e-324), 5e-324, FLOAT64),
    ],
)
def test_time_frame_detection(raw: bytes, when: float, encoding: TimeEncoding) -> None:
    cmd = decode([b"", b"</3", raw])
    assert cmd == Disconnect(when, encoding)


@pytest.mark.parametrize(
    ("when", "raw"),
    [
        (0.0, b"0.0"),
        (-0.0, b"0.0"),
        (1e16, b"10000000000000000"),
        (1e-05, b"0.00001"),
        (123.0, b"123.0"),
        (1.7976931348623157e308, b"17976931348623157" + b"0" * 292),
    ],
)
def test_ascii_times_are_plain_decimal_and_exact(when: float, raw: bytes) -> None:
    frames = encode(Disconnect(when))
    assert frames[2] == raw
    assert decode(frames).time == when


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


# Random frame lists rarely start with the empty frame, a command and a valid time; these
# always have the first two and often the third, so the fuzzing reaches each command's body checks.
dbp_shaped_frames = st.tuples(
    st.sampled_from(
        [b"u_U", b"o_O", b"UwU", b"UoU", b"OwO", b"(O_O)", b"OmO", b"<3", b"</3", b"u.u"]
    ),
    st.sampled_from([T_ASCII, T_F32, T_F64, b"0", b".5", b"1."]) | frame,
    st.lists(
        st.sampled_from([b"", b"{}", b'{"a": [1.5, null]}', b"svc", b"*"]) | frame, max_size=2
    ),
).map(lambda t: [b"", t[0], t[1], *t[2]])


@settings(max_examples=FUZZ_EXAMPLES // 2)
@given(dbp_shaped_frames)
def test_garbage_dbp_shaped_frames(frames: list[bytes]) -> None:
    _check_garbage(frames)


def _datagram(frames: list[bytes]) -> bytes:
    return b"".join(len(f).to_bytes(2, "big") + f for f in frames)


@settings(max_examples=FUZZ_EXAMPLES)
@given(st.binary(max_size=MAX_DATAGRAM + 8))
def test_garbage_datagrams(data: bytes) -> None:
    try:
        cmd = decode_datagram(data)
    except ProtocolError:
        return
    assert decode_datagram(encode_datagram(cmd)) == cmd


@settings(max_examples=FUZZ_EXAMPLES // 4)
@given(frame_lists | dbp_shaped_frames)
def test_garbage_framed_datagrams(frames: list[bytes]) -> None:
    # Well-framed datagrams of random frames get past the framing to the command checks.
    try:
        cmd = decode_datagram(_datagram(frames))
    except ProtocolError:
        return
    assert type(cmd) in (Heartbeat, Disconnect)
    assert decode_datagram(encode_datagram(cmd)) == cmd


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


# --------------------------------------------------------------------------- UDP datagrams

HEARTBEAT_DATAGRAM = b"\x00\x00" + b"\x00\x02<3" + b"\x00\x0d1763800000.25" + b"\x00\x06broker"


def test_golden_heartbeat_datagram() -> None:
    cmd = Heartbeat("broker", T)
    assert encode_datagram(cmd) == HEARTBEAT_DATAGRAM
    assert decode_datagram(HEARTBEAT_DATAGRAM) == Heartbeat("broker", T, ASCII)


def test_golden_disconnect_datagrams() -> None:
    spec = b"\x00\x00" + b"\x00\x03</3" + b"\x00\x0d1763800000.25"
    assert encode_datagram(Disconnect(T)) == spec
    assert decode_datagram(spec) == Disconnect(T, ASCII)
    hermes = b"\x00\x00" + b"\x00\x03</3" + b"\x00\x04" + T_F32 + b"\x00\x00"
    assert encode_datagram(Disconnect(T), HERMES) == hermes
    assert decode_datagram(hermes, HERMES) == Disconnect(T32, FLOAT32)


def test_datagram_size_limit() -> None:
    # 2 + 4 + 15 + 2 = 23 bytes of framing and time, so a 1,377-byte name just fits.
    assert len(encode_datagram(Heartbeat("x" * 1377, T))) == MAX_DATAGRAM
    with pytest.raises(FrameValueError, match=r"^dbp/udp HEARTBEAT: expected a datagram of at"):
        encode_datagram(Heartbeat("x" * 1378, T))
    too_big = _datagram([b"", b"<3", T_ASCII, b"x" * 1378])
    with pytest.raises(FrameValueError, match=r"^dbp/udp <unknown command>: expected a datagram"):
        decode_datagram(too_big)


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        (b"", FrameCountError, r"^dbp <unknown command>: expected at least 3 frames"),
        (b"\x00", FrameValueError, r"^dbp/udp <unknown command> frame 0: expected a 2-byte"),
        (HEARTBEAT_DATAGRAM + b"\x00", FrameValueError, r"frame 4: expected a 2-byte frame"),
        (HEARTBEAT_DATAGRAM[:-1], FrameValueError, r"frame 3: expected 6 bytes of frame data"),
        (
            _datagram([b"", b"u_U", T_ASCII, b"broker"]),
            UnknownCommandError,
            r"^dbp/udp REQUEST frame 1: expected HEARTBEAT or DISCONNECT",
        ),
        (
            _datagram([b"", b"<3", b"later", b"broker"]),
            FrameValueError,
            r"^dbp HEARTBEAT frame 2: expected time",
        ),
        # No empty frame 0: two frames.
        (b"\x00\x02<3\x00\x0d1763800000.25", FrameCountError, r"at least 3 frames"),
    ],
)
def test_malformed_datagrams(data: bytes, error: type[ProtocolError], match: str) -> None:
    with pytest.raises(error, match=match):
        decode_datagram(data)


def test_only_heartbeat_and_disconnect_are_datagrams() -> None:
    with pytest.raises(TypeError):
        encode_datagram(Awk(T))  # type: ignore[arg-type]


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
