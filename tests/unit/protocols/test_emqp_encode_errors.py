"""eMQP/1.0 encode-side errors: what the wire cannot carry is refused with the command
named.
"""

from __future__ import annotations

import pytest

from tests.support.emqp import CALL_BODY, ID
from zbus.common.protocols.emqp import (
    EVENTMQ,
    SPEC,
    Ack,
    Dialect,
    EmqpCommand,
    Heartbeat,
    Inform,
    Ready,
    Reply,
    Request,
    Schedule,
    Unschedule,
    encode,
)
from zbus.common.protocols.errors import ProtocolError

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
