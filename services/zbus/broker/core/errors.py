"""The broker's errors: one base class, a subclass per thing a caller can get wrong."""

from __future__ import annotations

from zbus.errors import ZbusError


class BrokerError(ZbusError):
    """Base of every error the broker raises on purpose."""


def shown(value: object, limit: int = 60) -> str:
    """``repr(value)``, cut short: an error message must not carry a whole hostile frame."""
    if isinstance(value, int) and value.bit_length() > 192:  # repr() fails past 4,300 digits
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    if len(text) <= limit:
        return text
    size = len(value) if isinstance(value, str | bytes) else len(text)
    return f"{text[:limit]}... ({size} characters)"


class RangeError(BrokerError, ValueError):
    """A number or a size outside its documented range (docs/broker.md, "Ranges").

    Attributes:
        field: what the value is: a header, an argument, a command's field.
        value: the value as given.
        expected: the range, in words.
    """

    def __init__(self, field: str, value: object, expected: str, message: str = "") -> None:
        super().__init__(message or f"{field}: expected {expected}, got {shown(value)}")
        self.field = field
        self.value = value
        self.expected = expected


class CronError(BrokerError, ValueError):
    """A cron expression that does not parse, or that never matches.

    Attributes:
        field: the field at fault (``"minute"``, ``"day-of-week"``, ...), or ``None`` when
            the whole expression is (wrong number of fields, no match at all).
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class HeaderError(RangeError):
    """A job header (``retry-count``, ``timeout``, ``delay``, ``run_count``) whose value is
    not a number in its range.

    Attributes:
        header: the header's name (also :attr:`field`).
        value: the value as sent.
    """

    def __init__(self, header: str, value: str, expected: str) -> None:
        super().__init__(
            header, value, expected, f"header {header}: expected {expected}, got {shown(value)}"
        )
        self.header = header


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
