"""Five-field cron expressions for eventmq's SCHEDULE command (ADR 0003, decision 8).

``minute hour day-of-month month day-of-week``, as cron(8) reads them:

- each field is ``*``, a number, a range ``a-b``, or a comma-separated list of those; any
  of them may take a step ``/n`` (``*/15``, ``1-30/5``); ``a/n`` means ``a-<max>/n``.
- months may be written ``jan``..``dec`` and days of the week ``sun``..``sat`` (any case),
  also inside ranges (``mon-fri``); day of week 0 and 7 are both Sunday.
- the day rule of Vixie cron: when both day fields are restricted, a day matches if
  EITHER matches (``0 0 1 * mon``: the 1st and every Monday); when one of them starts
  with ``*`` (including ``*/2``), a day must match both.
- ``@yearly``, ``@annually``, ``@monthly``, ``@weekly``, ``@daily``, ``@midnight`` and
  ``@hourly`` stand for their usual expressions (eventmq's croniter accepts them).

Time zones: the expression is read in wall-clock time of ``tz``. A time is a match when
its local wall-clock minute matches, so in the hour repeated when clocks go back a
matching minute happens twice, and in the hour skipped when they go forward it does not
happen at all. UTC, the default, has neither.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Final

from zbus.broker.core.errors import CronError

__all__ = ["CronError", "CronExpression"]

_MONTHS: Final = (
    "jan",
    "feb",
    "mar",
    "apr",
    "may",
    "jun",
    "jul",
    "aug",
    "sep",
    "oct",
    "nov",
    "dec",
)
_WEEKDAYS: Final = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# Longest month lengths, leap years included: a day-of-month list that fits none of the
# chosen months can never match, and is refused at parse time rather than searched for.
_MONTH_DAYS: Final = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_ALIASES: Final = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# How far to search. 29 February alone can be 8 years apart (2096 -> 2104), and a day of
# the month that must also be a given weekday (``0 0 */31 jan mon``: 1 January on a
# Monday) up to 12 (2091 -> 2103, across the non-leap 2100); 40 years covers every
# expression parse() accepts with room to spare, so giving up means a bug, not a user.
_SEARCH_YEARS: Final = 40
_MINUTE: Final = timedelta(minutes=1)
_DAY: Final = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    name_base: int = 0  # the value of names[0]


_FIELDS: Final = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day-of-month", 1, 31),
    _Field("month", 1, 12, _MONTHS, 1),
    _Field("day-of-week", 0, 7, _WEEKDAYS, 0),
)


def _value(text: str, spec: _Field, item: str) -> int:
    if text.isdigit() and text.isascii():
        value = int(text)
        if not spec.low <= value <= spec.high:
            raise CronError(
                f"cron {spec.name} field: {value} in {item!r} is outside {spec.low}-{spec.high}",
                spec.name,
            )
        return value
    lowered = text.lower()
    if spec.names and lowered in spec.names:
        return spec.names.index(lowered) + spec.name_base
    allowed = f"a number {spec.low}-{spec.high}"
    if spec.names:
        allowed += f" or a name {spec.names[0]}..{spec.names[-1]}"
    raise CronError(f"cron {spec.name} field: expected {allowed}, got {text!r}", spec.name)


def _parse_field(text: str, spec: _Field) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise CronError(f"cron {spec.name} field: empty item in {text!r}", spec.name)
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not (step_text.isdigit() and step_text.isascii()):
                raise CronError(
                    f"cron {spec.name} field: step in {item!r} must be a positive number",
                    spec.name,
                )
            step = int(step_text)
            if not 1 <= step <= spec.high - spec.low + 1:
                raise CronError(
                    f"cron {spec.name} field: step {step} in {item!r} is outside"
                    f" 1-{spec.high - spec.low + 1}",
                    spec.name,
                )
        if base == "*":
            low, high = spec.low, spec.high
        elif "-" in base:
            first, _, last = base.partition("-")
            low, high = _value(first, spec, item), _value(last, spec, item)
            if low > high:
                raise CronError(
                    f"cron {spec.name} field: range {item!r} starts after it ends", spec.name
                )
        else:
            low = _value(base, spec, item)
            high = spec.high if slash else low
        values.update(range(low, high + 1, step))
    if spec.name == "day-of-week" and 7 in values:
        values.discard(7)
        values.add(0)  # 7 is Sunday too
    return frozenset(values)


@dataclass(frozen=True, slots=True)
class CronExpression:
    """A parsed cron expression. Build it with :meth:`parse`.

    Attributes:
        text: the expression as given.
        minutes, hours, days, months, weekdays: the values each field allows
            (weekdays: 0 = Sunday .. 6 = Saturday).
        day_or: True when both day fields are restricted, so a day matches if either does.
    """

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    day_or: bool

    @classmethod
    def parse(cls, text: str) -> CronExpression:
        """Parse a 5-field expression (or an ``@`` alias).

        Raises:
            CronError: naming the field at fault and what it expected.
        """
        source = _ALIASES.get(text.strip().lower(), text)
        parts = source.split()
        if len(parts) != 5:
            raise CronError(
                "cron expression: expected 5 fields (minute hour day-of-month month"
                f" day-of-week), got {len(parts)} in {text!r}"
            )
        minutes, hours, days, months, weekdays = (
            _parse_field(part, spec) for part, spec in zip(parts, _FIELDS, strict=True)
        )
        # Vixie cron: a day field "is restricted" unless it starts with '*'.
        dom_star, dow_star = parts[2].startswith("*"), parts[4].startswith("*")
        if (dow_star or dom_star) and not any(
            day <= _MONTH_DAYS[month - 1] for month in months for day in days
        ):
            raise CronError(
                f"cron day-of-month field: no day in {parts[2]!r} exists in the months"
                f" {parts[3]!r}, so {text!r} never matches",
                "day-of-month",
            )
        return cls(text, minutes, hours, days, months, weekdays, not (dom_star or dow_star))

    # ------------------------------------------------------------------ matching

    def day_matches(self, year: int, month: int, day: int) -> bool:
        """Whether the date passes the month and the day-of-month/day-of-week rule."""
        if month not in self.months:
            return False
        weekday = (datetime(year, month, day).weekday() + 1) % 7  # Monday=0 -> Sunday=0
        if self.day_or:
            return day in self.days or weekday in self.weekdays
        return day in self.days and weekday in self.weekdays

    def matches(self, moment: datetime) -> bool:
        """Whether the wall-clock minute of ``moment`` matches (seconds are ignored)."""
        return (
            moment.minute in self.minutes
            and moment.hour in self.hours
            and self.day_matches(moment.year, moment.month, moment.day)
        )

    def next_after(self, t: float, tz: tzinfo = UTC) -> float:
        """The first whole minute strictly after ``t`` whose wall time in ``tz`` matches.

        Args:
            t: seconds since the epoch.
            tz: the zone the expression is read in.

        Raises:
            CronError: if nothing matches within 40 years (cannot happen for an
                expression :meth:`parse` accepted).
        """
        if isinstance(tz, timezone):
            # A fixed offset: wall time is a shift of the epoch, so search it directly.
            # Whole seconds first: fromtimestamp rounds to microseconds, which would
            # carry 59.9999996 s over into the minute that is the answer.
            local = datetime.fromtimestamp(math.floor(t), tz)
            start = local.replace(tzinfo=None, second=0)
            stop = start.replace(year=start.year + _SEARCH_YEARS, month=1, day=1)
            found = self._next_naive(start + _MINUTE, stop)
            if found < stop:
                return found.replace(tzinfo=tz).timestamp()
            raise CronError(f"cron expression {self.text!r}: no match within {_SEARCH_YEARS} years")
        return self._next_zoned(t, tz)

    # ------------------------------------------------------------------ search

    def _next_naive(self, d: datetime, stop: datetime) -> datetime:
        """The first naive minute >= ``d`` that matches, or ``stop`` if none is before it."""
        months, hours, minutes = sorted(self.months), sorted(self.hours), sorted(self.minutes)
        while d < stop:
            if d.month not in self.months:
                i = bisect_right(months, d.month)
                d = (
                    datetime(d.year, months[i], 1)
                    if i < len(months)
                    else datetime(d.year + 1, months[0], 1)
                )
                continue
            if not self.day_matches(d.year, d.month, d.day):
                d = datetime(d.year, d.month, d.day) + _DAY
                continue
            if d.hour not in self.hours:
                i = bisect_right(hours, d.hour)
                if i < len(hours):
                    d = d.replace(hour=hours[i], minute=0)
                else:
                    d = datetime(d.year, d.month, d.day) + _DAY
                continue
            if d.minute not in self.minutes:
                i = bisect_right(minutes, d.minute)
                if i < len(minutes):
                    d = d.replace(minute=minutes[i])
                else:
                    d = d.replace(minute=0) + timedelta(hours=1)
                continue
            return d
        return stop

    def _next_zoned(self, t: float, tz: tzinfo) -> float:
        """Search in instants, one offset at a time, for a zone with transitions.

        Between two transitions wall time is the instant plus a constant offset, so the
        naive search applies; each jump is capped at one day so that it never spans two
        transitions, and a jump that crosses one stops at the first instant of the new
        offset and starts again from there.
        """
        u = math.floor(t) + 1
        limit = t + _SEARCH_YEARS * 366 * 86400
        while u <= limit:
            local = datetime.fromtimestamp(u, tz)
            if local.second:
                u += 60 - local.second
                continue
            naive = local.replace(tzinfo=None)
            if self.matches(naive):
                return float(u)
            target = self._next_naive(naive + _MINUTE, naive + _DAY)
            v = u + int((target - naive).total_seconds())
            offset = local.utcoffset()
            if datetime.fromtimestamp(v, tz).utcoffset() == offset:
                u = v
                continue
            low, high = u, v  # offset(low) is the old one, offset(high) is not
            while high - low > 1:
                mid = (low + high) // 2
                if datetime.fromtimestamp(mid, tz).utcoffset() == offset:
                    low = mid
                else:
                    high = mid
            u = high
        raise CronError(f"cron expression {self.text!r}: no match within {_SEARCH_YEARS} years")
