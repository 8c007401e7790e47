"""Cron expressions: hand-checked next runs, refused expressions, and a Hypothesis oracle.

The property tests build each expression together with the set of values every field is
meant to allow, so the oracle that checks ``next_after`` does not reuse the parser.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zbus.broker.core.cron import CronError, CronExpression

NEW_YORK = ZoneInfo("America/New_York")
LONDON = ZoneInfo("Europe/London")
LORD_HOWE = ZoneInfo("Australia/Lord_Howe")  # half-hour DST shift


def at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def next_run(expr: str, when: str, tz: tzinfo = UTC) -> str:
    result = CronExpression.parse(expr).next_after(at(when), tz)
    return datetime.fromtimestamp(result, tz).isoformat()


# --------------------------------------------------------------------------- hand-checked


@pytest.mark.parametrize(
    ("expr", "when", "expected"),
    [
        # steps, and "strictly after": a time that matches itself is not the answer
        ("*/15 * * * *", "2024-01-01T00:07:00+00:00", "2024-01-01T00:15:00+00:00"),
        ("*/15 * * * *", "2024-01-01T00:15:00+00:00", "2024-01-01T00:30:00+00:00"),
        ("15 * * * *", "2024-01-01T00:14:59.500+00:00", "2024-01-01T00:15:00+00:00"),
        ("* * * * *", "2024-01-01T00:00:00.001+00:00", "2024-01-01T00:01:00+00:00"),
        ("* * * * *", "1999-12-31T23:59:59.999999+00:00", "2000-01-01T00:00:00+00:00"),
        ("5/15 * * * *", "2024-01-01T00:36:00+00:00", "2024-01-01T00:50:00+00:00"),
        ("10-40/10 * * * *", "2024-01-01T00:41:00+00:00", "2024-01-01T01:10:00+00:00"),
        # lists, ranges, hour roll-over, year roll-over
        ("0,30 9-17 * * *", "2024-01-01T17:30:00+00:00", "2024-01-02T09:00:00+00:00"),
        ("0 0 1 1 *", "2024-12-31T23:59:00+00:00", "2025-01-01T00:00:00+00:00"),
        ("@hourly", "2024-01-01T10:00:00+00:00", "2024-01-01T11:00:00+00:00"),
        ("@yearly", "2024-05-05T00:00:00+00:00", "2025-01-01T00:00:00+00:00"),
        # 29 February: the next leap year
        ("0 0 29 2 *", "2025-03-01T00:00:00+00:00", "2028-02-29T00:00:00+00:00"),
        # names, any case, in ranges; 0 and 7 are Sunday
        ("0 9 * * mon-fri", "2024-06-07T09:00:00+00:00", "2024-06-10T09:00:00+00:00"),
        ("0 12 * JAN,Jul *", "2024-01-31T12:00:00+00:00", "2024-07-01T12:00:00+00:00"),
        ("0 0 * * 7", "2024-06-03T00:00:00+00:00", "2024-06-09T00:00:00+00:00"),
        ("0 0 * * sun", "2024-06-03T00:00:00+00:00", "2024-06-09T00:00:00+00:00"),
        ("0 0,12 1 */2 *", "2024-01-01T12:00:00+00:00", "2024-03-01T00:00:00+00:00"),
        # both day fields restricted: either matches (1 September is a Sunday)
        ("0 0 1 * mon", "2024-06-02T00:00:00+00:00", "2024-06-03T00:00:00+00:00"),
        ("0 0 1 * mon", "2024-08-27T00:00:00+00:00", "2024-09-01T00:00:00+00:00"),
        # a day field starting with '*' makes it "both" (odd days that are Mondays)
        ("0 0 */2 * mon", "2024-06-03T00:00:00+00:00", "2024-06-17T00:00:00+00:00"),
        ("0 0 */31 jan mon", "2091-01-02T00:00:00+00:00", "2103-01-01T00:00:00+00:00"),
    ],
)
def test_next_after_hand_checked(expr: str, when: str, expected: str) -> None:
    assert next_run(expr, when) == expected


@pytest.mark.parametrize(
    ("expr", "when", "tz", "expected"),
    [
        # 02:30 does not exist on 10 March 2024 in New York: the next one is a day later
        ("30 2 * * *", "2024-03-10T00:00:00-05:00", NEW_YORK, "2024-03-11T02:30:00-04:00"),
        ("0 3 * * *", "2024-03-10T00:00:00-05:00", NEW_YORK, "2024-03-10T03:00:00-04:00"),
        # 01:30 happens twice on 3 November 2024: both are matches
        ("30 1 * * *", "2024-11-03T00:00:00-04:00", NEW_YORK, "2024-11-03T01:30:00-04:00"),
        ("30 1 * * *", "2024-11-03T01:40:00-04:00", NEW_YORK, "2024-11-03T01:30:00-05:00"),
        ("30 1 * * *", "2024-11-03T01:40:00-05:00", NEW_YORK, "2024-11-04T01:30:00-05:00"),
        ("* * * * *", "2024-11-03T01:59:30-04:00", NEW_YORK, "2024-11-03T01:00:00-05:00"),
        ("0 9 * * *", "2024-03-31T07:00:00+00:00", LONDON, "2024-03-31T09:00:00+01:00"),
        ("0 9 * * *", "2024-03-31T08:00:00+00:00", LONDON, "2024-04-01T09:00:00+01:00"),
        ("30 1 * * *", "2024-03-31T00:30:00+00:00", LONDON, "2024-04-01T01:30:00+01:00"),
        # Lord Howe moves by 30 minutes: 02:00-02:29 are skipped on 6 October 2024
        ("15 2 * * *", "2024-10-06T01:00:00+10:30", LORD_HOWE, "2024-10-07T02:15:00+11:00"),
        ("45 2 * * *", "2024-10-06T01:00:00+10:30", LORD_HOWE, "2024-10-06T02:45:00+11:00"),
        # a fixed offset
        (
            "0 9 * * *",
            "2024-01-01T00:00:00+00:00",
            timezone(timedelta(hours=5, minutes=30)),
            "2024-01-01T09:00:00+05:30",
        ),
    ],
)
def test_next_after_in_zones(expr: str, when: str, tz: tzinfo, expected: str) -> None:
    assert next_run(expr, when, tz) == expected


def test_a_hair_before_the_minute() -> None:
    # fromtimestamp would round this up to 00:00:00.000000; the answer is still 00:00.
    t = 946727999.9999995
    assert CronExpression.parse("* * * * *").next_after(t) == 946728000.0
    assert CronExpression.parse("* * * * *").next_after(t, NEW_YORK) == 946728000.0


def test_parse_fields_and_aliases() -> None:
    expr = CronExpression.parse("0-10/5,30 */6 1,15 jan-mar sat,0")
    assert expr.minutes == {0, 5, 10, 30}
    assert expr.hours == {0, 6, 12, 18}
    assert expr.days == {1, 15}
    assert expr.months == {1, 2, 3}
    assert expr.weekdays == {0, 6}
    assert expr.day_or
    assert not CronExpression.parse("0 0 * * mon").day_or
    assert CronExpression.parse("@daily") == CronExpression.parse("@daily")
    assert CronExpression.parse("@midnight").minutes == {0}


@pytest.mark.parametrize(
    ("expr", "field", "fragment"),
    [
        ("* * * *", None, "expected 5 fields"),
        ("* * * * * *", None, "got 6"),
        ("", None, "got 0"),
        ("60 * * * *", "minute", "60 in '60' is outside 0-59"),
        ("* 24 * * *", "hour", "outside 0-23"),
        ("* * 0 * *", "day-of-month", "outside 1-31"),
        ("* * * 13 *", "month", "outside 1-12"),
        ("* * * * 8", "day-of-week", "outside 0-7"),
        ("*/0 * * * *", "minute", "step 0"),
        ("*/61 * * * *", "minute", "step 61"),
        ("*/x * * * *", "minute", "step in '*/x' must be a positive number"),
        ("5-1 * * * *", "minute", "starts after it ends"),
        ("1,,2 * * * *", "minute", "empty item"),
        ("* * * foo *", "month", "name jan..dec, got 'foo'"),
        ("* * * * mon-xyz", "day-of-week", "name sun..sat, got 'xyz'"),
        ("* * * * -1", "day-of-week", "got ''"),
        ("mon * * * *", "minute", "a number 0-59, got 'mon'"),
        ("* * 30 feb *", "day-of-month", "never matches"),
        ("* * 31 4,6,9,11 *", "day-of-month", "never matches"),
        ("* * ３ * *", "day-of-month", "got '３'"),  # a non-ASCII digit  # noqa: RUF001
    ],
)
def test_parse_refuses(expr: str, field: str | None, fragment: str) -> None:
    with pytest.raises(CronError) as info:
        CronExpression.parse(expr)
    assert info.value.field == field
    assert fragment in str(info.value)
    if field is not None:
        assert f"cron {field} field" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_30_february_is_fine_when_weekdays_also_count() -> None:
    # Both day fields restricted: the weekday alone can match, so it is not "never".
    expr = CronExpression.parse("0 0 30 2 fri")
    assert next_run("0 0 30 2 fri", "2024-01-01T00:00:00+00:00") == "2024-02-02T00:00:00+00:00"
    assert expr.day_or


# --------------------------------------------------------------------------- property


@dataclass(frozen=True)
class Spec:
    """An expression and, from its construction, the values of each field."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    day_or: bool

    def matches(self, moment: datetime) -> bool:
        if not (
            moment.minute in self.minutes
            and moment.hour in self.hours
            and moment.month in self.months
        ):
            return False
        return self.day_matches(moment)

    def day_matches(self, moment: datetime) -> bool:
        if moment.month not in self.months:
            return False
        dom = moment.day in self.days
        dow = moment.isoweekday() % 7 in self.weekdays
        return (dom or dow) if self.day_or else (dom and dow)


MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
WEEKDAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]


@st.composite
def field_text(
    draw: st.DrawFn, low: int, high: int, names: list[str] | None = None, base: int = 0
) -> tuple[str, frozenset[int]]:
    def value(v: int) -> str:
        if names and low <= v - base < len(names) and draw(st.booleans()):
            name = names[v - base]
            return draw(st.sampled_from([name, name.upper(), name.capitalize()]))
        return str(v)

    items, allowed = [], set[int]()
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["star", "value", "range", "star-step", "range-step", "from"]))
        step = draw(st.integers(1, high - low + 1))
        a, b = sorted(draw(st.lists(st.integers(low, high), min_size=2, max_size=2)))
        if kind == "star":
            items.append("*")
            allowed.update(range(low, high + 1))
        elif kind == "value":
            items.append(value(a))
            allowed.add(a)
        elif kind == "range":
            items.append(f"{value(a)}-{value(b)}")
            allowed.update(range(a, b + 1))
        elif kind == "star-step":
            items.append(f"*/{step}")
            allowed.update(range(low, high + 1, step))
        elif kind == "range-step":
            items.append(f"{value(a)}-{value(b)}/{step}")
            allowed.update(range(a, b + 1, step))
        else:
            items.append(f"{value(a)}/{step}")
            allowed.update(range(a, high + 1, step))
    return ",".join(items), frozenset(allowed)


MAX_DAYS = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


@st.composite
def specs(draw: st.DrawFn) -> Spec:
    minute, minutes = draw(field_text(0, 59))
    hour, hours = draw(field_text(0, 23))
    dom, days = draw(field_text(1, 31))
    month, months = draw(field_text(1, 12, MONTHS, 1))
    dow, weekdays = draw(field_text(0, 7, WEEKDAYS, 0))
    weekdays = frozenset(d % 7 for d in weekdays)
    day_or = not (dom.startswith("*") or dow.startswith("*"))
    return Spec(
        f"{minute} {hour} {dom} {month} {dow}", minutes, hours, days, months, weekdays, day_or
    )


def possible(spec: Spec) -> bool:
    return spec.day_or or any(d <= MAX_DAYS[m - 1] for m in spec.months for d in spec.days)


def oracle_utc(spec: Spec, t: float) -> float:
    """Minute by minute from t, skipping whole days that do not match."""
    m = math.floor(t / 60) * 60 + 60
    while True:
        moment = datetime.fromtimestamp(m, UTC)
        if not spec.day_matches(moment):
            midnight = moment.replace(hour=0, minute=0) + timedelta(days=1)
            m = int(midnight.timestamp())
            continue
        if spec.matches(moment):
            return m
        m += 60


TIMES = st.floats(at("2000-01-01T00:00:00+00:00"), at("2090-01-01T00:00:00+00:00"))


@given(specs(), TIMES)
@settings(max_examples=300)
def test_next_after_is_the_first_match_utc(spec: Spec, t: float) -> None:
    if not possible(spec):
        with pytest.raises(CronError, match="never matches"):
            CronExpression.parse(spec.text)
        return
    expr = CronExpression.parse(spec.text)
    assert (expr.minutes, expr.hours, expr.days, expr.months, expr.weekdays, expr.day_or) == (
        spec.minutes,
        spec.hours,
        spec.days,
        spec.months,
        spec.weekdays,
        spec.day_or,
    )
    result = expr.next_after(t)
    assert result > t
    assert result % 60 == 0
    assert spec.matches(datetime.fromtimestamp(result, UTC))
    assert result == oracle_utc(spec, t)


# Around the 2024 transitions of three zones, where wall time skips or repeats.
TRANSITIONS = [
    at("2024-03-10T06:30:00+00:00"),
    at("2024-11-03T05:30:00+00:00"),
    at("2024-03-31T00:30:00+00:00"),
    at("2024-10-27T00:30:00+00:00"),
    at("2024-04-06T14:30:00+00:00"),
    at("2024-10-05T15:30:00+00:00"),
]
WINDOW = 2 * 86400


@given(
    specs().filter(possible),
    st.sampled_from(TRANSITIONS),
    st.floats(-4 * 3600, 4 * 3600),
    st.sampled_from([NEW_YORK, LONDON, LORD_HOWE]),
)
@settings(max_examples=150)
def test_next_after_is_the_first_match_in_zones(
    spec: Spec, around: float, shift: float, tz: ZoneInfo
) -> None:
    t = around + shift
    result = CronExpression.parse(spec.text).next_after(t, tz)

    def local(u: float) -> datetime:
        return datetime.fromtimestamp(u, tz)

    assert result > t
    assert local(result).second == 0
    assert spec.matches(local(result))
    # No earlier whole minute after t matches (checked over two days from t; all three
    # zones' offsets are whole minutes, so local minutes start on UTC minutes).
    m = math.floor(t / 60) * 60 + 60
    while m < min(result, t + WINDOW):
        assert not spec.matches(local(m)), datetime.fromtimestamp(m, tz).isoformat()
        m += 60
