"""The one maker of event UUIDs and wire timestamps (zbus.common.event_ids)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from zbus.common.event_ids import StampCache, uuid4, uuid4s, wire_stamp


def test_uuids_are_canonical_version_4_and_distinct() -> None:
    made = [*uuid4s(2000), uuid4()]
    for text in made:
        parsed = uuid.UUID(text)
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == text
    assert len(set(made)) == len(made)
    assert uuid4s(0) == []


@given(st.floats(min_value=0, max_value=4102444800, allow_nan=False))
def test_stamp_is_the_utc_millisecond(now: float) -> None:
    text = wire_stamp(now)
    assert text.endswith("Z") and len(text) == 24
    parsed = datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC)
    assert abs(parsed.timestamp() - now) < 0.001 + 1e-6


def test_stamp_cache_follows_the_time_it_is_given() -> None:
    cache = StampCache()
    assert cache.stamp(1.2345) == "1970-01-01T00:00:01.234Z"
    assert cache.stamp(1.2349) == "1970-01-01T00:00:01.234Z"
    assert cache.stamp(2.0) == "1970-01-01T00:00:02.000Z"
    assert cache.stamp(1.0) == "1970-01-01T00:00:01.000Z"  # a step back is followed too
