"""What goes in and out of the broker core: its configuration, outputs and views."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, tzinfo
from typing import Final, Literal, TypeAlias

from zbus.broker.core.limits import (
    MAX_HEARTBEAT_INTERVAL,
    MAX_HEARTBEAT_MISSES,
    MAX_QUEUED,
    MAX_RETRIES,
    MAX_SECONDS,
    check_count,
    check_seconds,
)
from zbus.broker.core.model import Job, Schedule
from zbus.common.protocols.emqp import EmqpCommand

Side: TypeAlias = Literal["client", "worker"]
Compat: TypeAlias = Literal["spec", "eventmq"]

#: The keys of ``BrokerCore.counters``; the wiring exports them as metrics.
COUNTERS: Final = (
    "requests",  # jobs accepted (client, admin, admin retry)
    "duplicate_requests",  # REQUEST / submit for a known job id: nothing new ran
    "rejected_requests",  # refused: max_queued reached or a bad header
    "dispatched",  # attempts handed to a worker
    "succeeded",
    "retried",  # failed attempts that will run again after the backoff
    "failed",  # gave up after a worker-reported error
    "dead",  # gave up after a lost attempt (worker gone, timeout, restart)
    "cancelled",
    "timeouts",
    "workers_expired",  # silent for heartbeat_interval x heartbeat_misses
    "workers_left",  # DISCONNECT or KBYE
    "uninformed_workers",  # commands from a worker that never sent INFORM
    "unexpected_commands",  # a command the sender's role does not send
    "replies_unknown",  # REPLY for a job id never seen (or long forgotten)
    "replies_not_running",  # REPLY for a job that is not running on that worker
    "replies_unmatched",  # spec REPLY without a request id that fits no single job
    "rejected_schedules",  # bad interval, cron expression or header
    "schedule_runs",
    "schedule_runs_skipped",  # due while max_queued was reached
    "out_of_range",  # refused: a number or size outside its range (docs/broker.md)
    "repaired_rows",  # stored jobs and schedules repaired (or dropped) by the rebuild
)


@dataclass(frozen=True, slots=True)
class CoreConfig:
    """Tunables of the broker core.

    Attributes:
        heartbeat_interval: seconds between the broker's HEARTBEATs (eventmq: 3).
        heartbeat_misses: a worker silent for ``heartbeat_interval * heartbeat_misses``
            seconds is gone. eventmq's router drops a worker after 5 s of silence, a bit
            under two of its 3 s intervals; 2 misses (6 s) keeps a worker whose one
            heartbeat arrives late, and is as prompt within a second.
        default_retries: retries of a job without a ``retry-count`` header.
        backoff_base, backoff_max: a retry waits ``min(max, base * 2**(attempts-1))``.
        compat: ``"eventmq"`` also sends the 5-frame hand-off REPLY, heartbeats carry
            the time, and workers that never sent INFORM are ignored rather than sent a
            DISCONNECT (which stops an eventmq jobmanager).
        max_queued: unfinished jobs held at most; beyond it new jobs are refused, so
            memory stays bounded when workers fall behind.
        finished_ttl, max_finished: how long, and how many, finished jobs are kept in
            memory to answer a duplicate REQUEST with the result. Older ones are only
            in the store; a duplicate of one of those runs again.
        cron_tz: the zone cron schedules are read in.
    """

    heartbeat_interval: float = 3.0
    heartbeat_misses: int = 2
    default_retries: int = 0
    backoff_base: float = 1.0
    backoff_max: float = 60.0
    compat: Compat = "spec"
    max_queued: int = 1_000_000
    finished_ttl: float = 300.0
    max_finished: int = 100_000
    cron_tz: tzinfo = field(default=UTC)

    def __post_init__(self) -> None:
        # The same ranges as the broker's settings (docs/broker.md, "Ranges").
        for name, value, high in (
            ("heartbeat_interval", self.heartbeat_interval, MAX_HEARTBEAT_INTERVAL),
            ("backoff_base", self.backoff_base, MAX_SECONDS),
            ("backoff_max", self.backoff_max, MAX_SECONDS),
            ("finished_ttl", self.finished_ttl, MAX_SECONDS),
        ):
            check_seconds(f"CoreConfig.{name}", value, high, positive=name == "heartbeat_interval")
        for name, count, low, most in (
            ("heartbeat_misses", self.heartbeat_misses, 1, MAX_HEARTBEAT_MISSES),
            ("default_retries", self.default_retries, 0, MAX_RETRIES),
            ("max_queued", self.max_queued, 1, MAX_QUEUED),
            ("max_finished", self.max_finished, 0, MAX_QUEUED),
        ):
            check_count(f"CoreConfig.{name}", count, low, most)
        if self.compat not in ("spec", "eventmq"):
            raise ValueError(
                f"CoreConfig.compat: expected 'spec' or 'eventmq', got {self.compat!r}"
            )


class OutOfRange(str):
    """Why the core refused a message, when the cause is a number or a size outside its
    range (docs/broker.md, "Ranges"): the text for the log line, and the wiring counts it
    under the reason ``out_of_range`` rather than ``refused``."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A message to send: which ROUTER socket, to whom, what."""

    side: Side
    identity: bytes
    command: EmqpCommand


@dataclass(frozen=True, slots=True)
class Changes:
    """Values to write to the store, in one transaction, before the outbox is sent."""

    jobs: list[Job]
    schedules: list[Schedule]
    deleted_schedules: list[str]

    def __bool__(self) -> bool:
        return bool(self.jobs or self.schedules or self.deleted_schedules)


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueView:
    """One queue, for the admin API."""

    name: str
    ready: int  # queued and dispatchable now
    running: int
    waiting: int  # queued until a delay or retry backoff ends
    consumers: int  # workers that serve it
    free_slots: int  # READY slots of those workers not in use


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerView:
    """One worker, for the admin API."""

    identity: bytes
    queues: tuple[str, ...]  # highest weight first
    slots_free: int
    last_heartbeat: float  # wall time of its last message
    jobs_running: tuple[str, ...]
