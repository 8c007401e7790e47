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

The log is in three modules by role: the record types and the interfaces of writer and
readers are in :mod:`zbus.eventbus.core.log`, the read side in
:mod:`zbus.eventbus.server.reader`, and the writer is this module, which also re-exports
their names.
"""

from __future__ import annotations

import contextlib
import sqlite3
import struct
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from zbus.common.sqlite import (
    StoreError,
    configure_writer,
    connect,
    open_schema,
    transaction,
)
from zbus.eventbus.core.log import (
    AppendResult,
    Event,
    EventLog,
    EventLogReader,
    LogStats,
    NewEvent,
    Page,
    TopicStat,
)
from zbus.eventbus.server.reader import LOG_WHAT, MAX_STORED_SEQ, SqliteEventLogReader, max_sequence

# The writer's names and those of the records and the reader: this module stays the one
# import for the whole log.
__all__ = [
    "APPLICATION_ID",
    "MAX_STORED_SEQ",
    "SCHEMA_VERSION",
    "AppendResult",
    "Event",
    "EventLog",
    "EventLogReader",
    "LogStats",
    "NewEvent",
    "Page",
    "SqliteEventLog",
    "SqliteEventLogReader",
    "StoreError",
    "TopicStat",
]

SCHEMA_VERSION = 1
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
_INSERT_EVENT = "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)"
_UPSERT_TOPIC = (
    "INSERT INTO topics VALUES (?, ?, ?, ?) ON CONFLICT(topic) DO UPDATE SET"
    " last_seq = excluded.last_seq, count = count + excluded.count,"
    " bytes = bytes + excluded.bytes"
)
_RETENTION_CHUNK = 2_000
_MERGE_SLICES = 8


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
        conn = self._conn = connect(self.path, 65_536, create=True, what=LOG_WHAT)
        try:
            open_schema(
                conn,
                self.path,
                app_id=APPLICATION_ID,
                version=SCHEMA_VERSION,
                schema=_SCHEMA,
                what=LOG_WHAT,
            )
            # Fewer, larger checkpoints (4000 pages): each one syncs the database file.
            configure_writer(conn, fsync=fsync, checkpoint_pages=checkpoint_pages)
            self._last = max_sequence(conn)
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
        self._holds: dict[str, int | None] = {}
        self._holds_lock = threading.Lock()

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
                stored.append(Event(seq, topic, e.producer, e.ts, e.uuid, data))
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

    def reader(self) -> SqliteEventLogReader:
        return SqliteEventLogReader(self.path)

    def hold_retention(self, through: int | None, holder: str = "archive") -> None:
        """Let retention delete no event above sequence ``through`` for ``holder`` (None:
        that holder holds nothing). Several holders may hold; the lowest hold wins.

        The event archive holds retention at its mark, so that no event leaves the log
        before it is archived; the PPPP door at its oldest channel checkpoint, so that no
        event a subscriber may still need is deleted. Safe to call from any thread: the
        lowest hold is one attribute, replaced under a lock, and :meth:`apply_retention`
        reads it once per call.
        """
        with self._holds_lock:  # two holders may call at once (archive, PPPP door)
            self._holds[holder] = through
            values = [v for v in self._holds.values() if v is not None]
            self._retention_hold = min(values) if values else None

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
