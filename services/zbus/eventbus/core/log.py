"""The event log's record types and the interfaces of its writer and its readers.

Apart from :mod:`zbus.eventbus.server.store` (the writer) and
:mod:`zbus.eventbus.server.reader` (the readers) because both build and hand out these
records, and the pipeline, the snapshot server and the archive depend only on them and
on the two protocols, never on SQLite.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple, Protocol

from zbus.common.protocols import eventbus as eb


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event as a producer sent it: ``ts`` is its ISO-8601 text, ``uuid`` canonical text."""

    topic: str
    producer: str
    ts: str
    uuid: str
    data: bytes


class Event(NamedTuple):
    """An event in the log: as the log hands it out, and as a subscriber receives it.
    Read back from the log, ``uuid`` is lower-case canonical text; ``data`` is the bytes
    the producer sent. A tuple, so that building one per event costs the least."""

    seq: int
    topic: str
    producer: str
    ts: str
    uuid: str
    data: bytes

    def unpack(self, *, lenient: bool = False) -> Any:
        """``data`` unpacked as msgpack (how publishers pack anything but bytes).

        ``lenient`` also reads what the Node.js peer may send: an empty frame for no data
        (``None``) and text that is not UTF-8 (see ``eventbus.unpack_data``).

        Raises:
            ProtocolError: ``data`` is not one msgpack object.
        """
        return eb.unpack_data(self.data, lenient=lenient)


#: An :class:`Event` from its row ``(seq, topic, producer, ts, uuid, data)``, the tuple
#: made at once: a NamedTuple's generated ``__new__`` is a Python function, and this
#: costs about half of it (134 against 230 ns an event), which shows on the hot paths
#: that build one per event (appends, log reads, snapshots, the clients' streams).
event_from_row: Callable[[Iterable[Any]], Event] = partial(tuple.__new__, Event)


@dataclass(frozen=True, slots=True)
class AppendResult:
    stored: list[Event]
    duplicates: list[tuple[str, int]]  # (uuid as given, the sequence it already has)


@dataclass(frozen=True, slots=True)
class Page:
    events: list[Event]
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

    def snapshot(self, subtrees: tuple[str, ...], since: int) -> tuple[int, Iterator[Event]]: ...

    def resume(self, subtrees: tuple[str, ...], since: int) -> tuple[int, Iterator[Event]]: ...

    def log_page(
        self, subtrees: tuple[str, ...], after_seq: int, limit: int, max_bytes: int | None = None
    ) -> Page: ...

    def replay(
        self, subtrees: tuple[str, ...], after_seq: int, limit: int, max_bytes: int | None = None
    ) -> list[Event]: ...

    def recent(self, prefix: str, limit: int) -> list[Event]: ...

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
