"""mc0 codec: round trips, golden frames (the draft and the real connector), garbage in."""

from __future__ import annotations

import re
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from tests.conftest import FUZZ_EXAMPLES
from tests.unit.protocols.strategies import frame_lists
from zbus.common.protocols.errors import (
    FrameCountError,
    FrameValueError,
    ProtocolError,
    UnknownCommandError,
)
from zbus.common.protocols.mc0 import (
    CONNECTOR,
    SPEC,
    Connect,
    Dialect,
    Disconnect,
    Error,
    Headers,
    Mc0Command,
    Message,
    Noop,
    Ok,
    Put,
    Sub,
    Unsub,
    decode,
    encode,
    request_id,
)

DIALECTS = {"spec": SPEC, "connector": CONNECTOR}
UUID = "9d5c1f3a-7e2b-4c8d-a6f0-3b1e5d7c9a24"
UUIDB = UUID.encode()

# --------------------------------------------------------------------------- strategies

texts = st.text(max_size=30)
ids = st.none() | texts
x_headers: SearchStrategy[Headers] = st.dictionaries(
    texts.map(lambda key: "X-" + key), texts, max_size=4
).map(lambda d: tuple(d.items()))


@st.composite
def connect_params(draw: st.DrawFn) -> Headers:
    params = list(draw(x_headers))
    if draw(st.booleans()):
        params.append(("VERSION", draw(texts)))
    if draw(st.booleans()):
        params.append(("TTL", str(draw(st.integers(0, 2**64 - 1)))))
    return tuple(draw(st.permutations(params)))


COMMANDS: dict[type, SearchStrategy[Mc0Command]] = {
    Noop: st.builds(Noop, ids),
    Connect: st.builds(Connect, connect_params(), ids),
    Disconnect: st.builds(Disconnect, ids),
    Sub: st.builds(Sub, st.lists(texts, max_size=4).map(tuple), ids),
    Unsub: st.builds(Unsub, st.lists(texts, max_size=4).map(tuple), ids),
    Put: st.builds(Put, texts, st.binary(max_size=64), x_headers, ids),
    Message: st.builds(Message, texts, st.binary(max_size=64), x_headers),
    Error: st.builds(Error, st.none() | texts, ids),
    Ok: st.builds(Ok, texts),
}


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("dialect", DIALECTS.values(), ids=DIALECTS.keys())
@pytest.mark.parametrize("kind", list(COMMANDS), ids=lambda k: k.__name__)
@given(data=st.data())
def test_round_trip(dialect: Dialect, kind: type, data: st.DataObject) -> None:
    cmd = data.draw(COMMANDS[kind])
    frames = encode(cmd, dialect)
    assert all(type(frame) is bytes for frame in frames)
    assert (frames[0] == b"") is dialect.delimiter
    assert decode(frames, dialect) == cmd
    # What zbus writes is canonical: decoding and re-encoding gives the same frames.
    assert encode(decode(frames, dialect), dialect) == frames


# --------------------------------------------------------------------------- golden frames


def frames_of(*parts: str | bytes) -> list[bytes]:
    return [part.encode() if isinstance(part, str) else part for part in parts]


# The examples of the draft, verbatim (its OK example's '1234 ' trailing space aside).
SPEC_GOLDEN: list[tuple[list[bytes], Mc0Command]] = [
    (frames_of("NOOP", "ID", "1234"), Noop("1234")),
    (frames_of("OK", "ID", "1234"), Ok("1234")),
    (frames_of("ERROR", "ID", "1234"), Error(None, "1234")),
    (frames_of("NOOP"), Noop()),
    (
        frames_of("CONNECT", "VERSION", "0.1", "TTL", "1000"),
        Connect((("VERSION", "0.1"), ("TTL", "1000"))),
    ),
    (frames_of("DISCONNECT"), Disconnect()),
    (frames_of("SUB", "", "topic1", "topic2"), Sub(("topic1", "topic2"))),
    (frames_of("UNSUB", "", "topic1", "topic2"), Unsub(("topic1", "topic2"))),
    (frames_of("PUT", "TOPIC", "topic1", "", b"\x00body\xff"), Put("topic1", b"\x00body\xff")),
    (frames_of("MESSAGE", "TOPIC", "topic1", "", b"body"), Message("topic1", b"body")),
    (frames_of("ERROR", "MESSAGE", "no such topic"), Error("no such topic")),
]

TOPIC = "mcollective discovery"
REPLY_TO = "mcollective.reply.host1_4242"
PAYLOAD = b"\x04\x08{\x06:\x0cmessage"  # the connector's payload is opaque (Ruby Marshal)

# As the mcollective-zeromq connector and the mc0d broker put them on the wire (PEERS.md,
# mc0d broker.cpp for the ERROR layout).
CONNECTOR_GOLDEN: list[tuple[list[bytes], Mc0Command]] = [
    (
        frames_of("", "CONNECT", "ID", UUIDB, "TTL", "30000", "VERSION", "0.2"),
        Connect((("TTL", "30000"), ("VERSION", "0.2")), UUID),
    ),
    (frames_of("", "OK", "ID", UUIDB), Ok(UUID)),
    (
        frames_of("", "SUB", "ID", UUIDB, "", TOPIC, "mcollective rpcutil"),
        Sub((TOPIC, "mcollective rpcutil"), UUID),
    ),
    (
        frames_of("", "UNSUB", "ID", UUIDB, "", "mcollective rpcutil"),
        Unsub(("mcollective rpcutil",), UUID),
    ),
    (
        frames_of("", "PUT", "TOPIC", TOPIC, "X-REPLY-TO", REPLY_TO, "", PAYLOAD),
        Put(TOPIC, PAYLOAD, (("X-REPLY-TO", REPLY_TO),)),
    ),
    (
        frames_of("", "MESSAGE", "TOPIC", TOPIC, "X-REPLY-TO", REPLY_TO, "", PAYLOAD),
        Message(TOPIC, PAYLOAD, (("X-REPLY-TO", REPLY_TO),)),
    ),
    (
        frames_of("", "ERROR", "MESSAGE", "Unknown command verb 'PING'", "ID", UUIDB),
        Error("Unknown command verb 'PING'", UUID),
    ),
    (frames_of("", "NOOP", "ID", UUIDB), Noop(UUID)),
    (frames_of("", "NOOP"), Noop()),
    (frames_of("", "DISCONNECT"), Disconnect()),
]


@pytest.mark.parametrize(("frames", "cmd"), SPEC_GOLDEN)
def test_golden_spec_frames(frames: list[bytes], cmd: Mc0Command) -> None:
    assert decode(frames, SPEC) == cmd
    assert encode(cmd, SPEC) == frames
    assert encode(cmd) == frames  # SPEC is the default


@pytest.mark.parametrize(("frames", "cmd"), CONNECTOR_GOLDEN)
def test_golden_connector_frames(frames: list[bytes], cmd: Mc0Command) -> None:
    assert decode(frames, CONNECTOR) == cmd
    assert encode(cmd, CONNECTOR) == frames


def test_connect_parameters() -> None:
    cmd = decode(frames_of("", "CONNECT", "ID", UUIDB, "TTL", "30000", "VERSION", "0.2"), CONNECTOR)
    assert isinstance(cmd, Connect)
    assert cmd.ttl == 30000
    assert cmd.version == "0.2"
    assert cmd.id == UUID
    assert Connect().ttl is None
    assert Connect().version is None


def test_headers_are_accepted_in_any_order_and_written_in_the_peers_order() -> None:
    # mc0d forwards MESSAGE headers from a hash map, so TOPIC may come last.
    shuffled = frames_of("MESSAGE", "X-A", "1", "TOPIC", "t", "", b"b")
    cmd = decode(shuffled)
    assert cmd == Message("t", b"b", (("X-A", "1"),))
    assert encode(cmd) == frames_of("MESSAGE", "TOPIC", "t", "X-A", "1", "", b"b")
    put = decode(frames_of("PUT", "TOPIC", "t", "ID", "7", "", b""))
    assert put == Put("t", b"", (), "7")
    assert encode(put) == frames_of("PUT", "ID", "7", "TOPIC", "t", "", b"")
    error = decode(frames_of("ERROR", "ID", "7", "MESSAGE", "bad"))
    assert encode(error) == frames_of("ERROR", "MESSAGE", "bad", "ID", "7")


def test_extension_headers_are_ignored_where_there_is_no_field_for_them() -> None:
    assert decode(frames_of("NOOP", "X-TRACE", "abc", "ID", "1")) == Noop("1")
    assert decode(frames_of("SUB", "X-TRACE", "abc", "", "t")) == Sub(("t",))


def test_sub_without_topics_and_empty_topic_frames() -> None:
    assert decode(frames_of("SUB")) == Sub(())
    assert decode(frames_of("SUB", "")) == Sub(())
    assert decode(frames_of("SUB", "", "", "a")) == Sub(("", "a"))
    assert encode(Sub(())) == frames_of("SUB", "")


def test_the_spec_frames_are_not_connector_frames_and_the_other_way_round() -> None:
    with pytest.raises(FrameValueError, match="frame 0: expected an empty delimiter"):
        decode(frames_of("NOOP", "ID", "1"), CONNECTOR)
    with pytest.raises(UnknownCommandError, match="frame 0: expected a verb"):
        decode(frames_of("", "NOOP", "ID", "1"), SPEC)


# --------------------------------------------------------------------------- request_id


@pytest.mark.parametrize(
    ("frames", "dialect", "expected"),
    [
        (frames_of("PING", "ID", "42"), SPEC, "42"),
        (frames_of("", "PING", "ID", UUIDB), CONNECTOR, UUID),
        (frames_of("PING", "X-A", "1", "ID", "42", "", "ID", "x"), SPEC, "42"),
        (frames_of("PING", "", "x", "ID", "42"), SPEC, None),  # positional, not a header
        (frames_of("PING", "ID"), SPEC, None),
        (frames_of("PING", "ID", b"\xff"), SPEC, None),
        ([], CONNECTOR, None),
    ],
)
def test_request_id_finds_the_id_of_an_undecodable_command(
    frames: list[bytes], dialect: Dialect, expected: str | None
) -> None:
    assert request_id(frames, dialect) == expected


# --------------------------------------------------------------------------- encode guards


@pytest.mark.parametrize(
    ("cmd", "match"),
    [
        (Put("t", b"", (("TOPIC", "u"),)), r"mc0 PUT: expected X-\.\.\. headers"),
        (Put("t", b"", (("ID", "1"),)), r"mc0 PUT: expected X-\.\.\. headers"),
        (Message("t", b"", (("X-A", "1"), ("X-A", "2"))), r"mc0 MESSAGE: expected X-"),
        (Connect((("CURVE", "x"),)), r"mc0 CONNECT: expected VERSION or TTL or X-"),
        (Connect((("TTL", "1"), ("TTL", "2"))), r"mc0 CONNECT: expected VERSION"),
        (Connect((("TTL", "30s"),)), r"mc0 CONNECT: expected TTL as ASCII decimal"),
        (Connect((("TTL", "-1"),)), r"mc0 CONNECT: expected TTL as ASCII decimal"),
        (Sub(("\udc80",)), r"mc0 SUB: expected text encodable as UTF-8"),
        (Noop("\ud800"), r"mc0 NOOP: expected text encodable as UTF-8"),
    ],
)
def test_encode_rejects_what_would_not_decode_back(cmd: Mc0Command, match: str) -> None:
    with pytest.raises(FrameValueError, match=match):
        encode(cmd)


# --------------------------------------------------------------------------- malformed input


class Case(NamedTuple):
    frames: list[bytes]
    dialect: Dialect
    error: type[ProtocolError]
    match: str  # a regular expression the message must match from its start
    frame: int | None  # the frame the error must name


F, S, C = frames_of, SPEC, CONNECTOR
CountE, ValueE, VerbE = FrameCountError, FrameValueError, UnknownCommandError
MALFORMED = [
    Case([], S, CountE, r"<unknown command>: expected a verb, got '0 frames'", None),
    Case([b""], C, CountE, r"<unknown command>: expected an empty delimiter frame and a", None),
    Case([b"x", b"NOOP"], C, ValueE, r"<unknown command> frame 0: expected an empty", 0),
    Case(F("PING", "ID", "1"), S, VerbE, r"<unknown command> frame 0: expected a verb: NOOP", 0),
    Case(F("", "noop"), C, VerbE, r"<unknown command> frame 1: expected a verb", 1),
    Case(F("NOOP", "ID"), S, CountE, r"NOOP frame 1: expected a value frame after header ID", 1),
    Case(F("NOOP", "ID", "1", "ID", "2"), S, ValueE, r"NOOP frame 3: expected ID or X-", 3),
    Case(F("NOOP", "TOPIC", "t"), S, ValueE, r"NOOP frame 1: expected ID or X-\.\.\. headers", 1),
    Case(F("NOOP", "x-trace", "t"), S, ValueE, r"NOOP frame 1: expected ID", 1),
    Case(F("NOOP", "ID", "1", "", "x"), S, CountE, r"NOOP frame 3: expected no empty frame", 3),
    Case(F("NOOP", b"\xff", "1"), S, ValueE, r"NOOP frame 1: expected header key as UTF-8", 1),
    Case(F("NOOP", "ID", b"\xff"), S, ValueE, r"NOOP frame 2: expected ID value as UTF-8", 2),
    Case(F("MESSAGE", "ID", "1", "TOPIC", "t", "", "b"), S, ValueE, r"MESSAGE frame 1: ", 1),
    Case(F("CONNECT", "TTL", "30s"), S, ValueE, r"CONNECT frame 2: expected TTL as ASCII", 2),
    Case(F("CONNECT", "TTL", str(2**64)), S, ValueE, r"CONNECT frame 2: expected TTL", 2),
    Case(F("CONNECT", "CURVE", "k"), S, ValueE, r"CONNECT frame 1: expected ID or VERSION", 1),
    Case(F("", "SUB", "", "a", b"\xfe"), C, ValueE, r"SUB frame 4: expected topic as UTF-8", 4),
    Case(F("PUT", "TOPIC", "t"), S, CountE, r"PUT: expected an empty frame, then one body", None),
    Case(F("PUT", "TOPIC", "t", ""), S, CountE, r"PUT: .*, got '0 body frames'", None),
    Case(F("PUT", "TOPIC", "t", "", "a", "b"), S, CountE, r"PUT: .*, got '2 body frames'", None),
    Case(F("PUT", "", "body"), S, ValueE, r"PUT: expected the TOPIC header", None),
    Case(F("MESSAGE", "X-A", "1", "", "b"), S, ValueE, r"MESSAGE: expected the TOPIC header", None),
    Case(F("OK"), S, ValueE, r"OK: expected the ID header", None),
    # mc0d's reply to a second CONNECT: a header key without its value.
    Case(F("", "ERROR", "Cannot CONNECT while CONNECTED"), C, CountE, r"ERROR frame 2: ", 2),
]


@pytest.mark.parametrize("case", MALFORMED, ids=lambda case: case.match)
def test_malformed_frames_name_the_command_and_frame(case: Case) -> None:
    with pytest.raises(case.error, match=f"mc0 {case.match}") as caught:
        decode(case.frames, case.dialect)
    assert caught.value.frame == case.frame
    assert caught.value.protocol == "mc0"


# --------------------------------------------------------------------------- garbage in


@settings(max_examples=FUZZ_EXAMPLES)
@given(frame_lists)
def test_garbage_frames(frames: list[bytes]) -> None:
    for dialect in DIALECTS.values():
        # request_id must never raise, whatever arrives.
        found = request_id(frames, dialect)
        assert found is None or isinstance(found, str)
        try:
            cmd = decode(frames, dialect)
        except ProtocolError:
            continue
        # Whatever parses is a command that survives a round trip.
        assert decode(encode(cmd, dialect), dialect) == cmd
        if getattr(cmd, "id", None) is not None:
            assert request_id(frames, dialect) == cmd.id  # type: ignore[union-attr]


@st.composite
def near_valid(draw: st.DrawFn, dialect: Dialect) -> list[bytes]:
    """Valid frames with one frame replaced, removed or added: reaches the deep checks."""
    kind = draw(st.sampled_from(list(COMMANDS)))
    frames = encode(draw(COMMANDS[kind]), dialect)
    index = draw(st.integers(0, len(frames) - 1))
    junk = draw(
        st.binary(max_size=20)
        | st.sampled_from([b"", b"ID", b"TOPIC", b"TTL", b"MESSAGE", b"X-A", b"\xff"])
    )
    how = draw(st.sampled_from(["replace", "remove", "insert"]))
    if how == "replace":
        return [junk if i == index else frame for i, frame in enumerate(frames)]
    if how == "remove":
        return frames[:index] + frames[index + 1 :]
    return [*frames[:index], junk, *frames[index:]]


@pytest.mark.parametrize("dialect", DIALECTS.values(), ids=DIALECTS.keys())
@settings(max_examples=max(FUZZ_EXAMPLES // 10, 100))
@given(data=st.data())
def test_near_valid_frames(dialect: Dialect, data: st.DataObject) -> None:
    frames = data.draw(near_valid(dialect))
    try:
        cmd = decode(frames, dialect)
    except ProtocolError as exc:
        assert re.match(r"mc0 \S", str(exc))
        return
    assert decode(encode(cmd, dialect), dialect) == cmd
