"""DBP codec: round trips in every dialect, golden frames (spec and Hermes), and the time
frame in each of its encodings.
"""

from __future__ import annotations

import struct
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.dbp import ASCII, FLOAT32, FLOAT64, T32, T_ASCII, T_F32, T_F64, T
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

DIALECTS = [pytest.param(SPEC, id="spec"), pytest.param(HERMES, id="hermes")]


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
