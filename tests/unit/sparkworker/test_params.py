"""Job parameters: every parser names the parameter it refuses."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from zbus.sparkworker.errors import ParamError
from zbus.sparkworker.params import (
    check_params,
    optional,
    parse_choice,
    parse_date,
    parse_positive,
    parse_prefixes,
    parse_text,
    parse_time,
    parse_whole,
    since_until,
)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("2024-03-10T12:30:00Z", datetime(2024, 3, 10, 12, 30, tzinfo=UTC)),
        ("2024-03-10T12:30:00", datetime(2024, 3, 10, 12, 30, tzinfo=UTC)),
        ("2024-03-10T14:30:00+02:00", datetime(2024, 3, 10, 12, 30, tzinfo=UTC)),
        ("2024-03-10", datetime(2024, 3, 10, tzinfo=UTC)),
        (1_710_073_800, datetime(2024, 3, 10, 12, 30, tzinfo=UTC)),
        (1_710_073_800.5, datetime(2024, 3, 10, 12, 30, 0, 500_000, tzinfo=UTC)),
        ("1710073800", datetime(2024, 3, 10, 12, 30, tzinfo=UTC)),
    ],
)
def test_times(given: object, expected: datetime) -> None:
    parsed = parse_time("since", given)
    assert parsed == expected
    assert parsed.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    "bad",
    [
        "yesterday",
        "2024-13-01",
        True,
        None,
        [1],
        float("inf"),
        1e300,
        pytest.param(10**400, id="int-beyond-float"),
        pytest.param(-(10**400), id="negative-int-beyond-float"),
    ],
)
def test_bad_times_name_the_parameter(bad: object) -> None:
    with pytest.raises(ParamError, match=r"^until: ") as raised:
        parse_time("until", bad)
    assert raised.value.param == "until"
    assert isinstance(raised.value, ValueError)


def test_aware_times_stay_the_same_instant() -> None:
    zone = timezone(timedelta(hours=-5))
    assert parse_time("since", "2024-03-10T07:30:00-05:00") == datetime(
        2024, 3, 10, 7, 30, tzinfo=zone
    )


def test_unknown_parameters_are_refused_with_the_known_ones_listed() -> None:
    check_params("topic-stats", {"since": 1}, ("since", "until"))
    with pytest.raises(ParamError, match=r"sinse: unknown parameter of topic-stats \(it takes: "):
        check_params("topic-stats", {"sinse": 1}, ("since", "until"))
    with pytest.raises(ParamError, match=r"no parameters"):
        check_params("noop", {"x": 1}, ())


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("a/", ("a/",)),
        ("a/;b/", ("a/", "b/")),
        ("a/, b/;a/", ("a/", "b/")),
        ("", ()),
        (["a/", "b/"], ("a/", "b/")),
        (["a/", ""], ()),
        ([], ()),
    ],
)
def test_prefixes(given: object, expected: tuple[str, ...]) -> None:
    assert parse_prefixes("prefix", given) == expected


@pytest.mark.parametrize("bad", [3, ["a", 3], {"a": 1}])
def test_bad_prefixes(bad: object) -> None:
    with pytest.raises(ParamError, match=r"^prefix: expected a string or a list of strings"):
        parse_prefixes("prefix", bad)


def test_other_parsers() -> None:
    assert parse_date("date", "2024-03-10") == date(2024, 3, 10)
    for bad in ("2024-3-10", "2024-02-30", 20240310):
        with pytest.raises(ParamError, match=r"^date: "):
            parse_date("date", bad)
    assert parse_positive("target_file_mb", 0.5) == 0.5
    for bad in (0, -1, "1", True, float("nan"), float("inf"), 10**400, 1e300):
        with pytest.raises(ParamError, match=r"^target_file_mb: "):
            parse_positive("target_file_mb", bad)
    assert parse_whole("min_files", 3) == 3
    for bad in (0, 1.5, "2", False, 2**63, 10**5000):
        with pytest.raises(ParamError, match=r"^min_files: "):
            parse_whole("min_files", bad)
    assert parse_text("path", " out ") == "out"
    with pytest.raises(ParamError, match=r"^path: "):
        parse_text("path", "  ")
    fmt = parse_choice(("parquet", "csv"))
    assert fmt("format", "CSV") == "csv"
    with pytest.raises(ParamError, match=r"^format: expected one of parquet, csv"):
        fmt("format", "json")
    assert optional({"a": None}, "a", parse_text) is None
    assert optional({}, "a", parse_text) is None
    assert optional({"a": "x"}, "a", parse_text) == "x"


def test_since_until_is_a_window_that_is_not_empty() -> None:
    assert since_until({}) == (None, None)
    assert since_until({"since": 0}) == (datetime(1970, 1, 1, tzinfo=UTC), None)
    assert since_until({"since": 0, "until": "1970-01-01T00:00:01"}) == (
        datetime(1970, 1, 1, tzinfo=UTC),
        datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
    )
    with pytest.raises(ParamError, match=r"^until: must be after since \(1970-01-01T00:00:00Z\)"):
        since_until({"since": 0, "until": 0})
