"""The broker's errors: one base class, a subclass per thing a caller can get wrong."""

from __future__ import annotations


class BrokerError(Exception):
    """Base of every error the broker raises on purpose."""


class CronError(BrokerError, ValueError):
    """A cron expression that does not parse, or that never matches.

    Attributes:
        field: the field at fault (``"minute"``, ``"day-of-week"``, ...), or ``None`` when
            the whole expression is (wrong number of fields, no match at all).
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class HeaderError(BrokerError, ValueError):
    """A job header (``retry-count``, ``timeout``, ``delay``) with a value out of range.

    Attributes:
        header: the header's name.
        value: the value as sent.
    """

    def __init__(self, header: str, value: str, expected: str) -> None:
        super().__init__(f"header {header}: expected {expected}, got {value!r}")
        self.header = header
        self.value = value


class QueueFullError(BrokerError):
    """The broker already holds ``max_queued`` unfinished jobs and refuses another.

    Attributes:
        limit: the configured ``max_queued``.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"broker full: {limit} unfinished jobs already held (max_queued); try again later"
        )
        self.limit = limit


class JobStateError(BrokerError):
    """An admin operation that the job's state does not allow (e.g. retrying a success).

    Attributes:
        job_id: the job.
        state: its state, as text.
    """

    def __init__(self, job_id: str, state: str, operation: str) -> None:
        super().__init__(f"job {job_id}: cannot {operation} a job in state {state}")
        self.job_id = job_id
        self.state = state
