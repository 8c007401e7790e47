"""What the worker runs: the job functions' types, the hooks, the built-in jobs, the
running job's id and the error bodies of failed jobs.

Apart from :mod:`zbus.broker.client.worker` (the connection to the broker and the
dispatch of REQUESTs) because none of it does I/O: it is what a job, a hook and a REPLY
body see of the worker, shared by the worker's loop and its job threads.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any, Final, Literal, NoReturn, TypeAlias

from zbus.common.protocols import emqp

_MESSAGE_LIMIT: Final = 4000  # characters of an exception message sent back

Outcome: TypeAlias = Literal["succeeded", "failed"]
JobFunction: TypeAlias = Callable[..., Any]
#: ``before_job(job_id, call)``, on the worker's loop, before the job starts.
BeforeJob: TypeAlias = Callable[[str, emqp.EventmqCall], object]
#: ``after_job(job_id, call, outcome, seconds)``, on the worker's loop; ``call`` is
#: ``None`` when the REQUEST body was not a call (the job failed without running).
AfterJob: TypeAlias = Callable[[str, emqp.EventmqCall | None, Outcome, float], object]

_current = threading.local()


def current_job_id() -> str | None:
    """The id of the job running in the calling thread (``None`` outside a job)."""
    job_id: str | None = getattr(_current, "job_id", None)
    return job_id


def set_current_job_id(job_id: str | None) -> None:
    """Set what :func:`current_job_id` answers in the calling thread (a job thread sets
    it before a job and clears it after)."""
    _current.job_id = job_id


# --------------------------------------------------------------------------- built-in jobs


def _noop() -> None:
    return None


def _echo(*args: Any) -> list[Any]:
    return list(args)


def _sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def _fail(message: str = "failed on request") -> NoReturn:
    raise RuntimeError(message)


#: Jobs for tests, benchmarks and smoke checks (:meth:`Worker.register_builtins`).
BUILTIN_JOBS: Final[dict[str, JobFunction]] = {
    "noop": _noop,
    "echo": _echo,
    "sleep": _sleep,
    "fail": _fail,
}


def error_body(kind: str, message: str) -> bytes:
    """The REPLY body of a failed job: zbus's ``{"error": ...}`` object, the message cut
    to 4,000 characters."""
    if len(message) > _MESSAGE_LIMIT:
        message = message[:_MESSAGE_LIMIT] + "..."
    return json.dumps({"error": {"type": kind, "message": message}}).encode()


def describe(exc: BaseException) -> str:
    """``str(exc)``, or the exception's type when its ``__str__`` fails."""
    try:
        return str(exc)
    except Exception:  # a broken __str__ must not turn one failure into two
        return repr(type(exc))
