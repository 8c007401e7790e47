"""eMQP/1.0 malformed messages: each error names the command and the frame, and says
what was expected.
"""

from __future__ import annotations

import pytest

from tests.support.emqp import CALL_BODY, ID, ID2B, IDB, H, V
from zbus.common.protocols.emqp import EVENTMQ, SPEC, Dialect, Request, decode
from zbus.common.protocols.errors import (
    FrameCountError,
    FrameValueError,
    ProtocolError,
    UnknownCommandError,
)

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
