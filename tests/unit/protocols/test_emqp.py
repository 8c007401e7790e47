"""eMQP/1.0 codec: round trips, golden frames (spec tables and eventmq 0.3.13), garbage in."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from tests.conftest import FUZZ_EXAMPLES
from tests.unit.protocols.strategies import frame_lists
from zbus.common.protocols.emqp import (
    DEFAULT_QUEUE_WEIGHT,
    EVENTMQ,
    SPEC,
    Ack,
    Dialect,
    Disconnect,
    EmqpCommand,
    EventmqCall,
    Headers,
    Heartbeat,
    Inform,
    JsonValue,
    Kbye,
    Ready,
    Reply,
    Request,
    Schedule,
    Unschedule,
    build_call_body,
    build_reply_value,
    decode,
    encode,
    format_headers,
    has_header,
    header,
    parse_call_body,
    parse_headers,
    parse_reply_value,
)
from zbus.common.protocols.errors import (
    FrameCountError,
    FrameValueError,
    ProtocolError,
    UnknownCommandError,
)

V = b"eMQP/1.0"
H = [b"", V]  # frames 0 and 1 of every well-formed 1.0 message
ID = "0b7c4bbd-6f8e-4d1e-9a43-5b4c1f0d2a11"
ID2 = "9f1e2d3c-4b5a-4678-9abc-def012345678"
IDB = ID.encode()
ID2B = ID2.encode()

# A body exactly as eventmq 0.3.13's defer_job() writes it (json.dumps, default separators).
CALL_BODY = (
    b'["run", {"callable": "send_email", "path": "myapp.tasks", "args": ["a@example.com"],'
    b' "kwargs": {"subject": "hi"}, "class_args": [], "class_kwargs": {}}]'
)
CALL = EventmqCall(
    callable="send_email", path="myapp.tasks", args=("a@example.com",), kwargs={"subject": "hi"}
)
EVENTMQ_HEADERS = b"reply-requested,retry-count:1,timeout:10"
PARSED_HEADERS: Headers = (("reply-requested", ""), ("retry-count", "1"), ("timeout", "10"))

# The presets and two mixes, to show the options act independently.
COMMANDS_ONLY = Dialect(eventmq_commands=True)
JSON_ONLY = Dialect(json_bodies=True, json_queues=True)
DIALECTS = {
    "spec": SPEC,
    "eventmq": EVENTMQ,
    "commands-only": COMMANDS_ONLY,
    "json-only": JSON_ONLY,
}
SPEC_COMMANDS = (Request, Inform, Ready, Reply, Heartbeat, Disconnect)
EVENTMQ_ONLY = (Ack, Kbye, Schedule, Unschedule)


# --------------------------------------------------------------------------- strategies

ids = st.text(min_size=1, max_size=40)
texts = st.text(max_size=30)
versions = st.one_of(
    st.just("1.0"), st.from_regex(r"[0-9]{1,3}(\.[0-9]{1,3}){0,3}", fullmatch=True)
)
header_names = st.text(
    st.characters(codec="utf-8", exclude_characters=",:"), min_size=1, max_size=12
)
header_values = st.text(st.characters(codec="utf-8", exclude_characters=","), max_size=12)
headers_st: SearchStrategy[Headers] = st.lists(
    st.tuples(header_names, header_values), max_size=5
).map(tuple)
json_values: SearchStrategy[JsonValue] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
calls = st.builds(
    EventmqCall,
    callable=ids,
    path=ids,
    args=st.lists(json_values, max_size=3).map(tuple),
    kwargs=st.dictionaries(st.text(max_size=8), json_values, max_size=3),
    class_args=st.lists(json_values, max_size=2).map(tuple),
    class_kwargs=st.dictionaries(st.text(max_size=8), json_values, max_size=2),
)


def queues_for(dialect: Dialect) -> SearchStrategy[tuple[tuple[str, int], ...]]:
    if dialect.json_queues:
        return st.lists(st.tuples(ids, st.integers(-1000, 1000)), max_size=4).map(tuple)
    # The CSV form: names without ',' (the first not starting with '['), weight fixed.
    csv_names = st.text(
        st.characters(codec="utf-8", exclude_characters=","),
        min_size=1,
        max_size=12,
    )
    return (
        st.lists(csv_names, max_size=4)
        .filter(lambda names: not names or not names[0].startswith("["))
        .map(lambda names: tuple((name, DEFAULT_QUEUE_WEIGHT) for name in names))
    )


def commands_for(dialect: Dialect, kind: type) -> SearchStrategy[EmqpCommand]:
    body = calls.map(build_call_body) if dialect.json_bodies else st.binary(max_size=64)
    v = {"version": versions}
    strategies: dict[type, SearchStrategy[EmqpCommand]] = {
        Request: st.builds(Request, ids, texts, headers_st, body, **v),
        Inform: st.builds(Inform, ids, queues_for(dialect), st.none() | texts, **v),
        Ready: st.builds(Ready, ids, **v),
        Reply: st.builds(Reply, ids, st.binary(max_size=64), st.none() | ids, **v),
        Heartbeat: st.builds(Heartbeat, ids, st.none() | texts, **v),
        Disconnect: st.builds(Disconnect, ids, **v),
        Ack: st.builds(Ack, ids, ids, **v),
        Kbye: st.builds(Kbye, ids, **v),
        Schedule: st.one_of(
            st.builds(Schedule, ids, texts, headers_st, st.just(-1), body, ids, **v),
            st.builds(
                Schedule, ids, texts, headers_st, st.integers(0, 2**64 - 1), body, st.just(""), **v
            ),
        ),
        Unschedule: st.builds(
            Unschedule, ids, texts, headers_st, st.integers(-1, 2**64 - 1), body, texts, **v
        ),
    }
    return strategies[kind]


def _cases() -> list[Any]:
    cases: list[Any] = []
    for name, dialect in DIALECTS.items():
        kinds = SPEC_COMMANDS + (EVENTMQ_ONLY if dialect.eventmq_commands else ())
        cases += [pytest.param(dialect, kind, id=f"{name}-{kind.__name__}") for kind in kinds]
    return cases


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize(("dialect", "kind"), _cases())
@given(data=st.data())
def test_round_trip(dialect: Dialect, kind: type, data: st.DataObject) -> None:
    cmd = data.draw(commands_for(dialect, kind))
    frames = encode(cmd, dialect)
    assert all(type(frame) is bytes for frame in frames)
    assert frames[0] == b""
    assert frames[2] == cmd.COMMAND.encode()
    decoded = decode(frames, dialect)
    assert decoded == cmd
    assert type(decoded) is kind
    assert encode(decoded, dialect) == frames


@pytest.mark.parametrize(
    "cmd",
    [
        Ack(ID, ID2),
        Kbye(ID),
        Schedule(ID, "default", (), 60, CALL_BODY, ""),
        Unschedule(ID, "default", (), -1, CALL_BODY, ""),
    ],
    ids=lambda cmd: cmd.COMMAND,
)
def test_eventmq_commands_are_unknown_in_the_spec_dialect(cmd: EmqpCommand) -> None:
    frames = encode(cmd, EVENTMQ)
    name = cmd.COMMAND
    with pytest.raises(UnknownCommandError, match=rf"need the eventmq_commands.*got b'{name}'"):
        decode(frames, SPEC)
    with pytest.raises(UnknownCommandError, match=rf"emqp {name}: expected a dialect"):
        encode(cmd, SPEC)
    assert decode(frames, COMMANDS_ONLY) == cmd


def test_decoded_commands_are_frozen_hashable_and_equal_to_constructed_ones() -> None:
    request = decode([b"", V, b"REQUEST", IDB, b"q", b"timeout:10", b"x"])
    reply = decode([b"", V, b"REPLY", IDB, b"x", ID2B])
    assert request == Request(ID, "q", (("timeout", "10"),), b"x")
    assert reply == Reply(ID, b"x", ID2)
    assert hash(request) == hash(Request(ID, "q", (("timeout", "10"),), b"x"))
    assert hash(reply) == hash(Reply(ID, b"x", ID2))
    for cmd in (request, reply):
        with pytest.raises(dataclasses.FrozenInstanceError):
            cmd.msgid = "other"  # type: ignore[misc]
        assert cmd.version == "1.0"


# --------------------------------------------------------------------------- golden vectors

GOLDEN = [
    # The spec's tables (REQUEST's frame 2 is REQUEST; the table's "READY" is a typo).
    pytest.param(
        SPEC,
        [b"", V, b"REQUEST", IDB, b"default", b"", b"payload"],
        Request(ID, "default", (), b"payload"),
        id="spec-request",
    ),
    pytest.param(
        SPEC,
        [b"", V, b"INFORM", IDB, b"default,reports"],
        Inform(ID, (("default", 10), ("reports", 10))),
        id="spec-inform-csv",
    ),
    pytest.param(SPEC, [b"", V, b"READY", IDB], Ready(ID), id="spec-ready"),
    pytest.param(SPEC, [b"", V, b"REPLY", IDB, b"result"], Reply(ID, b"result"), id="spec-reply"),
    pytest.param(SPEC, [b"", V, b"HEARTBEAT", IDB], Heartbeat(ID), id="spec-heartbeat"),
    pytest.param(SPEC, [b"", V, b"DISCONNECT", IDB], Disconnect(ID), id="spec-disconnect"),
    # eventmq 0.3.13 as captured on the wire (PEERS.md).
    pytest.param(
        EVENTMQ,
        [b"", V, b"REQUEST", IDB, b"default", EVENTMQ_HEADERS, CALL_BODY],
        Request(ID, "default", PARSED_HEADERS, CALL_BODY),
        id="eventmq-request",
    ),
    pytest.param(
        EVENTMQ,
        [b"", V, b"INFORM", IDB, b'[[10, "default"]]', b"worker"],
        Inform(ID, (("default", 10),), "worker"),
        id="eventmq-inform-worker",
    ),
    pytest.param(
        EVENTMQ,
        [b"", V, b"INFORM", IDB, b'[[10, "default"], [15, "push_notifications"]]', b"worker"],
        Inform(ID, (("default", 10), ("push_notifications", 15)), "worker"),
        id="eventmq-inform-two-queues",
    ),
    pytest.param(
        EVENTMQ,
        [b"", V, b"INFORM", IDB, b"", b"scheduler"],
        Inform(ID, (), "scheduler"),
        id="eventmq-inform-scheduler",
    ),
    pytest.param(EVENTMQ, [b"", V, b"ACK", ID2B, IDB], Ack(ID2, ID), id="eventmq-ack-of-inform"),
    pytest.param(EVENTMQ, [b"", V, b"READY", IDB], Ready(ID), id="eventmq-ready"),
    pytest.param(
        EVENTMQ,
        [b"", V, b"REPLY", ID2B, b'{"value": 3}', IDB],
        Reply(ID2, b'{"value": 3}', ID),
        id="eventmq-worker-reply",
    ),
    pytest.param(
        EVENTMQ,
        [b"", V, b"REPLY", ID2B, IDB],
        Reply(ID2, IDB),
        id="eventmq-router-handoff-reply",
    ),
    pytest.param(
        EVENTMQ,
        [b"", V, b"HEARTBEAT", IDB, b"1763800532.8623419"],
        Heartbeat(ID, "1763800532.8623419"),
        id="eventmq-heartbeat",
    ),
    pytest.param(EVENTMQ, [b"", V, b"KBYE", IDB], Kbye(ID), id="eventmq-kbye"),
    pytest.param(EVENTMQ, [b"", V, b"DISCONNECT", IDB], Disconnect(ID), id="eventmq-disconnect"),
    pytest.param(
        EVENTMQ,
        [b"", V, b"SCHEDULE", IDB, b"default", b"guarantee", b"60", CALL_BODY, b""],
        Schedule(ID, "default", (("guarantee", ""),), 60, CALL_BODY, ""),
        id="eventmq-schedule-interval",
    ),
    pytest.param(
        EVENTMQ,
        [b"", V, b"SCHEDULE", IDB, b"default", b"guarantee", b"-1", CALL_BODY, b"*/5 * * * *"],
        Schedule(ID, "default", (("guarantee", ""),), -1, CALL_BODY, "*/5 * * * *"),
        id="eventmq-schedule-cron",
    ),
    pytest.param(
        EVENTMQ,
        [b"", V, b"UNSCHEDULE", IDB, b"default", b"guarantee", b"-1", CALL_BODY, b""],
        Unschedule(ID, "default", (("guarantee", ""),), -1, CALL_BODY, ""),
        id="eventmq-unschedule",
    ),
]


@pytest.mark.parametrize(("dialect", "frames", "cmd"), GOLDEN)
def test_golden_frames(dialect: Dialect, frames: list[bytes], cmd: EmqpCommand) -> None:
    assert decode(frames, dialect) == cmd
    assert encode(cmd, dialect) == frames


def test_inform_queues_decode_in_both_forms_in_every_dialect() -> None:
    json_frames = [b"", V, b"INFORM", IDB, b'[[5, "a"], [10, "b"]]', b"worker"]
    csv_frames = [b"", V, b"INFORM", IDB, b"a,b"]
    for dialect in DIALECTS.values():
        assert decode(json_frames, dialect) == Inform(ID, (("a", 5), ("b", 10)), "worker")
        assert decode(csv_frames, dialect) == Inform(ID, (("a", 10), ("b", 10)))
    # Encoding follows the dialect.
    assert encode(Inform(ID, (("a", 10), ("b", 10))), SPEC)[4] == b"a,b"
    assert encode(Inform(ID, (("a", 10), ("b", 10))), EVENTMQ)[4] == b'[[10, "a"], [10, "b"]]'


def test_other_protocol_versions_are_recorded_and_written_back() -> None:
    frames = [b"", b"eMQP/1.1", b"READY", IDB]
    cmd = decode(frames)
    assert cmd == Ready(ID, version="1.1")
    assert cmd != Ready(ID)
    assert encode(cmd) == frames
    assert decode([b"", b"eMQP/2", b"KBYE", IDB], EVENTMQ) == Kbye(ID, version="2")


# --------------------------------------------------------------------------- headers and bodies


def test_eventmq_header_text_round_trips_byte_exact() -> None:
    assert parse_headers(EVENTMQ_HEADERS.decode()) == PARSED_HEADERS
    assert format_headers(PARSED_HEADERS) == EVENTMQ_HEADERS.decode()
    assert parse_headers("") == ()
    assert format_headers(()) == ""
    assert parse_headers("a:b:c") == (("a", "b:c"),)
    assert format_headers((("a", "b:c"),)) == "a:b:c"
    assert parse_headers("run_count:3,nohaste") == (("run_count", "3"), ("nohaste", ""))


def test_header_accessors() -> None:
    assert header(PARSED_HEADERS, "timeout") == "10"
    assert header(PARSED_HEADERS, "reply-requested") == ""
    assert header(PARSED_HEADERS, "guarantee") is None
    assert header((("a", "1"), ("a", "2")), "a") == "1"
    assert has_header(PARSED_HEADERS, "reply-requested")
    assert has_header(PARSED_HEADERS, "retry-count")
    assert not has_header(PARSED_HEADERS, "guarantee")


@given(headers_st)
def test_headers_round_trip(headers: Headers) -> None:
    text = format_headers(headers)
    assert parse_headers(text) == headers
    assert format_headers(parse_headers(text)) == text


@pytest.mark.parametrize("text", ["a,,b", ",", "a,", ":v", "x:", "a,b:"])
def test_non_canonical_header_text_is_refused(text: str) -> None:
    with pytest.raises(FrameValueError, match="comma-separated 'name' or 'name:value'"):
        parse_headers(text)


@pytest.mark.parametrize(
    "headers", [(("a,b", ""),), (("a:b", "1"),), (("", "1"),), (("a", "1,2"),)]
)
def test_unwritable_headers_are_refused(headers: Headers) -> None:
    with pytest.raises(FrameValueError, match="header names without"):
        format_headers(headers)
    with pytest.raises(FrameValueError, match="emqp REQUEST: expected header names without"):
        encode(Request(ID, "q", headers, b""))


def test_call_body_matches_eventmq_byte_for_byte() -> None:
    assert build_call_body(CALL) == CALL_BODY
    assert parse_call_body(CALL_BODY) == CALL
    minimal = build_call_body(EventmqCall(callable="walk", path="os"))
    assert minimal == (
        b'["run", {"callable": "walk", "path": "os", "args": [], "kwargs": {},'
        b' "class_args": [], "class_kwargs": {}}]'
    )


def test_call_body_defaults_missing_keys_and_ignores_unknown_ones() -> None:
    # eventmq's own old scheduler sent only path and callable.
    body = b'["run", {"path": "pkg.mod:Cls", "callable": "go", "extra": 1}]'
    assert parse_call_body(body) == EventmqCall(callable="go", path="pkg.mod:Cls")
    frames = [b"", V, b"REQUEST", IDB, b"default", b"", body]
    assert decode(frames, EVENTMQ) == Request(ID, "default", (), body)


@given(calls)
def test_call_body_round_trip(call: EventmqCall) -> None:
    assert parse_call_body(build_call_body(call)) == call


def test_call_body_build_errors() -> None:
    with pytest.raises(FrameValueError, match="non-empty 'callable' and 'path'"):
        build_call_body(EventmqCall(callable="", path="os"))
    with pytest.raises(FrameValueError, match="JSON can encode"):
        build_call_body(EventmqCall(callable="f", path="m", args=(object(),)))  # type: ignore[arg-type]


def test_worker_reply_value() -> None:
    assert build_reply_value(3) == b'{"value": 3}'
    assert build_reply_value({"rows": [1, 2]}) == b'{"value": {"rows": [1, 2]}}'
    assert parse_reply_value(b'{"value": "TimeoutError"}') == "TimeoutError"
    assert parse_reply_value(b'{"value": null}') is None
    for bad in (b"3", b"{}", b"[1]", b"\xff", b"{"):
        with pytest.raises(FrameValueError, match=r"emqp REPLY frame 4: expected worker result"):
            parse_reply_value(bad)
    with pytest.raises(FrameValueError, match="emqp REPLY: expected worker result"):
        build_reply_value(object())  # type: ignore[arg-type]


# --------------------------------------------------------------------------- garbage in

PLAUSIBLE = st.one_of(
    st.sampled_from(
        [
            b"",
            IDB,
            b"default",
            b"default,other",
            b"a,,b",
            b"[",
            b'[[10, "default"]]',
            b'[[10, ""]]',
            b'[["10", "default"]]',
            b'[[true, "x"]]',
            b"worker",
            b"-1",
            b"60",
            b"-5",
            b"1e3",
            b"* * * * *",
            b'{"value": 1}',
            CALL_BODY,
            b'["run", {}]',
            b'["run", {"callable": "f", "path": "m", "args": null}]',
            b'["go", {"callable": "f", "path": "m"}]',
            EVENTMQ_HEADERS,
            b"x:",
            b"\xff\xfe",
            b"[" * 200,
            b"[[10, ",
            b'[[10, "a"]',
            b'[["a", 10]]',
            b"[1]",
            b'[[10, "a,b"]]',
            b'[[10, "\\ud800"]]',
        ]
    ),
    st.binary(max_size=24),
)
# Frame counts each command accepts (the decoder's own table is private on purpose).
FRAME_COUNTS = {
    b"REQUEST": (7, 7),
    b"INFORM": (5, 6),
    b"READY": (4, 4),
    b"REPLY": (5, 6),
    b"HEARTBEAT": (4, 5),
    b"DISCONNECT": (4, 4),
    b"ACK": (5, 5),
    b"KBYE": (4, 4),
    b"SCHEDULE": (9, 9),
    b"UNSCHEDULE": (9, 9),
    b"PUBLISH": (6, 6),
    b"request": (7, 7),
}


@st.composite
def near_misses(draw: st.DrawFn) -> list[bytes]:
    """Mostly well-framed messages (right envelope, about the right frame count) whose
    content frames are drawn from values that are almost valid, so every decoder
    branch is reached often, not only the first checks."""
    command = draw(st.sampled_from(sorted(FRAME_COUNTS)))
    low, high = FRAME_COUNTS[command]
    count = draw(st.integers(low - 1, high + 1))
    empty = draw(st.sampled_from([b"", b"", b"", b"", b"x"]))
    version = draw(st.sampled_from([V, V, V, V, b"eMQP/1.1", b"eMQP/", b"MDPC01"]))
    rest = draw(st.lists(PLAUSIBLE, min_size=count - 3, max_size=count - 3))
    return [empty, version, command, *rest]


def _decode_or_protocol_error(frames: Sequence[bytes]) -> None:
    """Decode in every dialect: a command or ProtocolError, never anything else.

    A command that decodes must also survive encode -> decode unchanged; the one
    allowed refusal is an INFORM whose JSON queues the spec's CSV form cannot carry.
    """
    for dialect in DIALECTS.values():
        try:
            cmd = decode(frames, dialect)
        except ProtocolError:
            continue
        try:
            again = encode(cmd, dialect)
        except ProtocolError:
            assert isinstance(cmd, Inform)
            assert not dialect.json_queues
            continue
        assert decode(again, dialect) == cmd


@settings(max_examples=FUZZ_EXAMPLES)
@given(frame_lists)
def test_garbage_in_raises_only_protocol_error(frames: list[bytes]) -> None:
    _decode_or_protocol_error(frames)


@settings(max_examples=FUZZ_EXAMPLES)
@given(near_misses())
def test_near_miss_messages_raise_only_protocol_error(frames: list[bytes]) -> None:
    _decode_or_protocol_error(frames)


# --------------------------------------------------------------------------- targeted errors

MALFORMED = [
    pytest.param(
        SPEC,
        [],
        FrameCountError,
        r"^emqp <unknown command>: expected at least 4 frames, got '0 frames'",
        id="empty",
    ),
    pytest.param(
        SPEC,
        [*H, b"READY"],
        FrameCountError,
        r"^emqp READY: expected 4 frames, got '3 frames'",
        id="ready-short",
    ),
    pytest.param(
        SPEC,
        [b"x", V, b"READY", IDB],
        FrameValueError,
        r"^emqp READY frame 0: expected an empty frame",
        id="frame0",
    ),
    pytest.param(
        SPEC,
        [b"", b"eMQP/", b"READY", IDB],
        FrameValueError,
        r"^emqp READY frame 1: expected the protocol version",
        id="version-empty",
    ),
    pytest.param(
        SPEC,
        [b"", b"MDPC01", b"REQUEST", IDB],
        FrameValueError,
        r"^emqp REQUEST frame 1: expected the protocol version",
        id="version-other",
    ),
    pytest.param(
        SPEC,
        [*H, b"PUBLISH", IDB, b"t", b"{}"],
        UnknownCommandError,
        r"^emqp <unknown command> frame 2: expected one of"
        r" REQUEST, INFORM, READY, REPLY, HEARTBEAT, DISCONNECT",
        id="unknown",
    ),
    pytest.param(
        EVENTMQ,
        [*H, b"ready", IDB],
        UnknownCommandError,
        r"^emqp <unknown command> frame 2: .*got b'ready'",
        id="lowercase",
    ),
    pytest.param(
        SPEC,
        [*H, b"ACK", IDB, ID2B],
        UnknownCommandError,
        r"frame 2: .*ACK, KBYE, SCHEDULE, UNSCHEDULE need the eventmq_commands",
        id="ack-in-spec",
    ),
    pytest.param(
        SPEC,
        [*H, b"REQUEST", IDB, b"q", b""],
        FrameCountError,
        r"^emqp REQUEST: expected 7 frames, got '6 frames'",
        id="request-count",
    ),
    pytest.param(
        SPEC,
        [*H, b"REQUEST", b"\xff", b"q", b"", b""],
        FrameValueError,
        r"^emqp REQUEST frame 3: expected message id as UTF-8 text",
        id="request-msgid-utf8",
    ),
    pytest.param(
        SPEC,
        [*H, b"REQUEST", b"", b"q", b"", b""],
        FrameValueError,
        r"^emqp REQUEST frame 3: expected message id as non-empty",
        id="request-msgid-empty",
    ),
    pytest.param(
        SPEC,
        [*H, b"REQUEST", IDB, b"\xc3", b"", b""],
        FrameValueError,
        r"^emqp REQUEST frame 4: expected queue name as UTF-8",
        id="request-queue-utf8",
    ),
    pytest.param(
        SPEC,
        [*H, b"REQUEST", IDB, b"q", b"a,,b", b""],
        FrameValueError,
        r"^emqp REQUEST frame 5: expected headers as comma-separated",
        id="request-headers-empty-item",
    ),
    pytest.param(
        SPEC,
        [*H, b"REQUEST", IDB, b"q", b"timeout:", b""],
        FrameValueError,
        r"^emqp REQUEST frame 5: expected headers",
        id="request-headers-empty-value",
    ),
    pytest.param(
        SPEC,
        [*H, b"REQUEST", IDB, b"q", b"\xff", b""],
        FrameValueError,
        r"^emqp REQUEST frame 5: expected headers as UTF-8",
        id="request-headers-utf8",
    ),
    pytest.param(
        EVENTMQ,
        [*H, b"REQUEST", IDB, b"q", b"", b"not json"],
        FrameValueError,
        r"^emqp REQUEST frame 6: expected eventmq call body .* as UTF-8 JSON",
        id="request-body-json",
    ),
    pytest.param(
        EVENTMQ,
        [*H, b"REQUEST", IDB, b"q", b"", b'{"run": 1}'],
        FrameValueError,
        r"frame 6: .* as a JSON list of 2 items",
        id="request-body-object",
    ),
    pytest.param(
        EVENTMQ,
        [*H, b"REQUEST", IDB, b"q", b"", b'["go", {}]'],
        FrameValueError,
        r'frame 6: .* with the subcommand "run"',
        id="request-body-subcommand",
    ),
    pytest.param(
        EVENTMQ,
        [*H, b"REQUEST", IDB, b"q", b"", b'["run", []]'],
        FrameValueError,
        r"frame 6: .* with a JSON object of call parameters",
        id="request-body-params",
    ),
    pytest.param(
        EVENTMQ,
        [*H, b"REQUEST", IDB, b"q", b"", b'["run", {"path": "m"}]'],
        FrameValueError,
        r"frame 6: .* with 'callable' as non-empty text",
        id="request-body-callable",
    ),
    pytest.param(
        EVENTMQ,
        [*H, b"REQUEST", IDB, b"q", b"", b'["run", {"callable": "f", "path": ""}]'],
        FrameValueError,
        r"frame 6: .* with 'path' as non-empty text",
        id="request-body-path",
    ),
    pytest.param(
        EVENTMQ,
        [*H, b"REQUEST", IDB, b"q", b"", b'["run", {"callable": "f", "path": "m", "kwargs": []}]'],
        FrameValueError,
        r"frame 6: .* with 'kwargs' as a JSON object",
        id="request-body-kwargs",
    ),
    pytest.param(
        EVENTMQ,
        [*H, b"REQUEST", IDB, b"q", b"", b'["run", {"callable": "f", "path": "m", "args": null}]'],
        FrameValueError,
        r"frame 6: .* with 'args' as a JSON list",
        id="request-body-args-null",
    ),
    pytest.param(
        SPEC,
        [*H, b"INFORM", IDB],
        FrameCountError,
        r"^emqp INFORM: expected 5 to 6 frames, got '4 frames'",
        id="inform-count",
    ),
    pytest.param(
        SPEC,
        [*H, b"INFORM", IDB, b"a,,b"],
        FrameValueError,
        r"^emqp INFORM frame 4: expected queue names as comma-separated non-empty names",
        id="inform-csv-empty-name",
    ),
    pytest.param(
        EVENTMQ,
        [*H, b"INFORM", IDB, b'[["10", "default"]]', b"worker"],
        FrameValueError,
        r"^emqp INFORM frame 4: expected queues as a JSON list of \[weight, name\]",
        id="inform-json-weight",
    ),
    pytest.param(
        EVENTMQ,
        [*H, b"INFORM", IDB, b"[[10, ", b"worker"],
        FrameValueError,
        r"^emqp INFORM frame 4: expected queues as a JSON list",
        id="inform-json-broken",
    ),
    pytest.param(
        EVENTMQ,
        [*H, b"INFORM", IDB, b"d", b"\xff"],
        FrameValueError,
        r"^emqp INFORM frame 5: expected client type as UTF-8",
        id="inform-type-utf8",
    ),
    pytest.param(
        SPEC,
        [*H, b"REPLY", IDB, b"x", b""],
        FrameValueError,
        r"^emqp REPLY frame 5: expected request id as non-empty",
        id="reply-empty-request-id",
    ),
    pytest.param(
        SPEC,
        [*H, b"REPLY", IDB, b"x", b"y", b"z"],
        FrameCountError,
        r"^emqp REPLY: expected 5 to 6 frames, got '7 frames'",
        id="reply-count",
    ),
    pytest.param(
        SPEC,
        [*H, b"HEARTBEAT", IDB, b"1.0", b"extra"],
        FrameCountError,
        r"^emqp HEARTBEAT: expected 4 to 5 frames",
        id="heartbeat-count",
    ),
    pytest.param(
        EVENTMQ,
        [*H, b"ACK", IDB, b""],
        FrameValueError,
        r"^emqp ACK frame 4: expected acknowledged message id as non-empty",
        id="ack-empty-ref",
    ),
    pytest.param(
        EVENTMQ,
        [*H, b"KBYE", IDB, b"x"],
        FrameCountError,
        r"^emqp KBYE: expected 4 frames, got '5 frames'",
        id="kbye-count",
    ),
    pytest.param(
        EVENTMQ,
        [*H, b"SCHEDULE", IDB, b"q", b"", b"soon", CALL_BODY, b""],
        FrameValueError,
        r"^emqp SCHEDULE frame 6: expected interval in seconds \(or -1\) as ASCII decimal",
        id="schedule-interval",
    ),
    pytest.param(
        EVENTMQ,
        [*H, b"SCHEDULE", IDB, b"q", b"", b"-2", CALL_BODY, b""],
        FrameValueError,
        r"^emqp SCHEDULE frame 6: expected interval",
        id="schedule-interval-negative",
    ),
    pytest.param(
        EVENTMQ,
        [*H, b"SCHEDULE", IDB, b"q", b"", b"-1", CALL_BODY, b""],
        FrameValueError,
        r"^emqp SCHEDULE frame 8: expected a cron expression when the interval is -1",
        id="schedule-cron-missing",
    ),
    pytest.param(
        EVENTMQ,
        [*H, b"SCHEDULE", IDB, b"q", b"", b"60", CALL_BODY, b"* * * * *"],
        FrameValueError,
        r"^emqp SCHEDULE frame 8: expected a cron expression"
        r" when the interval is -1 and none otherwise",
        id="schedule-both",
    ),
    pytest.param(
        EVENTMQ,
        [*H, b"SCHEDULE", IDB, b"q", b"", b"60", b"[]", b""],
        FrameValueError,
        r"^emqp SCHEDULE frame 7: expected eventmq call body",
        id="schedule-body",
    ),
    pytest.param(
        EVENTMQ,
        [*H, b"UNSCHEDULE", IDB, b"q", b"", b"-1", CALL_BODY],
        FrameCountError,
        r"^emqp UNSCHEDULE: expected 9 frames, got '8 frames'",
        id="unschedule-count",
    ),
]


@pytest.mark.parametrize(("dialect", "frames", "error", "pattern"), MALFORMED)
def test_malformed_messages_name_command_and_frame(
    dialect: Dialect, frames: list[bytes], error: type[ProtocolError], pattern: str
) -> None:
    with pytest.raises(error, match=pattern) as caught:
        decode(frames, dialect)
    assert caught.value.protocol == "emqp"


def test_error_attributes() -> None:
    with pytest.raises(FrameValueError) as caught:
        decode([b"", V, b"REQUEST", IDB, b"q", b"a,,b", b""])
    assert caught.value.command == "REQUEST"
    assert caught.value.frame == 5
    with pytest.raises(UnknownCommandError) as unknown:
        decode([b"", V, b"NOPE", IDB])
    assert unknown.value.command is None
    assert unknown.value.frame == 2


def test_body_is_opaque_in_the_spec_dialect() -> None:
    frames = [b"", V, b"REQUEST", IDB, b"q", b"", b"\xff\x00 not json"]
    assert decode(frames, SPEC) == Request(ID, "q", (), b"\xff\x00 not json")
    with pytest.raises(FrameValueError, match="frame 6"):
        decode(frames, EVENTMQ)


# --------------------------------------------------------------------------- encode-side errors

ENCODE_ERRORS = [
    pytest.param(
        SPEC, Ready(""), r"^emqp READY: expected message id as non-empty", id="empty-msgid"
    ),
    pytest.param(
        SPEC,
        Request("", "q", (), b""),
        r"^emqp REQUEST: expected message id",
        id="empty-request-msgid",
    ),
    pytest.param(
        SPEC, Reply(ID, b"", ""), r"^emqp REPLY: expected request id", id="empty-request-id"
    ),
    pytest.param(
        EVENTMQ, Ack(ID, ""), r"^emqp ACK: expected acknowledged message id", id="empty-ref-id"
    ),
    pytest.param(
        SPEC,
        Ready(ID, version="x"),
        r"^emqp READY: expected a version such as '1.0'",
        id="bad-version",
    ),
    pytest.param(
        SPEC, Inform(ID, (("a", 5),)), r"^emqp INFORM: expected weight 10", id="csv-weight"
    ),
    pytest.param(
        SPEC,
        Inform(ID, (("a,b", 10),)),
        r"^emqp INFORM: expected queue names without ','",
        id="csv-comma",
    ),
    pytest.param(
        SPEC,
        Inform(ID, (("[x", 10),)),
        r"^emqp INFORM: expected a first queue name not starting with '\['",
        id="csv-bracket",
    ),
    pytest.param(
        EVENTMQ,
        Inform(ID, (("", 10),)),
        r"^emqp INFORM: expected queues as \(non-empty name",
        id="json-empty-name",
    ),
    pytest.param(
        EVENTMQ,
        Request(ID, "q", (), b"nope"),
        r"^emqp REQUEST frame 6: expected eventmq call body",
        id="json-body",
    ),
    pytest.param(
        EVENTMQ,
        Schedule(ID, "q", (), -1, CALL_BODY, ""),
        r"^emqp SCHEDULE: expected a cron expression",
        id="schedule-neither",
    ),
    pytest.param(
        EVENTMQ,
        Schedule(ID, "q", (), 5, CALL_BODY, "* * * * *"),
        r"^emqp SCHEDULE: expected a cron expression",
        id="schedule-both",
    ),
    pytest.param(
        EVENTMQ,
        Unschedule(ID, "q", (), -2, CALL_BODY, ""),
        r"^emqp UNSCHEDULE: expected an interval",
        id="interval",
    ),
    pytest.param(
        SPEC,
        Heartbeat(ID, "\ud800"),
        r"^emqp HEARTBEAT: expected text that UTF-8 can encode",
        id="surrogate",
    ),
]


@pytest.mark.parametrize(("dialect", "cmd", "pattern"), ENCODE_ERRORS)
def test_encode_refuses_what_cannot_be_written(
    dialect: Dialect, cmd: EmqpCommand, pattern: str
) -> None:
    with pytest.raises(ProtocolError, match=pattern):
        encode(cmd, dialect)


def test_encode_rejects_non_commands() -> None:
    with pytest.raises(TypeError, match="not an eMQP command"):
        encode("READY")  # type: ignore[arg-type]
