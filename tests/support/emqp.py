"""Frames, ids, bodies and dialects the eMQP/1.0 codec tests share: an eventmq 0.3.13
call body and headers as it writes them, and the dialect presets and mixes.
"""

from __future__ import annotations

from zbus.common.protocols.emqp import (
    EVENTMQ,
    SPEC,
    Ack,
    Dialect,
    Disconnect,
    EventmqCall,
    Headers,
    Heartbeat,
    Inform,
    Kbye,
    Ready,
    Reply,
    Request,
    Schedule,
    Unschedule,
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
