"""eMQP/1.0 golden frames: the spec's tables and eventmq 0.3.13 as captured on the wire,
INFORM queues in both forms, and other protocol versions.
"""

from __future__ import annotations

import pytest

from tests.support.emqp import (
    CALL_BODY,
    DIALECTS,
    EVENTMQ_HEADERS,
    ID,
    ID2,
    ID2B,
    IDB,
    PARSED_HEADERS,
    V,
)
from zbus.common.protocols.emqp import (
    EVENTMQ,
    SPEC,
    Ack,
    Dialect,
    Disconnect,
    EmqpCommand,
    Heartbeat,
    Inform,
    Kbye,
    Ready,
    Reply,
    Request,
    Schedule,
    Unschedule,
    decode,
    encode,
)

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
