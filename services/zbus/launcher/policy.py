"""When the local cluster restarts a service, and when it gives up: no I/O, told the time.

One :class:`Supervision` per service. The launcher tells it what happened (the process
was started, became ready, exited) with the monotonic time, and it answers what to do
next: start again at a given time, or give up. It never starts, waits or looks at a
process itself.

- A service that exits without being asked to (a crash, a signal, status 0) is started
  again after a back-off: ``backoff`` seconds, doubling at each restart, at most
  ``backoff_max``.
- A service that has been ready for ``healthy_after`` seconds is healthy again: its next
  exit is restarted after ``backoff`` seconds.
- A *failed start* is an exit before the service became ready (or the launcher stopped a
  start that took too long). After ``start_attempts`` failed starts in a row the service
  is given up: it stays down, and the rest of the cluster goes on. An exit after the
  service was ready is a crash, not a failed start, and is always restarted.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["GiveUp", "Phase", "Restart", "RestartPolicy", "Supervision"]


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """How the launcher restarts a service (the cluster file's ``[restart]`` table).

    Attributes:
        backoff: seconds before the first restart; each further one doubles it.
        backoff_max: the longest wait before a restart.
        healthy_after: seconds ready after which the back-off starts again at ``backoff``.
        start_attempts: failed starts in a row after which the service is given up.
    """

    backoff: float = 1.0
    backoff_max: float = 30.0
    healthy_after: float = 60.0
    start_attempts: int = 5

    def __post_init__(self) -> None:
        if not self.backoff > 0:
            raise ValueError("backoff must be a positive number of seconds")
        if not self.backoff_max >= self.backoff:
            raise ValueError("backoff_max must be at least backoff")
        if not self.healthy_after >= 0:
            raise ValueError("healthy_after must be 0 or more seconds")
        if self.start_attempts < 1:
            raise ValueError("start_attempts must be 1 or more")


class Phase(StrEnum):
    """Where a supervised service is."""

    PENDING = "pending"  # not started yet
    STARTING = "starting"  # its process runs, not ready yet
    READY = "ready"
    RESTARTING = "restarting"  # its process exited; it starts again at ``due``
    GIVEN_UP = "given up"
    STOPPED = "stopped"  # stopped by the launcher, as asked


@dataclass(frozen=True, slots=True)
class Restart:
    """Start the service again at ``at`` (monotonic), ``delay`` seconds from its exit."""

    at: float
    delay: float
    failed_start: bool
    failed_starts: int  # in a row, this one included (0 after a crash)


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Leave the service down: it failed ``failed_starts`` starts in a row."""

    failed_starts: int


class Supervision:
    """The restart policy applied to one service's history.

    Args:
        policy: the back-off and give-up rules.
    """

    def __init__(self, policy: RestartPolicy) -> None:
        self.policy = policy
        self.phase = Phase.PENDING
        self.restarts = 0  # starts after the first
        self.failed_starts = 0  # in a row
        self.due: float | None = None  # when a RESTARTING service starts again
        self._step = 0  # the back-off's exponent
        self._ready_since: float | None = None

    def started(self, now: float) -> None:
        """Its process was started (the first time, or again)."""
        if self.phase is not Phase.PENDING:
            self.restarts += 1
        self.phase = Phase.STARTING
        self.due = None
        self._ready_since = None

    def became_ready(self, now: float) -> None:
        """Its process answered ready: the failed starts in a row are over."""
        self.phase = Phase.READY
        self.failed_starts = 0
        self._ready_since = now

    def is_due(self, now: float) -> bool:
        """Whether a restarting service's wait is over."""
        return self.phase is Phase.RESTARTING and self.due is not None and now >= self.due

    def healthy(self, now: float) -> bool:
        """Whether it has been ready for ``healthy_after`` seconds (the back-off reset)."""
        return (
            self.phase is Phase.READY
            and self._ready_since is not None
            and now - self._ready_since >= self.policy.healthy_after
        )

    def exited(self, now: float) -> Restart | GiveUp:
        """Its process exited without being asked to (or a start was given up on by the
        launcher, which stopped it): start it again later, or give up."""
        if self.healthy(now):
            self._step = 0
        failed_start = self.phase is not Phase.READY
        self._ready_since = None
        if failed_start:
            self.failed_starts += 1
            if self.failed_starts >= self.policy.start_attempts:
                self.phase = Phase.GIVEN_UP
                self.due = None
                return GiveUp(self.failed_starts)
        delay = min(self.policy.backoff * 2.0**self._step, self.policy.backoff_max)
        if delay < self.policy.backoff_max:
            self._step += 1
        self.phase = Phase.RESTARTING
        self.due = now + delay
        return Restart(self.due, delay, failed_start, self.failed_starts)

    def stopped(self) -> None:
        """The launcher stopped it, as asked (Ctrl-C, SIGTERM, ``zbus down``)."""
        if self.phase is not Phase.GIVEN_UP:
            self.phase = Phase.STOPPED
        self.due = None
