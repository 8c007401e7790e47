"""eMQP/1.0 codec round trips: every command in every dialect, the eventmq-only commands
in the spec dialect, and headers, call bodies and reply values.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from tests.support.emqp import (
    CALL,
    CALL_BODY,
    COMMANDS_ONLY,
    DIALECTS,
    EVENTMQ_HEADERS,
    EVENTMQ_ONLY,
    ID,
    ID2,
    ID2B,
    IDB,
    PARSED_HEADERS,
    SPEC_COMMANDS,
    V,
)
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
from zbus.common.protocols.errors import FrameValueError, UnknownCommandError

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
