"""The errors of the sparkworker, and how Spark's long messages are cut to what matters."""

from __future__ import annotations

from typing import Final

__all__ = [
    "JobCancelled",
    "ParamError",
    "SparkJobError",
    "SparkWorkerError",
    "is_spark_error",
    "spark_message",
]

_MAX_LINES: Final = 5
_MAX_CHARS: Final = 1000
# Lines that start a stack trace or a query plan: nothing after them helps a reader.
_NOISE: Final = ("at ", "JVM stacktrace", "Traceback", "+- ", ":- ", "'", "== ", "Caused by")


class SparkWorkerError(Exception):
    """Base of the sparkworker's own errors."""


class ParamError(SparkWorkerError, ValueError):
    """A job parameter that cannot be used; the message names it.

    Attributes:
        param: the parameter's name.
    """

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param


class SparkJobError(SparkWorkerError):
    """Spark (or its JVM bridge) failed a job; the message starts with Spark's error type.

    Attributes:
        spark_type: the name of the Spark exception, e.g. ``"AnalysisException"``.
    """

    def __init__(self, spark_type: str, message: str) -> None:
        super().__init__(f"{spark_type}: {message}" if message else spark_type)
        self.spark_type = spark_type

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (self.spark_type, str(self).partition(": ")[2])


class JobCancelled(SparkWorkerError):
    """The job was cancelled on request (``POST /api/v1/spark/jobs/{id}/cancel``)."""


def is_spark_error(exc: BaseException) -> bool:
    """Whether ``exc`` comes from PySpark or Py4J (and so may carry a JVM stack trace)."""
    return type(exc).__module__.split(".")[0] in ("pyspark", "py4j")


def spark_message(text: str) -> str:
    """The first meaningful lines of a Spark error message, without stack or plan.

    Py4J's ``An error occurred while calling o36.sql.`` preamble is dropped, and so is the
    ``: `` that starts the Java exception's line.
    """
    kept: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("An error occurred while calling"):
            continue
        if kept and line.startswith(_NOISE):
            break
        kept.append(line.removeprefix(": ").strip())
        if len(kept) == _MAX_LINES:
            break
    message = "\n".join(kept)
    if len(message) > _MAX_CHARS:
        message = message[:_MAX_CHARS] + "..."
    return message
