"""The event log's read side: :class:`SqliteEventLogReader` and the queries it runs.

Apart from the writer (:mod:`zbus.eventbus.server.store`) because a reader is a
connection of its own that never writes, used from other threads (snapshots, the admin
API) and from the archive's child process, which needs no writer code. What only reads
use lives here with it: topic prefixes turned into index ranges, rows decoded into
:class:`~zbus.eventbus.core.log.Event`. The schema is the writer's (see its module
docstring).
"""

from __future__ import annotations

import contextlib
import sqlite3
import weakref
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path
from typing import cast

from zbus.common.sqlite import StoreError, connect
from zbus.eventbus.core.flow import row_bytes
from zbus.eventbus.core.log import Event, LogStats, Page, TopicStat

# How errors name the file; the writer says the same.
LOG_WHAT = "event log"
_COLUMNS = "e.seq, e.topic, e.producer, e.ts, e.uuid, e.data"
# The latest event of each topic: a range of the topic index, then one lookup per topic.
_LATEST = f"SELECT {_COLUMNS} FROM topics AS t CROSS JOIN events AS e ON e.seq = t.last_seq"


def _event(row: tuple[int, str, str, str, bytes, bytes]) -> Event:
    seq, topic, producer, ts, raw, data = row
    h = raw.hex()
    return Event(
        seq, topic, producer, ts, f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}", data
    )


def _successor(prefix: str) -> str | None:
    """The smallest string above every string starting with ``prefix`` (None: no bound).

    SQLite compares TEXT as UTF-8 bytes, which orders like code points, as Python does.
    """
    stem = prefix.rstrip("\U0010ffff")
    if not stem:
        return None
    nxt = ord(stem[-1]) + 1
    if nxt == 0xD800:  # surrogates cannot be stored, so no topic lies between
        nxt = 0xE000
    return stem[:-1] + chr(nxt)


def _ranges(subtrees: Sequence[str]) -> list[tuple[str, str | None]]:
    """Disjoint, sorted topic ranges ``[prefix, successor)`` covering the subtrees."""
    if not subtrees or "" in subtrees:
        return [("", None)]
    out: list[tuple[str, str | None]] = []
    for prefix in sorted(set(subtrees)):
        # In sorted order a prefix comes before everything it covers.
        if out and prefix.startswith(out[-1][0]):
            continue
        out.append((prefix, _successor(prefix)))
    return out


def _range_sql(
    column: str, ranges: list[tuple[str, str | None]], after: str | None = None
) -> tuple[str, list[object]]:
    """An SQL condition for ``column`` in any of the ranges and above the cursor ``after``.

    The cursor replaces a range's lower bound rather than being one more condition, so
    that a deep page starts with one seek instead of walking the range from its start.
    """
    terms: list[str] = []
    params: list[object] = []
    for lo, hi in ranges:
        if after is not None and after >= lo:
            if hi is not None and after >= hi:
                continue  # the whole range is before the cursor
            term, bound = f"{column} > ?", after
        else:
            term, bound = f"{column} >= ?", lo
        params.append(bound)
        if hi is not None:
            term = f"({term} AND {column} < ?)"
            params.append(hi)
        terms.append(term)
    return ("(" + " OR ".join(terms) + ")" if terms else "0"), params


#: The largest sequence SQLite stores. The wire allows 64 unsigned bits, so a query's
#: bound above this is clamped (no stored event is beyond it) rather than overflowing.
MAX_STORED_SEQ = 2**63 - 1


def _bound(seq: int) -> int:
    return seq if seq <= MAX_STORED_SEQ else MAX_STORED_SEQ


def max_sequence(conn: sqlite3.Connection) -> int:
    return cast(int, conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0])


class _Budget:
    """Rows for one page: ``limit`` of them and ``max_bytes`` (None: no byte bound), and
    always at least one. ``full`` once a row was refused: another page follows."""

    def __init__(self, limit: int, max_bytes: int | None) -> None:
        self.rows = limit
        self.bytes = max_bytes
        self.taken = 0
        self.full = False

    def take(self, e: Event) -> bool:
        if self.taken >= self.rows:
            self.full = True
            return False
        if self.bytes is not None:
            cost = row_bytes(e.topic, e.producer, e.ts, e.data)
            if self.taken and cost > self.bytes:
                self.full = True
                return False
            self.bytes -= cost
        self.taken += 1
        return True


class SqliteEventLogReader:
    """A read-only view with its own connection. One thread at a time; readers of
    different threads never block each other or the writer (WAL snapshots)."""

    def __init__(self, path: Path, *, cache_kib: int = 16_384) -> None:
        self.path = path
        self._conn = connect(path, cache_kib, create=False, what=LOG_WHAT)
        self._conn.execute("PRAGMA query_only = ON")
        self._stream_ref: weakref.ref[Iterator[int | Event]] | None = None

    def _begin(self) -> None:
        if self._conn.in_transaction:
            raise StoreError("this reader still has a snapshot stream open; finish or close it")
        self._conn.execute("BEGIN")

    def _latest(
        self, lo: str, hi: str | None, after: str | None, since: int, limit: int | None = None
    ) -> Iterator[Event]:
        # One query per range: each is an ordered walk of the topic index, and the ranges
        # are disjoint and sorted, so the results come out in topic order.
        where, params = _range_sql("t.topic", [(lo, hi)], after)
        sql = f"{_LATEST} WHERE {where} AND t.last_seq > ? ORDER BY t.topic"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return map(_event, self._conn.execute(sql, [*params, _bound(since)]))

    def snapshot_page(
        self,
        subtrees: tuple[str, ...],
        since: int,
        after: str | None,
        limit: int,
        max_bytes: int | None = None,
    ) -> Page:
        """Up to ``limit`` latest events per matching topic with seq > since, by topic,
        and no more than ``max_bytes`` of them (:func:`row_bytes`; at least one event)."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        events: list[Event] = []
        budget = _Budget(limit, max_bytes)
        self._begin()
        try:
            sequence = max_sequence(self._conn)
            for lo, hi in _ranges(subtrees):
                # One extra row tells whether another page follows.
                for event in self._latest(lo, hi, after, since, limit + 1 - len(events)):
                    if not budget.take(event):
                        break
                    events.append(event)
                if budget.full:
                    break
        finally:
            self._conn.execute("COMMIT")
        return Page(events, events[-1].topic if budget.full else None, sequence)

    def snapshot(self, subtrees: tuple[str, ...], since: int) -> tuple[int, Iterator[Event]]:
        """The read point's sequence and every matching latest event, in one read
        transaction. The stream must be consumed or closed before this reader's next call;
        dropping it ends the transaction."""
        stream = self._stream(_ranges(subtrees), since)
        sequence = cast(int, next(stream))
        self._stream_ref = weakref.ref(stream)
        return sequence, cast(Iterator[Event], stream)

    def _stream(self, ranges: list[tuple[str, str | None]], since: int) -> Iterator[int | Event]:
        self._begin()
        try:
            yield max_sequence(self._conn)
            for lo, hi in ranges:
                yield from self._latest(lo, hi, None, since)
        finally:
            self._conn.execute("COMMIT")

    def replay(
        self, subtrees: tuple[str, ...], after_seq: int, limit: int, max_bytes: int | None = None
    ) -> list[Event]:
        """Logged events (not only the latest) with seq > after_seq, in sequence order:
        ``limit`` at most, and no more than ``max_bytes`` of them (at least one)."""
        if max_bytes is None:
            return list(self._replay(subtrees, after_seq, limit))
        budget = _Budget(limit, max_bytes)
        events: list[Event] = []
        for event in self._replay(subtrees, after_seq, limit):
            if not budget.take(event):
                break
            events.append(event)
        return events

    def log_page(
        self, subtrees: tuple[str, ...], after_seq: int, limit: int, max_bytes: int | None = None
    ) -> Page:
        """:meth:`replay` as a page: its ``next`` is the last sequence when more may follow,
        and its ``sequence`` the log's last one, read in the same transaction (so every
        matching event up to it is in the pages from ``after_seq``)."""
        budget = _Budget(limit, max_bytes)
        events: list[Event] = []
        self._begin()
        try:
            sequence = max_sequence(self._conn)
            for event in self._replay(subtrees, after_seq, limit + 1):
                if not budget.take(event):
                    break
                events.append(event)
        finally:
            self._conn.execute("COMMIT")
        return Page(events, str(events[-1].seq) if budget.full else None, sequence)

    def _replay(
        self, subtrees: tuple[str, ...], after_seq: int, limit: int | None
    ) -> Iterator[Event]:
        where, params = _range_sql("e.topic", _ranges(subtrees))
        sql = f"SELECT {_COLUMNS} FROM events AS e WHERE e.seq > ? AND {where} ORDER BY e.seq"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return map(_event, self._conn.execute(sql, [_bound(after_seq), *params]))

    def resume(self, subtrees: tuple[str, ...], since: int) -> tuple[int, Iterator[Event]]:
        """:meth:`snapshot` for a client resuming after ``since``: every matching event
        above it, in sequence order (not only each topic's latest), in one read
        transaction, read as the stream is consumed."""
        stream = self._resume_stream(subtrees, since)
        sequence = cast(int, next(stream))
        self._stream_ref = weakref.ref(stream)
        return sequence, cast(Iterator[Event], stream)

    def _resume_stream(self, subtrees: tuple[str, ...], since: int) -> Iterator[int | Event]:
        self._begin()
        try:
            yield max_sequence(self._conn)
            yield from self._replay(subtrees, since, None)
        finally:
            self._conn.execute("COMMIT")

    def recent(self, prefix: str, limit: int, after: int = 0) -> list[Event]:
        """The newest events whose topic starts with ``prefix`` and whose sequence is
        above ``after``, newest first. Reads the log backwards from its end, so a rare
        prefix costs a longer walk (never below ``after``)."""
        where, params = _range_sql("e.topic", _ranges((prefix,)))
        cur = self._conn.execute(
            f"SELECT {_COLUMNS} FROM events AS e WHERE e.seq > ? AND {where}"
            " ORDER BY e.seq DESC LIMIT ?",
            [_bound(after), *params, limit],
        )
        return list(map(_event, cur))

    def topics(self, prefix: str, limit: int, after: str | None = None) -> list[TopicStat]:
        """Topics starting with ``prefix`` in order, from after the topic ``after``."""
        where, params = _range_sql("t.topic", _ranges((prefix,)), after)
        # The last event's time by its sequence (the key of events); retention may have
        # deleted it, then the time is None.
        cur = self._conn.execute(
            "SELECT t.topic, t.count, t.bytes, t.last_seq,"
            " (SELECT e.ts FROM events AS e WHERE e.seq = t.last_seq)"
            f" FROM topics AS t WHERE {where} ORDER BY t.topic LIMIT ?",
            [*params, limit],
        )
        return [TopicStat(*row) for row in cur]

    def stats(self) -> LogStats:
        self._begin()
        try:
            first = self._conn.execute("SELECT coalesce(min(seq), 0) FROM events").fetchone()[0]
            last = max_sequence(self._conn)
            events = self._conn.execute("SELECT value FROM meta WHERE key = 'events'").fetchone()
            topics = self._conn.execute("SELECT count(*) FROM topics").fetchone()[0]
        finally:
            self._conn.execute("COMMIT")
        size = 0
        for suffix in ("", "-wal"):
            with contextlib.suppress(FileNotFoundError):
                size += Path(f"{self.path}{suffix}").stat().st_size
        return LogStats(first, last, events[0], topics, size)

    def close(self) -> None:
        stream = self._stream_ref() if self._stream_ref is not None else None
        if stream is not None:
            cast(Generator[object, None, None], stream).close()  # ends its transaction
        self._conn.close()
