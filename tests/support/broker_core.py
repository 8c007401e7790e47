"""A broker core driven by eMQP commands and a time value, for the core's unit tests:
no sockets, no sleeping.

``Broker`` speaks for clients and workers; message ids come from a counter so the
expected outboxes are exact.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence

from zbus.broker.core.broker import BrokerCore, Changes, CoreConfig, Outgoing
from zbus.broker.core.model import Job, JobState
from zbus.common.protocols.emqp import (
    Headers,
    Inform,
    Ready,
    Reply,
    Request,
    Schedule,
    build_reply_value,
)

T0 = 1_700_000_000.0
VALUE = build_reply_value(42)
ERROR = json.dumps({"error": {"type": "ValueError", "message": "boom"}}).encode()
RR: Headers = (("reply-requested", ""),)


class Broker:
    """A core plus helpers that speak for clients and workers."""

    def __init__(self, jobs: Sequence[Job] = (), now: float = T0, **config: object) -> None:
        ids = itertools.count()
        self.core = BrokerCore(
            CoreConfig(**config),  # type: ignore[arg-type]
            jobs,
            now=now,
            wall=now,
            new_id=lambda: f"m{next(ids)}",
        )

    # ------------------------------------------------------------------ peers

    def worker(
        self, identity: bytes, *queues: str, slots: int = 1, now: float = T0
    ) -> list[Outgoing]:
        names = queues or ("default",)
        self.core.worker_message(
            identity, Inform("inf", tuple((q, 10) for q in names)), now, wall=now
        )
        for _ in range(slots):
            self.core.worker_message(identity, Ready("rdy"), now, wall=now)
        return self.out()

    def ready(self, identity: bytes, now: float = T0) -> list[Outgoing]:
        assert self.core.worker_message(identity, Ready("rdy"), now, wall=now) is None
        return self.out()

    def reply(self, worker: bytes, job_id: str, body: bytes = VALUE, now: float = T0) -> str | None:
        return self.core.worker_message(worker, Reply("rep", body, job_id), now, wall=now)

    def request(
        self,
        client: bytes,
        job_id: str,
        queue: str = "default",
        headers: Headers = (),
        now: float = T0,
    ) -> str | None:
        return self.core.client_message(
            client, Request(job_id, queue, headers, b"call"), now, wall=now
        )

    # ------------------------------------------------------------------ outputs

    def out(self) -> list[Outgoing]:
        return self.core.take_outbox()

    def changes(self) -> Changes:
        return self.core.take_changes()

    def state(self, job_id: str) -> JobState:
        job = self.core.job(job_id)
        assert job is not None
        return job.state

    def dispatched(self, out: list[Outgoing]) -> list[tuple[bytes, str]]:
        """(worker, job id) of each REQUEST sent to a worker."""
        return [
            (o.identity, o.command.msgid)
            for o in out
            if o.side == "worker" and isinstance(o.command, Request)
        ]


def results(out: list[Outgoing]) -> list[tuple[bytes, str | None, bytes]]:
    """(client, request id, body) of each 6-frame REPLY to a client."""
    return [
        (o.identity, o.command.request_id, o.command.body)
        for o in out
        if o.side == "client" and isinstance(o.command, Reply) and o.command.request_id
    ]


def body_of(raw: bytes) -> dict[str, object]:
    data = json.loads(raw)
    assert isinstance(data, dict)
    return data


def sched(
    interval: int = -1,
    cron: str = "",
    headers: Headers = (),
    body: bytes = b"tick",
    queue: str = "default",
) -> Schedule:
    return Schedule("s-msg", queue, headers, interval, body, cron)
