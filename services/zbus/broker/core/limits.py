"""The range of every number and identifier size the broker takes in, and its checks.

One table, read wherever a value enters: the core on each REQUEST, SCHEDULE, INFORM and
READY (a value outside its range is refused with an error naming the field, counted,
and never stored); the broker's settings; the client libraries and the worker before
they send anything; and the rebuild from the store (:mod:`zbus.broker.core.repair`).
docs/broker.md ("Ranges") is this table in words.

Why these bounds: each is far beyond any real use and small enough that no sum the
broker makes with it can overflow what SQLite and every peer store (a signed 64-bit
integer, a finite double). A job that needs more than 1,000 retries or a month of
running wants another design, not a larger number.
"""

from __future__ import annotations

import math
import re
from typing import Final

from zbus.broker.core.errors import HeaderError, RangeError

__all__ = [
    "DAY",
    "MAX_CRON_CHARS",
    "MAX_HEARTBEAT_INTERVAL",
    "MAX_HEARTBEAT_MISSES",
    "MAX_ID_CHARS",
    "MAX_INTERVAL",
    "MAX_QUEUED",
    "MAX_QUEUE_CHARS",
    "MAX_RETRIES",
    "MAX_RUN_COUNT",
    "MAX_SECONDS",
    "MAX_STORED_COUNT",
    "MAX_WORKER_QUEUES",
    "MAX_WORKER_SLOTS",
    "MIN_INTERVAL",
    "RangeError",
    "check_count",
    "check_identifier",
    "check_schedule",
    "check_seconds",
    "parse_count",
    "parse_seconds",
]

DAY: Final = 86_400
#: retries of one job (``retry-count``, ``retries=``, ``ZBUS_DEFAULT_RETRIES``).
MAX_RETRIES: Final = 1_000
#: seconds of a job's ``timeout`` and ``delay``, and of the retry backoff: 30 days.
MAX_SECONDS: Final = 30 * DAY
#: a SCHEDULE's interval: 1 s to 366 days (a cron line serves anything rarer).
MIN_INTERVAL: Final = 1
MAX_INTERVAL: Final = 366 * DAY
#: eventmq's ``run_count`` header of a SCHEDULE: -1 (no limit) or 0 to a billion runs.
MAX_RUN_COUNT: Final = 1_000_000_000
#: characters of a job id (the REQUEST msgid; eventmq sends a 36-character uuid4).
MAX_ID_CHARS: Final = 256
#: characters of a queue name.
MAX_QUEUE_CHARS: Final = 256
#: characters of a SCHEDULE's cron line.
MAX_CRON_CHARS: Final = 256
#: queues one worker's INFORM may name.
MAX_WORKER_QUEUES: Final = 100
#: READY slots one worker may hold unused at once (and a Worker's ``concurrency``).
MAX_WORKER_SLOTS: Final = 1_024
#: unfinished jobs the broker may be configured to hold (``ZBUS_MAX_QUEUED``).
MAX_QUEUED: Final = 100_000_000
#: seconds between heartbeats, and silent intervals before a peer is gone.
MAX_HEARTBEAT_INTERVAL: Final = 3_600.0
MAX_HEARTBEAT_MISSES: Final = 100
#: a job's stored ``attempts`` and ``max_retries``: each broker restart during an attempt
#: gives the job one more retry (ADR 0003 decision 2), so stored values may pass
#: MAX_RETRIES, up to this bound, where that credit stops growing.
MAX_STORED_COUNT: Final = 2**31 - 1

_MAX_DIGITS: Final = 20
_DECIMAL: Final = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _count_words(low: int, high: int) -> str:
    return f"a whole number in {low}..{high}"


def _seconds_words(high: float, *, positive: bool = False, zero: str = "") -> str:
    days = high / DAY
    notes = [f"{days:g} day{'s' if days != 1 else ''}"] if high >= DAY else []
    notes += [zero] if zero else []
    shown = f" ({'; '.join(notes)})" if notes else ""
    top = f"{high:.0f}" if float(high).is_integer() else f"{high:g}"
    if positive:
        return f"a number of seconds > 0 and <= {top}{shown}"
    return f"a number of seconds in 0..{top}{shown}"


def check_count(field: str, value: object, low: int, high: int) -> int:
    """``value`` as a whole number in ``low..high`` (a bool is not a number here).

    Raises:
        RangeError: naming ``field``.
    """
    if type(value) is not int or not low <= value <= high:
        raise RangeError(field, value, _count_words(low, high))
    return value


def check_seconds(
    field: str, value: object, high: float, *, positive: bool = False, zero: str = ""
) -> float:
    """``value`` as a finite number of seconds in ``0..high`` (``> 0`` when ``positive``).

    Raises:
        RangeError: naming ``field``.
    """
    seconds = math.nan
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond any float
            seconds = math.inf
    in_range = seconds > 0 if positive else seconds >= 0
    if not (in_range and seconds <= high):  # NaN and infinities fail one of the two
        raise RangeError(field, value, _seconds_words(high, positive=positive, zero=zero))
    return seconds


def check_identifier(field: str, value: str, most: int) -> str:
    """``value`` as a non-empty text of at most ``most`` characters.

    Raises:
        RangeError: naming ``field``.
    """
    if not 0 < len(value) <= most:
        raise RangeError(field, value, f"1 to {most} characters")
    return value


def parse_count(header: str, text: str, low: int, high: int) -> int:
    """A header's value as a whole number in ``low..high``: ASCII digits (a ``-`` first
    if ``low < 0``), at most 20 of them, checked before ``int()``, which is slow on
    thousands of digits and refuses more than 4,300.

    Raises:
        HeaderError: naming the header.
    """
    digits = text[1:] if text[:1] == "-" and low < 0 else text
    if (
        not digits.isascii()
        or not digits.isdigit()
        or len(digits) > _MAX_DIGITS
        or not low <= int(text) <= high
    ):
        raise HeaderError(header, text, _count_words(low, high))
    return int(text)


def parse_seconds(header: str, text: str, high: float, *, zero: str = "") -> float:
    """A header's value as a number of seconds in ``0..high``: ASCII decimal text
    (``10``, ``2.5``, ``1e3``), at most 20 characters.

    Raises:
        HeaderError: naming the header.
    """
    if len(text) > _MAX_DIGITS:
        seconds = math.nan
    elif text.isdigit() and text.isascii():  # the common case, without the pattern
        seconds = float(text)
    else:
        seconds = float(text) if _DECIMAL.fullmatch(text) else math.nan
    if not 0 <= seconds <= high:  # NaN fails too
        raise HeaderError(header, text, _seconds_words(high, zero=zero))
    return seconds


def check_schedule(interval: int, cron: str) -> None:
    """A SCHEDULE's interval (``-1``: the cron line instead) and cron line lengths.

    Raises:
        RangeError: naming the field.
    """
    if interval != -1 and not MIN_INTERVAL <= interval <= MAX_INTERVAL:
        raise RangeError(
            "SCHEDULE interval",
            interval,
            f"a number of seconds in {MIN_INTERVAL}..{MAX_INTERVAL} (366 days),"
            " or -1 with a cron line",
        )
    if len(cron) > MAX_CRON_CHARS:
        check_identifier("SCHEDULE cron line", cron, MAX_CRON_CHARS)
