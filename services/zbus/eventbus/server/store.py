"""The event bus's durable log: SQLite in WAL mode, one writer thread, many readers.

The log is a sequence of stored batches (ADR 0008). Layout (schema version 2; the file
is marked with ``PRAGMA application_id``):

- ``batches``: one row per group commit, keyed by its first sequence: its last sequence,
  event count, receive time, the events' uuids (16 bytes each) and a msgpack blob of their
  topics, producers, timestamps and data, with a CRC-32 over both
  (:class:`~zbus.eventbus.core.batchlog.StoredBatch`). An append is one row, so it costs
  a B-tree insert per batch instead of per event; the row is also what replication ships
  (:meth:`SqliteEventLogReader.batches`, :meth:`SqliteEventLog.append_stored`).
- ``topics``: topic -> latest sequence, event count, total bytes, upserted once per topic
  per batch in the append's transaction. Snapshots are range reads of its primary key,
  and retention never deletes an event that it names as a topic's latest.
- ``uuid_runs`` and ``bloom``: the duplicate index of the uuids below the ``indexed`` mark
  in ``meta`` (see :mod:`zbus.eventbus.server.uuid_index`); the uuids above it are held in
  a dict, which an open rebuilds from the batches above the mark (a bounded range).
- ``meta``: the mark and the event count.

Retention deletes events, not batches: a batch that keeps some (a topic's latest, or
above a hold) is written again with those alone, its sequences then listed. Age
retention uses the batches' receive times.

Durability: one transaction per append; ``synchronous=NORMAL`` in WAL mode keeps every
committed transaction across a kill of the process (the WAL is in the OS page cache);
``fsync=True`` selects ``FULL`` to also survive a power cut. A batch whose CRC fails is
refused with an error naming the file and the sequence, never skipped. A log of schema
version 1 is migrated on open (:mod:`zbus.eventbus.server.migrate`). Everything here is
plain blocking code for threads, never for an asyncio loop.

The log is in several modules by role: the record types and the interfaces of writer and
readers are in :mod:`zbus.eventbus.core.log`, the stored batch in
:mod:`zbus.eventbus.core.batchlog`, the read side in :mod:`zbus.eventbus.server.reader`,
the uuid index in :mod:`zbus.eventbus.server.uuid_index`, and the writer is this module,
which also re-exports their names.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from zbus.common.sqlite import (
    StoreError,
    configure_writer,
    connect,
    open_schema,
    transaction,
)
from zbus.eventbus.core import batchlog
from zbus.eventbus.core.batchlog import BatchError, StoredBatch
from zbus.eventbus.core.log import (
    AppendResult,
    Event,
    EventLog,
    EventLogReader,
    LogStats,
    NewEvent,
    Page,
    TopicStat,
    event_from_row,
)
from zbus.eventbus.server import replica_log
from zbus.eventbus.server.migrate import migrate_v1
from zbus.eventbus.server.reader import (
    LOG_WHAT,
    MAX_STORED_SEQ,
    SqliteEventLogReader,
    batches_from,
    max_sequence,
)
from zbus.eventbus.server.uuid_index import SCHEMA as UUID_SCHEMA
from zbus.eventbus.server.uuid_index import UuidIndex

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
    "StoredBatch",
    "TopicStat",
]

SCHEMA_VERSION = 2
APPLICATION_ID = 0x7A627573  # "zbus"

_SCHEMA = (
    """
CREATE TABLE batches(
    first_seq INTEGER PRIMARY KEY, last_seq INTEGER NOT NULL, count INTEGER NOT NULL,
    received REAL NOT NULL, crc INTEGER NOT NULL, seqs BLOB, uuids BLOB NOT NULL,
    rows BLOB NOT NULL);
CREATE TABLE topics(
    topic TEXT PRIMARY KEY, last_seq INTEGER NOT NULL, count INTEGER NOT NULL,
    bytes INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO meta VALUES ('indexed', 0), ('events', 0);
"""
    + UUID_SCHEMA
)
_INSERT_BATCH = "INSERT INTO batches VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
_UPSERT_TOPIC = (
    "INSERT INTO topics VALUES (?, ?, ?, ?) ON CONFLICT(topic) DO UPDATE SET"
    " last_seq = excluded.last_seq, count = count + excluded.count,"
    " bytes = bytes + excluded.bytes"
)
_RETENTION_CHUNK = 2_000


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


def _uuids_bytes(texts: list[str]) -> list[bytes]:
    """:func:`_uuid_bytes` of a whole batch at once: one ``fromhex`` for all of them."""
    n = len(texts)
    joined = "".join(texts)
    dashes = "-" * n
    if (
        len(joined) == 36 * n
        and joined.count("-") == 4 * n
        and joined[8::36] == joined[13::36] == joined[18::36] == joined[23::36] == dashes
    ):
        try:
            raw = bytes.fromhex(joined.replace("-", ""))
        except ValueError:
            raw = b""
        # fromhex skips whitespace, and a text of another length shifts the rest: check
        # the length of the whole and, for that case, of each.
        if len(raw) == 16 * n and all(len(t) == 36 for t in texts):
            return [raw[i : i + 16] for i in range(0, 16 * n, 16)]
    return [_uuid_bytes(t) for t in texts]  # raises for the first one that is not


def _row(b: StoredBatch) -> tuple[object, ...]:
    return (b.first_seq, b.last_seq, b.count, b.received, b.crc, b.seqs, b.uuids, b.rows)


def _per_topic(first: int, topics: list[str], data: list[bytes]) -> list[tuple[str, int, int, int]]:
    """(topic, last sequence, events, bytes) of a contiguous run of events."""
    per: dict[str, list[int]] = {}
    for seq, (topic, d) in enumerate(zip(topics, data, strict=True), first):
        agg = per.get(topic)
        if agg is None:
            per[topic] = [seq, 1, len(d)]
        else:
            agg[0] = seq
            agg[1] += 1
            agg[2] += len(d)
    return [(t, a[0], a[1], a[2]) for t, a in per.items()]


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
        """Open or create the log (a version-1 log is migrated first, see
        :mod:`zbus.eventbus.server.migrate`).

        ``checkpoint_pages=0`` turns SQLite's automatic checkpoints off: the writer then
        never waits for a checkpoint's fsync, and the owner runs :func:`checkpoint` from
        another thread instead (the event bus does, once a second).
        """
        self.path = Path(path)
        conn = self._conn = connect(self.path, 65_536, create=True, what=LOG_WHAT)
        try:
            migrate_v1(conn, self.path, APPLICATION_ID, SCHEMA_VERSION)
            open_schema(
                conn,
                self.path,
                app_id=APPLICATION_ID,
                version=SCHEMA_VERSION,
                schema=_SCHEMA,
                what=LOG_WHAT,
            )
            # A replica's epoch history: added to a version-2 file when first opened.
            conn.execute(replica_log.EPOCHS_SCHEMA)
            # Fewer, larger checkpoints (4000 pages): each one syncs the database file.
            configure_writer(conn, fsync=fsync, checkpoint_pages=checkpoint_pages)
            self._last = max_sequence(conn)
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            self._events: int = meta["events"]
            indexed: int = meta["indexed"]
            self._index = UuidIndex(
                conn, uuid_merge_every, indexed, self._window(indexed), self._uuid_at
            )
        except BaseException as exc:
            conn.close()
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"{self.path}: cannot read the event log: {exc}") from exc
            if isinstance(exc, BatchError):
                raise StoreError(f"{self.path}: damaged event log: {exc}") from exc
            raise
        self._retention_hold: int | None = None
        self._holds: dict[str, int | None] = {}
        self._holds_lock = threading.Lock()

    def _window(self, indexed: int) -> Iterator[tuple[bytes, int]]:
        """(uuid, seq) of the events above the index mark: a bounded range of batches."""
        for batch in batches_from(self._conn, indexed):
            batch.check()
            raws = batch.uuids
            for i, seq in enumerate(batch.sequences()):
                if seq > indexed:
                    yield raws[16 * i : 16 * i + 16], seq

    def _uuid_at(self, seq: int) -> bytes | None:
        row = self._conn.execute(
            "SELECT first_seq, last_seq, seqs, uuids FROM batches WHERE first_seq <= ?"
            " ORDER BY first_seq DESC LIMIT 1",
            (seq,),
        ).fetchone()
        if row is None or row[1] < seq:
            return None
        first, _, seqs, raws = row
        if seqs is None:
            i = seq - first
        else:
            found = seqs.find(seq.to_bytes(8, "little"))
            while found % 8:  # an unaligned match is not a sequence
                found = seqs.find(seq.to_bytes(8, "little"), found + 1)
            if found < 0:
                return None
            i = found // 8
        return cast(bytes, raws[16 * i : 16 * i + 16])

    def last_sequence(self) -> int:
        return self._last

    def _transaction(self, what: str) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return transaction(self._conn, self.path, what)

    def append(self, batch: Sequence[NewEvent], received_at: float) -> AppendResult:
        """Store the batch as one stored batch in one transaction: drop duplicates,
        sequence, update the topic index, commit."""
        raws = _uuids_bytes([e.uuid for e in batch])
        index = self._index
        index.before_append(self._last)
        known = index.known(raws)
        duplicates: list[tuple[str, int]] = []
        fresh: Sequence[NewEvent] = batch
        if known or len(set(raws)) != len(raws):
            fresh, fresh_raws = [], []
            seen: dict[bytes, int] = {}
            for e, raw in zip(batch, raws, strict=True):
                old = known.get(raw) or seen.get(raw)
                if old is None:
                    seen[raw] = self._last + 1 + len(fresh)
                    fresh.append(e)
                    fresh_raws.append(raw)
                else:
                    duplicates.append((e.uuid, old))
            raws = fresh_raws
        if not fresh:
            return AppendResult([], duplicates)
        first = self._last + 1
        seqs = range(first, first + len(fresh))
        topics = [e.topic for e in fresh]
        producers = [e.producer for e in fresh]
        stamps = [e.ts for e in fresh]
        data = [e.data for e in fresh]
        uuids = [e.uuid for e in fresh]
        rows = zip(seqs, topics, producers, stamps, uuids, data, strict=True)
        stored = list(map(event_from_row, rows))
        try:
            encoded = batchlog.encode(
                seqs, received_at, b"".join(raws), (topics, producers, stamps, data)
            )
        except (TypeError, ValueError) as exc:
            raise StoreError(f"{self.path}: append failed: {exc}") from exc
        self._write(encoded, _per_topic(first, topics, data), raws, merge=True)
        return AppendResult(stored, duplicates)

    def _write(
        self,
        batch: StoredBatch,
        per_topic: list[tuple[str, int, int, int]],
        raws: list[bytes],
        *,
        merge: bool,
    ) -> None:
        try:
            with self._transaction("append") as conn:
                conn.execute(_INSERT_BATCH, _row(batch))
                conn.executemany(_UPSERT_TOPIC, per_topic)
                conn.execute(
                    "UPDATE meta SET value = value + ? WHERE key = 'events'", (batch.count,)
                )
                if merge:
                    self._index.merge_step()
        except BaseException:
            self._index.rolled_back()
            raise
        self._last = batch.last_seq
        self._events += batch.count
        self._index.stored(raws, batch.sequences())
        self._index.committed()

    def append_stored(self, batch: StoredBatch) -> None:
        """Append a batch another log stored (:meth:`SqliteEventLogReader.batches`) as it
        is: the way a follower copies its leader. Its sequences must follow this log's.

        Raises:
            StoreError: the batch does not follow this log's last sequence, or it is
                damaged (CRC).
        """
        if batch.first_seq <= self._last:
            raise StoreError(
                f"{self.path}: a batch from sequence {batch.first_seq} does not follow "
                f"the log's last sequence {self._last}"
            )
        try:
            topics, _, _, data = batch.columns()
        except BatchError as exc:
            raise StoreError(f"{self.path}: {exc}") from exc
        raws = [batch.uuids[i : i + 16] for i in range(0, len(batch.uuids), 16)]
        per: dict[str, tuple[str, int, int, int]] = {}
        for seq, topic, d in zip(batch.sequences(), topics, data, strict=True):
            old = per.get(topic)
            per[topic] = (
                (topic, seq, 1, len(d))
                if old is None
                else (topic, seq, old[2] + 1, old[3] + len(d))
            )
        self._index.before_append(self._last)
        self._write(batch, list(per.values()), raws, merge=True)

    #: A replica's high watermark for its readers (:class:`SqliteEventLogReader`).
    visible: Callable[[], int] | None = None

    def reader(self) -> SqliteEventLogReader:
        return SqliteEventLogReader(self.path, visible=self.visible)

    # ------------------------------------------------------------ replication
    def epochs(self) -> tuple[tuple[int, int], ...]:
        """The replica's epoch history: ``(epoch, first_seq)`` ascending (ADR 0009)."""
        return replica_log.read_epochs(self._conn)

    def set_epochs(self, entries: tuple[tuple[int, int], ...]) -> None:
        with self._transaction("epoch history"):
            replica_log.write_epochs(self._conn, entries)

    def truncate_after(self, seq: int) -> int:
        """Delete every event after ``seq``: the tail a deposed leader wrote, which the
        group's leader never had. Returns how many went.

        Raises:
            StoreError: ``seq`` is inside a stored batch, or the log is damaged.
        """
        with self._transaction("truncation") as conn:
            count, uuids = replica_log.truncate_after(conn, seq, self._last)
        if count:
            self._index.forget(uuids)
            self._events -= count
            self._last = max_sequence(self._conn)
        return count

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
            # Oldest first, stopping at the first young batch: the old batches left are
            # those holding some topic's latest event.
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
                trim = _Trim(
                    conn, pos, below, age_cut, excess, min(_RETENTION_CHUNK, budget - deleted)
                )
                trim.run()
            self._events -= len(trim.forgotten)
            self._index.forget(trim.forgotten)
            deleted += len(trim.forgotten)
            if trim.done:
                break
            pos = trim.pos
        return deleted

    def close(self) -> None:
        self._conn.close()


@dataclass
class _Trim:
    """One retention transaction: delete the candidates of the oldest batches, in
    sequence order, until ``limit`` are gone or the first one that must stay.

    A candidate is an event above ``pos`` and below ``below`` that is not its topic's
    latest; it goes unless it is at or above ``age_cut`` (young) once ``excess`` are gone.
    A batch that keeps some events is written again with those alone (its sequences are
    then listed, see :class:`StoredBatch`).
    """

    conn: sqlite3.Connection
    pos: int
    below: int
    age_cut: int
    excess: int
    limit: int
    forgotten: list[bytes] = field(default_factory=list)  # uuids of the deleted events
    done: bool = False

    def run(self) -> None:
        for batch in batches_from(self.conn, self.pos):
            if batch.first_seq >= self.below or self.done:
                self.done = True
                return
            self._trim(batch)
            if len(self.forgotten) >= self.limit:
                return
        self.done = True

    def _trim(self, batch: StoredBatch) -> None:
        topics, producers, stamps, data = batch.columns()
        latest = _latest_of(self.conn, set(topics))
        keep: list[int] = []
        per: dict[str, list[int]] = {}
        for i, seq in enumerate(batch.sequences()):
            if self.done or len(self.forgotten) >= self.limit:
                keep.append(i)
                continue
            if seq <= self.pos or latest.get(topics[i]) == seq:
                keep.append(i)
                continue
            if seq >= self.below or (seq >= self.age_cut and len(self.forgotten) >= self.excess):
                self.done = True
                keep.append(i)
                continue
            self.forgotten.append(batch.uuids[16 * i : 16 * i + 16])
            agg = per.setdefault(topics[i], [0, 0])
            agg[0] += 1
            agg[1] += len(data[i])
            self.pos = seq
        if len(keep) == batch.count:
            return
        self.conn.execute("DELETE FROM batches WHERE first_seq = ?", (batch.first_seq,))
        if keep:
            seqs = batch.sequences()
            rest = batchlog.encode(
                [seqs[i] for i in keep],
                batch.received,
                b"".join(batch.uuids[16 * i : 16 * i + 16] for i in keep),
                (
                    [topics[i] for i in keep],
                    [producers[i] for i in keep],
                    [stamps[i] for i in keep],
                    [data[i] for i in keep],
                ),
            )
            self.conn.execute(_INSERT_BATCH, _row(rest))
        self.conn.executemany(
            "UPDATE topics SET count = count - ?, bytes = bytes - ? WHERE topic = ?",
            [(n, b, t) for t, (n, b) in per.items()],
        )
        gone = batch.count - len(keep)
        self.conn.execute("UPDATE meta SET value = value - ? WHERE key = 'events'", (gone,))


def _latest_of(conn: sqlite3.Connection, topics: set[str]) -> dict[str, int]:
    """topic -> its latest sequence."""
    names = list(topics)
    out: dict[str, int] = {}
    for i in range(0, len(names), 500):
        chunk = names[i : i + 500]
        sql = f"SELECT topic, last_seq FROM topics WHERE topic IN ({','.join('?' * len(chunk))})"
        out.update(conn.execute(sql, chunk).fetchall())
    return out
