"""What the broker core refuses or drops: a full queue, bad headers, commands from an
uninformed worker or in the wrong place, replies that match no running job, and a bad
configuration.
"""

from __future__ import annotations

import pytest

from tests.support.broker_core import T0, VALUE, Broker, body_of
from zbus.broker.core.broker import CoreConfig, Outgoing
from zbus.broker.core.errors import QueueFullError
from zbus.broker.core.model import JobState
from zbus.common.protocols.emqp import (
    Disconnect,
    Headers,
    Heartbeat,
    Inform,
    Kbye,
    Ready,
    Reply,
    Request,
)

# =========================================================================== bounds, errors


def test_max_queued_refuses_new_jobs_with_a_clear_error() -> None:
    b = Broker(max_queued=2)
    b.request(b"C", "j1")
    b.request(b"C", "j2")
    b.changes()
    b.out()
    notice = b.request(b"C", "j3")
    assert notice is not None and "max_queued" in notice
    (refusal,) = b.out()
    assert isinstance(refusal.command, Reply)
    assert refusal.command.request_id == "j3"
    assert body_of(refusal.command.body) == {
        "error": {"type": "QueueFullError", "message": notice},
        "state": "rejected",
    }
    assert b.changes().jobs == []
    assert b.core.job("j3") is None
    with pytest.raises(QueueFullError):
        b.core.submit("j4", "default", (), b"", T0, wall=T0)
    assert b.core.counters["rejected_requests"] == 1


@pytest.mark.parametrize(
    ("headers", "fragment"),
    [
        ((("retry-count", "-1"),), "header retry-count: expected a whole number in 0..1000"),
        ((("retry-count", "two"),), "header retry-count"),
        (
            (("timeout", "-5"),),
            "header timeout: expected a number of seconds in 0..2592000 (30 days; 0: no timeout)",
        ),
        ((("delay", "nan"),), "header delay"),
        ((("delay", "inf"),), "header delay"),
    ],
)
def test_bad_headers_refuse_the_job(headers: Headers, fragment: str) -> None:
    b = Broker()
    notice = b.request(b"C", "j1", headers=headers)
    assert notice is not None and fragment in notice
    (refusal,) = b.out()
    assert isinstance(refusal.command, Reply)
    assert body_of(refusal.command.body)["state"] == "rejected"
    assert b.core.job("j1") is None


@pytest.mark.parametrize("compat", ["spec", "eventmq"])
def test_commands_from_an_uninformed_worker(compat: str) -> None:
    b = Broker(compat=compat)
    notice = b.core.worker_message(b"X", Ready("r"), T0, wall=T0)
    assert notice == "READY from a worker that never sent INFORM: dropped"
    b.core.worker_message(b"X", Reply("r", VALUE, "job1"), T0, wall=T0)
    b.core.worker_message(b"X", Heartbeat("h"), T0, wall=T0)
    assert b.core.counters["uninformed_workers"] == 3
    if compat == "spec":
        assert b.out() == [
            Outgoing("worker", b"X", Disconnect("m0")),
            Outgoing("worker", b"X", Disconnect("m1")),
            Outgoing("worker", b"X", Disconnect("m2")),
        ]
    else:  # an eventmq jobmanager would shut down on DISCONNECT
        assert b.out() == []
    assert b.core.worker_message(b"X", Kbye("k"), T0, wall=T0) is None  # leaving: nothing to say
    assert b.out() == []


def test_replies_that_match_no_running_job_are_counted() -> None:
    b = Broker()
    b.worker(b"W", slots=2)
    b.worker(b"V")
    assert b.reply(b"W", "ghost") == "REPLY for unknown job ghost: dropped"
    b.request(b"C", "job1")  # goes to W
    assert b.reply(b"V", "job1") == "REPLY for job job1, not running on this worker: dropped"
    assert b.reply(b"W", "job1") is None
    assert b.reply(b"W", "job1") == "REPLY for job job1, not running on this worker: dropped"
    assert b.core.counters["replies_unknown"] == 1
    assert b.core.counters["replies_not_running"] == 2
    assert b.core.counters["succeeded"] == 1


def test_spec_reply_without_request_id() -> None:
    b = Broker()
    b.worker(b"W", slots=2)
    b.request(b"C", "job1")
    assert b.core.worker_message(b"W", Reply("x", VALUE), T0, wall=T0) is None  # its only job
    assert b.state("job1") is JobState.SUCCEEDED
    b.ready(b"W")
    b.request(b"C", "job2")
    b.request(b"C", "job3")
    assert b.core.worker_message(b"W", Reply("job3", VALUE), T0, wall=T0) is None  # msgid = job id
    assert b.state("job3") is JobState.SUCCEEDED
    b.ready(b"W")
    b.request(b"C", "job4")
    assert b.core.worker_message(b"W", Reply("x", VALUE), T0, wall=T0) is not None  # two running
    assert b.core.counters["replies_unmatched"] == 1


def test_commands_in_the_wrong_place() -> None:
    b = Broker()
    assert b.core.client_message(b"C", Ready("r"), T0, wall=T0) is not None
    assert b.core.client_message(b"C", Inform("i", (("q", 10),)), T0, wall=T0) is not None
    b.worker(b"W")
    assert b.core.worker_message(b"W", Request("j", "q", (), b""), T0, wall=T0) is not None
    assert b.core.counters["unexpected_commands"] == 3
    assert b.out() == []


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="heartbeat_interval"):
        CoreConfig(heartbeat_interval=0)
    with pytest.raises(ValueError, match="max_queued"):
        CoreConfig(max_queued=0)
    with pytest.raises(ValueError, match="backoff_base"):
        CoreConfig(backoff_base=-1)
    with pytest.raises(ValueError, match="compat"):
        CoreConfig(compat="zeromq")  # type: ignore[arg-type]
