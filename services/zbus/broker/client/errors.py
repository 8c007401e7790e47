"""The errors the broker clients raise: one base, with typed attributes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from zbus.errors import ZbusError

__all__ = ["BrokerClientError", "BrokerUnavailable", "JobFailed"]


class BrokerClientError(ZbusError):
    """Base of the errors the broker clients raise."""


class BrokerUnavailable(BrokerClientError, ConnectionError):
    """The broker did not acknowledge in time.

    The REQUESTs may still reach the broker later (ZeroMQ queues them), so submit them
    again with the same ``job_ids`` rather than new ones.
    """

    def __init__(self, job_ids: Sequence[str], waited: float) -> None:
        more = f" and {len(job_ids) - 3} more" if len(job_ids) > 3 else ""
        shown = ", ".join(job_ids[:3]) + more
        super().__init__(f"no acknowledgement from the broker after {waited:g}s for {shown}")
        self.job_ids = list(job_ids)
        self.waited = waited

    def __reduce__(self) -> tuple[Any, ...]:  # picklable, e.g. across process pools
        return type(self), (self.job_ids, self.waited)


class JobFailed(BrokerClientError):
    """The broker ended the job without a value.

    Attributes:
        job_id: the job.
        state: ``"failed"`` (its worker reported errors), ``"dead"`` (its attempts were
            lost: worker gone, timeout), ``"rejected"`` (never stored), or what the broker said.
        error_type, message: the last error, e.g. ``"ValueError"``, ``"bad input"``.
    """

    def __init__(self, job_id: str, state: str, error_type: str, message: str) -> None:
        super().__init__(f"job {job_id} {state}: {error_type}: {message}")
        self.job_id = job_id
        self.state = state
        self.error_type = error_type
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.job_id, self.state, self.error_type, self.message)
