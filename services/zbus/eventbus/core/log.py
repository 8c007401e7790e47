"""The event log's record types and the interfaces of its writer and its readers.

Apart from :mod:`zbus.eventbus.server.store` (the writer) and
:mod:`zbus.eventbus.server.reader` (the readers) because both build and hand out these
records, and the pipeline, the snapshot server and the archive depend only on them and
on the two protocols, never on SQLite.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event as a producer sent it: ``ts`` is its ISO-8601 text, ``uuid`` canonical text."""

    topic: str
    producer: str
    ts: str
    uuid: str
    data: bytes


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """A stored event. Read back from the log, ``uuid`` is lower-case canonical text."""

    seq: int
    topic: str
    producer: str
    ts: str
    uuid: str
    data: bytes


@dataclass(frozen=True, slots=True)
class AppendResult:
    stored: list[LoggedEvent]
    duplicates: list[tuple[str, int]]  # (uuid as given, the sequence it already has)


@dataclass(frozen=True, slots=True)
class Page:
    events: list[LoggedEvent]
    next: str | None  # cursor (the last topic of this page) or None when done
    sequence: int  # the log's last sequence at the page's read point


@dataclass(frozen=True, slots=True)
class TopicStat:
    topic: str
    count: int
    bytes: int
    last_seq: int
    last_ts: str | None = None  # producer timestamp of the last event (None: not in the log)


@dataclass(frozen=True, slots=True)
class LogStats:
    first_seq: int  # 0 when the log is empty
    last_seq: int
    events: int
    topics: int
    size_bytes: int  # database and WAL files


class EventLogReader(Protocol):
    """A read-only view of the log, for one thread at a time."""

    def snapshot_page(
        self,
        subtrees: tuple[str, ...],
        since: int,
        after: str | None,
        limit: int,
        max_bytes: int | None = None,
    ) -> Page: ...

    def snapshot(
        self, subtrees: tuple[str, ...], since: int
    ) -> tuple[int, Iterator[LoggedEvent]]: ...

    def resume(
        self, subtrees: tuple[str, ...], since: int
    ) -> tuple[int, Iterator[LoggedEvent]]: ...

    def log_page(
        self, subtrees: tuple[str, ...], after_seq: int, limit: int, max_bytes: int | None = None
    ) -> Page: ...

    def replay(
        self, subtrees: tuple[str, ...], after_seq: int, limit: int, max_bytes: int | None = None
    ) -> list[LoggedEvent]: ...

    def recent(self, prefix: str, limit: int) -> list[LoggedEvent]: ...

    def topics(self, prefix: str, limit: int, after: str | None = None) -> list[TopicStat]: ...

    def stats(self) -> LogStats: ...

    def close(self) -> None: ...


class EventLog(Protocol):
    """The bus's log; every method but ``reader`` belongs to the one writer thread."""

    def last_sequence(self) -> int: ...

    def append(self, batch: Sequence[NewEvent], received_at: float) -> AppendResult: ...

    def reader(self) -> EventLogReader: ...

    def apply_retention(
        self,
        *,
        now: float,
        max_age: float | None,
        max_events: int | None,
        max_delete: int | None = None,
    ) -> int: ...

    def close(self) -> None: ...


# A frozen dataclass's __init__ goes through object.__setattr__ once per field; setting
# the slots directly builds the same object in half the time, which matters for appends
# and snapshot streams (one LoggedEvent per event).
_SET_SEQ, _SET_TOPIC, _SET_PRODUCER, _SET_TS, _SET_UUID, _SET_DATA = (
    getattr(LoggedEvent, f).__set__ for f in ("seq", "topic", "producer", "ts", "uuid", "data")
)


def logged_event(
    seq: int, topic: str, producer: str, ts: str, uuid: str, data: bytes
) -> LoggedEvent:
    ev = object.__new__(LoggedEvent)
    _SET_SEQ(ev, seq)
    _SET_TOPIC(ev, topic)
    _SET_PRODUCER(ev, producer)
    _SET_TS(ev, ts)
    _SET_UUID(ev, uuid)
    _SET_DATA(ev, data)
    return ev
