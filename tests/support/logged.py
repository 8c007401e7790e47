"""Logged events for tests of the cores that read the log: the real record type."""

from __future__ import annotations

from zbus.eventbus.core.log import Event

TS = "2026-11-22T08:35:32.862Z"
UUID = "9d5c1f3a-7e2b-4c8d-a6f0-3b1e5d7c9a24"


def logged(
    seq: int, topic: str, producer: str = "p", ts: str = TS, uuid: str = UUID, data: bytes = b"d"
) -> Event:
    """An event as the log hands it back, with test defaults for what a test ignores."""
    return Event(seq, topic, producer, ts, uuid, data)
