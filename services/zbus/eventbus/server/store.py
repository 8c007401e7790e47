"""The event bus's durable log: SQLite in WAL mode, one writer thread, many readers.

Layout (schema version 1; the file is marked with ``PRAGMA application_id``):

- ``events``: the log. ``seq`` is the rowid, so an append lands on the right edge of the
  b-tree and the last sequence is one descent. The uuid is kept as 16 bytes.
- ``topics``: topic -> latest sequence, event count, total bytes, upserted once per topic
  per batch in the append's transaction. Snapshots are range reads of its primary key,
  and retention never deletes an event that it names as a topic's latest.
- ``batches``: the receive time of each append, keyed by its first sequence: age
  retention needs a time per batch, not a column per event.
- ``uuids``: the duplicate index, (64-bit key of the uuid, sequence), complete up to the
  ``indexed`` mark in ``meta``; the uuids of events above the mark are held in memory.

Why the uuid index is not written on every append: uuids are random, so 1,000 of them
land on ~1,000 different pages of an index of millions, and every commit then writes
~4 MB of WAL for ~200 kB of events (measured: about 30,000 events/s at 300,000 events).
Instead the newest uuids (``uuid_merge_every``, 200,000 by default: ~50 MB at most) stay in
a dict, which an open rebuilds from the events above the mark (a bounded range, never
the whole log), and are merged into the index in key order, one eighth per append, so
each index page is written once per merge instead of once per event.

Durability: ``synchronous=NORMAL`` in WAL mode keeps every committed transaction across a
kill of the process (the WAL is in the OS page cache); ``fsync=True`` selects ``FULL`` to
also survive a power cut. Everything here is plain blocking code for threads, never for
an asyncio loop.
"""

from __future__ import annotations

import contextlib
import sqlite3
import struct
import weakref
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, cast

from zbus.common.sqlite import StoreError as StoreError  # re-exported
from zbus.common.sqlite import (
    configure_writer,
    connect,
    open_schema,
    transaction,
)

SCHEMA_VERSION = 1
_WHAT = "event log"
APPLICATION_ID = 0x7A627573  # "zbus"

_SCHEMA = """
CREATE TABLE events(
    seq INTEGER PRIMARY KEY, topic TEXT NOT NULL, producer TEXT NOT NULL,
    ts TEXT NOT NULL, uuid BLOB NOT NULL, data BLOB NOT NULL);
CREATE TABLE topics(
    topic TEXT PRIMARY KEY, last_seq INTEGER NOT NULL, count INTEGER NOT NULL,
    bytes INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE batches(first_seq INTEGER PRIMARY KEY, received REAL NOT NULL);
CREATE TABLE uuids(
    key INTEGER NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY(key, seq)) WITHOUT ROWID;
CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO meta VALUES ('indexed', 0), ('events', 0);
"""
_COLUMNS = "e.seq, e.topic, e.producer, e.ts, e.uuid, e.data"
# The latest event of each topic: a range of the topic index, then one lookup per topic.
_LATEST = f"SELECT {_COLUMNS} FROM topics AS t CROSS JOIN events AS e ON e.seq = t.last_seq"
_INSERT_EVENT = "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)"
_UPSERT_TOPIC = (
    "INSERT INTO topics VALUES (?, ?, ?, ?) ON CONFLICT(topic) DO UPDATE SET"
    " last_seq = excluded.last_seq, count = count + excluded.count,"
    " bytes = bytes + excluded.bytes"
)
_RETENTION_CHUNK = 2_000
_MERGE_SLICES = 8


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event as a producer sent it: ``ts`` is its ISO-8601 text, ``uuid`` canonical text."""

    topic: str
    producer: str
    ts: str
    uuid: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Event:
    """A stored event. Read back from the log, ``uuid`` is lower-case canonical text."""

    seq: int
    topic: str
    producer: str
    ts: str
    uuid: str
    data: bytes


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


@dataclass(frozen=True, slots=True)
class LogStats:
    first_seq: int  # 0 when the log is empty
    last_seq: int
    events: int
    topics: int
    size_bytes: int  # database and WAL files


class LogReader(Protocol):
    """A read-only view of the log, for one thread at a time."""

    def snapshot_page(
        self, subtrees: tuple[str, ...], since: int, after: str | None, limit: int
    ) -> Page: ...

    def snapshot(self, subtrees: tuple[str, ...], since: int) -> tuple[int, Iterator[Event]]: ...

    def replay(self, subtrees: tuple[str, ...], after_seq: int, limit: int) -> list[Event]: ...

    def recent(self, prefix: str, limit: int) -> list[Event]: ...

    def topics(self, prefix: str, limit: int, after: str | None = None) -> list[TopicStat]: ...

    def stats(self) -> LogStats: ...

    def close(self) -> None: ...


class EventLog(Protocol):
    """The bus's log; every method but ``reader`` belongs to the one writer thread."""

    def last_sequence(self) -> int: ...

    def append(self, batch: Sequence[NewEvent], received_at: float) -> AppendResult: ...

    def reader(self) -> LogReader: ...

    def apply_retention(
        self,
        *,
        now: float,
        max_age: float | None,
        max_events: int | None,
        max_delete: int | None = None,
    ) -> int: ...

    def close(self) -> None: ...


def _uuid_bytes(text: str) -> bytes:
    if len(text) == 36 and text[8] == text[13] == text[18] == text[23] == "-":
        try:
            raw = bytes.fromhex(text.replace("-", ""))
        except ValueError:
            pass
        else:
            if len(raw) == 16:  # fromhex skips whitespace, so check the length
                return raw
    raise ValueError(f"not a canonical uuid: {text!r}")


_HALVES = struct.Struct(">qq")


def _key(raw: bytes) -> int:
    """The uuid index key: both halves folded into 64 bits (time-ordered uuids like v7
    share their first half within a millisecond, so neither half alone will do)."""
    high, low = _HALVES.unpack(raw)
    return cast(int, high ^ low)


# A frozen dataclass's __init__ goes through object.__setattr__ once per field; setting
# the slots directly builds the same object in half the time, which matters for appends
# and snapshot streams (one Event per event).
_SET_SEQ, _SET_TOPIC, _SET_PRODUCER, _SET_TS, _SET_UUID, _SET_DATA = (
    getattr(Event, f).__set__ for f in ("seq", "topic", "producer", "ts", "uuid", "data")
)


def _make(seq: int, topic: str, producer: str, ts: str, uuid: str, data: bytes) -> Event:
    ev = object.__new__(Event)
    _SET_SEQ(ev, seq)
    _SET_TOPIC(ev, topic)
    _SET_PRODUCER(ev, producer)
    _SET_TS(ev, ts)
    _SET_UUID(ev, uuid)
    _SET_DATA(ev, data)
    return ev


def _event(row: tuple[int, str, str, str, bytes, bytes]) -> Event:
    seq, topic, producer, ts, raw, data = row
    h = raw.hex()
    return _make(
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


def _max_seq(conn: sqlite3.Connection) -> int:
    return cast(int, conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0])


class SqliteEventLog:
    """The event log in one SQLite file. Owned by one writer thread at a time."""

    def __init__(
        self,
        path: Path,
        *,
        fsync: bool = False,
        uuid_merge_every: int = 200_000,
        checkpoint_pages: int = 4000,
    ) -> None:
        """Open or create the log.

        ``checkpoint_pages=0`` turns SQLite's automatic checkpoints off: the writer then
        never waits for a checkpoint's fsync, and the owner runs :func:`checkpoint` from
        another thread instead (the event bus does, once a second).
        """
        self.path = Path(path)
        self._merge_every = max(1, uuid_merge_every)
        conn = self._conn = connect(self.path, 65_536, create=True, what=_WHAT)
        try:
            open_schema(
                conn,
                self.path,
                app_id=APPLICATION_ID,
                version=SCHEMA_VERSION,
                schema=_SCHEMA,
                what=_WHAT,
            )
            # Fewer, larger checkpoints (4000 pages): each one syncs the database file.
            configure_writer(conn, fsync=fsync, checkpoint_pages=checkpoint_pages)
            self._last = _max_seq(conn)
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            self._indexed: int = meta["indexed"]
            self._events: int = meta["events"]
            # uuid -> seq of events above the index mark (see the module docstring).
            self._pending: dict[bytes, int] = dict(
                conn.execute("SELECT uuid, seq FROM events WHERE seq > ?", (self._indexed,))
            )
        except BaseException as exc:
            conn.close()
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"{self.path}: cannot read the event log: {exc}") from exc
            raise
        self._merging: dict[bytes, int] = {}
        self._merge_rows: list[tuple[int, int]] = []  # (key, seq) sorted
        self._merge_pos = 0
        self._merge_hi = 0
        self._retention_hold: int | None = None

    def last_sequence(self) -> int:
        return self._last

    def _transaction(self, what: str) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return transaction(self._conn, self.path, what)

    def append(self, batch: Sequence[NewEvent], received_at: float) -> AppendResult:
        """Store the batch in one transaction: drop duplicates, sequence, index, commit."""
        raws = [_uuid_bytes(e.uuid) for e in batch]
        if not self._merge_rows and len(self._pending) >= self._merge_every:
            self._start_merge()
        duplicates: list[tuple[str, int]] = []
        merge_pos = self._merge_pos
        first = self._last + 1
        with self._transaction("append") as conn:
            known = self._known(raws)
            fresh: list[tuple[NewEvent, bytes]]
            if not known and len(set(raws)) == len(raws):
                fresh = list(zip(batch, raws, strict=True))  # the common case
            else:
                fresh = []
                seen: dict[bytes, int] = {}
                for e, raw in zip(batch, raws, strict=True):
                    old = known.get(raw) or seen.get(raw)
                    if old is None:
                        seen[raw] = first + len(fresh)
                        fresh.append((e, raw))
                    else:
                        duplicates.append((e.uuid, old))
            rows = []
            stored = []
            per_topic: dict[str, list[int]] = {}
            for seq, (e, raw) in enumerate(fresh, first):
                topic, data = e.topic, e.data
                rows.append((seq, topic, e.producer, e.ts, raw, data))
                stored.append(_make(seq, topic, e.producer, e.ts, e.uuid, data))
                agg = per_topic.get(topic)
                if agg is None:
                    per_topic[topic] = [seq, 1, len(data)]
                else:
                    agg[0] = seq
                    agg[1] += 1
                    agg[2] += len(data)
            if rows:
                conn.executemany(_INSERT_EVENT, rows)
                conn.executemany(_UPSERT_TOPIC, [(t, *a) for t, a in per_topic.items()])
                conn.execute("INSERT INTO batches VALUES (?, ?)", (first, received_at))
                conn.execute("UPDATE meta SET value = value + ? WHERE key = 'events'", (len(rows),))
                if self._merge_rows:
                    merge_pos = self._merge_slice()
        self._last = first + len(rows) - 1
        self._events += len(rows)
        self._pending.update((row[4], row[0]) for row in rows)
        self._merge_pos = merge_pos
        if self._merge_rows and merge_pos >= len(self._merge_rows):
            self._indexed = self._merge_hi
            self._merging = {}
            self._merge_rows = []
        return AppendResult(stored, duplicates)

    def _known(self, raws: list[bytes]) -> dict[bytes, int]:
        """The sequences of those uuids that are already in the log."""
        known: dict[bytes, int] = {}
        probe: set[bytes] = set()
        for raw in raws:
            seq = self._pending.get(raw) or self._merging.get(raw)
            if seq is not None:
                known[raw] = seq
            else:
                probe.add(raw)
        if not probe or (self._indexed == 0 and not self._merge_rows):
            return known  # nothing has been merged into the index yet
        keys = [_key(raw) for raw in probe]
        hits: list[int] = []
        for i in range(0, len(keys), 512):
            chunk = keys[i : i + 512]
            # Pad to a power of two so that a handful of statements stay prepared.
            size = max(16, 1 << (len(chunk) - 1).bit_length())
            chunk += [chunk[0]] * (size - len(chunk))
            sql = f"SELECT seq FROM uuids WHERE key IN ({','.join('?' * size)})"
            hits += (seq for (seq,) in self._conn.execute(sql, chunk))
        # A key is 64 bits of the uuid: confirm each hit against the event's full uuid.
        for seq in hits:
            row = self._conn.execute("SELECT uuid FROM events WHERE seq = ?", (seq,)).fetchone()
            if row is not None and row[0] in probe:
                known[row[0]] = seq
        return known

    def _start_merge(self) -> None:
        self._merging, self._pending = self._pending, {}
        self._merge_rows = sorted((_key(raw), seq) for raw, seq in self._merging.items())
        self._merge_pos = 0
        self._merge_hi = self._last

    def _merge_slice(self) -> int:
        """Merge the next key-ordered slice into the index; returns the new position."""
        start = self._merge_pos
        end = start + -(-len(self._merge_rows) // _MERGE_SLICES)
        # OR IGNORE: a merge cut short by a crash is redone from the events after reopen.
        # Rows of events deleted meanwhile by retention are harmless: hits are confirmed.
        self._conn.executemany(
            "INSERT OR IGNORE INTO uuids VALUES (?, ?)", self._merge_rows[start:end]
        )
        if end >= len(self._merge_rows):
            self._conn.execute("UPDATE meta SET value = ? WHERE key = 'indexed'", (self._merge_hi,))
        return end

    def reader(self) -> SqliteLogReader:
        return SqliteLogReader(self.path)

    def hold_retention(self, through: int | None) -> None:
        """Let retention delete no event above sequence ``through`` (None: no hold).

        The event archive holds retention at its mark, so that no event leaves the log
        before it is archived. Safe to call from any thread: one attribute is replaced,
        and :meth:`apply_retention` reads it once per call (the mark only grows, so a
        call that read the older value only keeps more).
        """
        self._retention_hold = through

    def apply_retention(
        self,
        *,
        now: float,
        max_age: float | None,
        max_events: int | None,
        max_delete: int | None = None,
    ) -> int:
        """Delete the oldest events older than ``max_age`` s or beyond ``max_events``.

        The latest event of each topic is never deleted, nor any event above the hold
        (:meth:`hold_retention`): those wait, even beyond ``max_events``. Works in short
        transactions of a few thousand events; ``max_delete`` bounds one call so that a
        writer can interleave appends (call again while it returns ``max_delete``). Ages
        come from the batch receive times, taken to grow with the sequence: after a clock
        step back, events wait for the batches after them.
        """
        conn = self._conn
        hold = self._retention_hold
        # Events at or above this sequence are never candidates.
        end = self._last + 1 if hold is None else min(self._last, max(hold, 0)) + 1
        age_cut = 0  # events below this sequence are older than max_age
        if max_age is not None:
            age_cut = self._last + 1
            # Oldest first, stopping at the first young batch: the walk is as long as the
            # batches that became old since the last call (they are trimmed below).
            for first_seq, received in conn.execute(
                "SELECT first_seq, received FROM batches ORDER BY first_seq"
            ):
                if received >= now - max_age:
                    age_cut = first_seq
                    break
            age_cut = min(age_cut, end)
        budget = self._events if max_delete is None else max_delete
        deleted = 0
        pos = 0
        while deleted < budget:
            excess = 0 if max_events is None else self._events - max_events
            below = age_cut if excess <= 0 else end
            with self._transaction("retention"):
                candidates = conn.execute(
                    "SELECT e.seq, e.topic, e.uuid, length(e.data) FROM events AS e"
                    " WHERE e.seq > ? AND e.seq < ? AND NOT EXISTS (SELECT 1 FROM topics AS t"
                    " WHERE t.topic = e.topic AND t.last_seq = e.seq)"
                    " ORDER BY e.seq LIMIT ?",
                    (pos, below, min(_RETENTION_CHUNK, budget - deleted)),
                ).fetchall()
                doomed: list[tuple[int, str, bytes, int]] = []
                for row in candidates:
                    if row[0] >= age_cut and len(doomed) >= excess:
                        break
                    doomed.append(row)
                self._delete(doomed)
            self._events -= len(doomed)
            for _, _, raw, _ in doomed:
                self._pending.pop(raw, None)
                self._merging.pop(raw, None)
            deleted += len(doomed)
            if not doomed or len(doomed) < len(candidates):
                break
            pos = doomed[-1][0]
        # Receive times of batches wholly deleted, or older than the age limit, are moot.
        with self._transaction("retention"):
            conn.execute(
                "DELETE FROM batches WHERE first_seq < ? OR first_seq < (SELECT max(first_seq)"
                " FROM batches WHERE first_seq <= (SELECT min(seq) FROM events))",
                (age_cut,),
            )
        return deleted

    def _delete(self, doomed: list[tuple[int, str, bytes, int]]) -> None:
        if not doomed:
            return
        conn = self._conn
        conn.executemany("DELETE FROM events WHERE seq = ?", [(r[0],) for r in doomed])
        conn.executemany(
            "DELETE FROM uuids WHERE key = ? AND seq = ?", [(_key(r[2]), r[0]) for r in doomed]
        )
        per_topic: dict[str, list[int]] = {}
        for _, topic, _, size in doomed:
            agg = per_topic.setdefault(topic, [0, 0])
            agg[0] += 1
            agg[1] += size
        conn.executemany(
            "UPDATE topics SET count = count - ?, bytes = bytes - ? WHERE topic = ?",
            [(n, b, t) for t, (n, b) in per_topic.items()],
        )
        conn.execute("UPDATE meta SET value = value - ? WHERE key = 'events'", (len(doomed),))

    def close(self) -> None:
        self._conn.close()


class SqliteLogReader:
    """A read-only view with its own connection. One thread at a time; readers of
    different threads never block each other or the writer (WAL snapshots)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn = connect(path, 16_384, create=False, what=_WHAT)
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
        self, subtrees: tuple[str, ...], since: int, after: str | None, limit: int
    ) -> Page:
        """Up to ``limit`` latest events per matching topic with seq > since, by topic."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        events: list[Event] = []
        self._begin()
        try:
            sequence = _max_seq(self._conn)
            for lo, hi in _ranges(subtrees):
                # One extra row tells whether another page follows.
                events += self._latest(lo, hi, after, since, limit + 1 - len(events))
                if len(events) > limit:
                    break
        finally:
            self._conn.execute("COMMIT")
        if len(events) > limit:
            del events[limit:]
            return Page(events, events[-1].topic, sequence)
        return Page(events, None, sequence)

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
            yield _max_seq(self._conn)
            for lo, hi in ranges:
                yield from self._latest(lo, hi, None, since)
        finally:
            self._conn.execute("COMMIT")

    def replay(self, subtrees: tuple[str, ...], after_seq: int, limit: int) -> list[Event]:
        """Logged events (not only the latest) with seq > after_seq, in sequence order."""
        where, params = _range_sql("e.topic", _ranges(subtrees))
        cur = self._conn.execute(
            f"SELECT {_COLUMNS} FROM events AS e WHERE e.seq > ? AND {where}"
            " ORDER BY e.seq LIMIT ?",
            [_bound(after_seq), *params, limit],
        )
        return list(map(_event, cur))

    def recent(self, prefix: str, limit: int) -> list[Event]:
        """The newest events whose topic starts with ``prefix``, newest first. Reads the
        log backwards from its end, so a rare prefix costs a longer walk."""
        where, params = _range_sql("e.topic", _ranges((prefix,)))
        cur = self._conn.execute(
            f"SELECT {_COLUMNS} FROM events AS e WHERE {where} ORDER BY e.seq DESC LIMIT ?",
            [*params, limit],
        )
        return list(map(_event, cur))

    def topics(self, prefix: str, limit: int, after: str | None = None) -> list[TopicStat]:
        """Topics starting with ``prefix`` in order, from after the topic ``after``."""
        where, params = _range_sql("topic", _ranges((prefix,)), after)
        cur = self._conn.execute(
            f"SELECT topic, count, bytes, last_seq FROM topics WHERE {where}"
            " ORDER BY topic LIMIT ?",
            [*params, limit],
        )
        return [TopicStat(*row) for row in cur]

    def stats(self) -> LogStats:
        self._begin()
        try:
            first = self._conn.execute("SELECT coalesce(min(seq), 0) FROM events").fetchone()[0]
            last = _max_seq(self._conn)
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
