"""The event log's read side: :class:`SqliteEventLogReader` and the queries it runs.

Apart from the writer (:mod:`zbus.eventbus.server.store`) because a reader is a
connection of its own that never writes, used from other threads (snapshots, the admin
API) and from the archive's child process, which needs no writer code. What only reads
use lives here with it: topic prefixes turned into index ranges, stored batches read in
sequence order and decoded into :class:`~zbus.eventbus.core.log.Event`. The schema is the
writer's (see its module docstring).

Reads by sequence (replay, log pages, resume, recent) decode the stored batches that
cover the range, and build events only for the rows whose topic matches. Reads by topic
(snapshots, topic stats) walk the topic index in order and look each latest event up in
its batch; decoded batches are kept in a small cache, so that topics whose latest events
share a batch cost one decode.
"""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import cast

from zbus.common.sqlite import StoreError, connect
from zbus.eventbus.core.batchlog import BatchError, StoredBatch, uuid_texts
from zbus.eventbus.core.flow import row_bytes
from zbus.eventbus.core.log import Event, LogStats, Page, TopicStat, event_from_row

# How errors name the file; the writer says the same.
LOG_WHAT = "event log"
_BATCH_COLUMNS = "first_seq, last_seq, count, received, crc, seqs, uuids, rows"
_CHUNK = 16  # stored batches per query of a sequential read, at most
# ...and about this many bytes of them: a batch of large events is megabytes, and what a
# read holds at once counts in the bus's memory bounds.
_CHUNK_BYTES = 1024 * 1024
# Decoded batches a reader keeps for lookups of topics' latest events, in bytes: the
# batches' stored rows and, for the objects each event becomes, _EVENT_OVERHEAD bytes an
# event. A bound in bytes, not in batches: a batch of large events decodes to megabytes,
# and what a reader holds counts in the bus's memory bounds (docs/protocols/pppp.md).
_CACHE_BYTES = 4 * 1024 * 1024
_EVENT_OVERHEAD = 400
_LOOKUP_CHUNK = 1024  # topics per step of a snapshot walk
SETTLE_SECONDS = 2.0  # a replica's read waits this long for the HWM to pass its end


def batches_from(
    conn: sqlite3.Connection, after: int, *, before: int | None = None, newest_first: bool = False
) -> Iterator[StoredBatch]:
    """The stored batches holding a sequence above ``after`` (and, newest first, below
    ``before``), read a few at a time (up to ``_CHUNK``, about ``_CHUNK_BYTES``): each
    query starts past the last batch read, so rewriting a batch already read (retention)
    never shows it again."""
    chunk = 1  # the first query reads one; the next ones as many as fit _CHUNK_BYTES
    if newest_first:
        bound = MAX_STORED_SEQ if before is None else before
        sql = (
            f"SELECT {_BATCH_COLUMNS} FROM batches WHERE first_seq < ?"
            " ORDER BY first_seq DESC LIMIT ?"
        )
        while True:
            rows = conn.execute(sql, (bound, chunk)).fetchall()
            for row in rows:
                if row[1] <= after:
                    return
                yield StoredBatch(*row)
            if len(rows) < chunk:
                return
            bound = rows[-1][0]
            chunk = _next_chunk(rows)
    row = conn.execute(
        "SELECT first_seq, last_seq FROM batches WHERE first_seq <= ?"
        " ORDER BY first_seq DESC LIMIT 1",
        (_bound(after),),
    ).fetchone()
    # Batches are disjoint ranges: the one holding ``after`` may hold more above it.
    start = row[0] - 1 if row is not None and row[1] > after else after
    sql = f"SELECT {_BATCH_COLUMNS} FROM batches WHERE first_seq > ? ORDER BY first_seq LIMIT ?"
    while True:
        rows = conn.execute(sql, (_bound(start), chunk)).fetchall()
        yield from (StoredBatch(*row) for row in rows)
        if len(rows) < chunk:
            return
        start = rows[-1][1]
        chunk = _next_chunk(rows)


def _next_chunk(rows: list[tuple[object, ...]]) -> int:
    """How many batches the next query reads: about ``_CHUNK_BYTES`` of them, by the size
    of those just read (uuids and rows, the last two columns)."""
    size = sum(len(cast(bytes, r[-1])) + len(cast(bytes, r[-2])) for r in rows) // len(rows)
    return max(1, min(_CHUNK, _CHUNK_BYTES // max(1, size)))


def _matching(
    batch: StoredBatch, after: int, prefixes: tuple[str, ...] | None, newest_first: bool = False
) -> list[Event]:
    """The batch's events above ``after`` whose topic starts with one of the prefixes
    (None: every topic), built for those rows alone."""
    topics, producers, stamps, data = batch.columns()
    seqs = batch.sequences()
    rows: Iterable[int] = range(len(seqs))
    if newest_first:
        rows = reversed(range(len(seqs)))
    picked = [
        i for i in rows if seqs[i] > after and (prefixes is None or topics[i].startswith(prefixes))
    ]
    if len(picked) == len(seqs) and not newest_first:
        uuids = uuid_texts(batch.uuids)
        every = zip(seqs, topics, producers, stamps, uuids, data, strict=True)
        return list(map(event_from_row, every))
    raws = batch.uuids
    texts = uuid_texts(b"".join(raws[16 * i : 16 * i + 16] for i in picked))
    return [
        Event(seqs[i], topics[i], producers[i], stamps[i], text, data[i])
        for i, text in zip(picked, texts, strict=True)
    ]


def _prefixes(subtrees: Sequence[str]) -> tuple[str, ...] | None:
    return None if not subtrees or "" in subtrees else tuple(subtrees)


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
    row = conn.execute("SELECT last_seq FROM batches ORDER BY first_seq DESC LIMIT 1").fetchone()
    return 0 if row is None else cast(int, row[0])


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

    def __init__(
        self, path: Path, *, cache_kib: int = 16_384, visible: Callable[[], int] | None = None
    ) -> None:
        self.path = path
        # A replica's high watermark (ADR 0009): what a snapshot reads must be confirmed
        # by the in-sync replicas first (it waits), and a read in sequence order stops at
        # it; None: every stored event is confirmed.
        self.visible = visible
        self._conn = connect(path, cache_kib, create=False, what=LOG_WHAT)
        self._conn.execute("PRAGMA query_only = ON")
        self._stream_ref: weakref.ref[Iterator[int | Event]] | None = None
        # first_seq -> (last_seq, seq -> event) of recently decoded batches. Safe across
        # transactions: it serves lookups of topics' latest events, which retention
        # never deletes and nothing rewrites.
        self._cache: OrderedDict[int, tuple[int, dict[int, Event], int]] = OrderedDict()
        self._cached_bytes = 0

    def _begin(self) -> None:
        if self._conn.in_transaction:
            raise StoreError("this reader still has a snapshot stream open; finish or close it")
        self._conn.execute("BEGIN")

    @contextlib.contextmanager
    def _read(self) -> Iterator[None]:
        """One read transaction; a damaged batch is reported as a StoreError."""
        self._begin()
        try:
            yield
        except BatchError as exc:
            raise StoreError(f"{self.path}: damaged event log: {exc}") from exc
        finally:
            self._conn.execute("COMMIT")

    def _settled(self) -> int:
        """The log's last sequence in this read transaction, once the high watermark
        has passed it (a replica's reads never show what a failover could undo).

        Raises:
            StoreError: the in-sync replicas did not confirm it within ``SETTLE_SECONDS``.
        """
        sequence = max_sequence(self._conn)
        visible = self.visible
        if visible is None or visible() >= sequence:
            return sequence
        deadline = time.monotonic() + SETTLE_SECONDS
        while visible() < sequence:
            if time.monotonic() > deadline:
                raise StoreError(
                    f"events up to sequence {sequence} are not confirmed by the in-sync "
                    "replicas yet; try again"
                )
            time.sleep(0.002)
        return sequence

    def _lookup(self, seqs: list[int]) -> dict[int, Event]:
        """The events at these sequences (each some topic's latest)."""
        out: dict[int, Event] = {}
        cache = self._cache
        last, events = -1, cast(dict[int, Event], {})  # the batch of the previous seq
        for seq in sorted(seqs):
            if seq > last:
                for first, (held_last, held, _) in cache.items():
                    if first <= seq <= held_last:
                        last, events = held_last, held
                        break
                else:
                    last, events = self._decode_at(seq)
            event = events.get(seq)
            if event is not None:
                out[seq] = event
        return out

    def _decode_at(self, seq: int) -> tuple[int, dict[int, Event]]:
        """(last sequence, seq -> event) of the batch holding ``seq``, cached."""
        row = self._conn.execute(
            f"SELECT {_BATCH_COLUMNS} FROM batches WHERE first_seq <= ?"
            " ORDER BY first_seq DESC LIMIT 1",
            (seq,),
        ).fetchone()
        if row is None:
            return -1, {}
        batch = StoredBatch(*row)
        events = {e.seq: e for e in batch.events()}
        size = len(batch.rows) + len(batch.uuids) + _EVENT_OVERHEAD * batch.count
        cache = self._cache
        replaced = cache.pop(batch.first_seq, None)
        if replaced is not None:
            self._cached_bytes -= replaced[2]
        cache[batch.first_seq] = (batch.last_seq, events, size)
        self._cached_bytes += size
        # The batch just decoded stays, however large: the lookup in progress uses it.
        while self._cached_bytes > _CACHE_BYTES and len(cache) > 1:
            _, (_, _, dropped) = cache.popitem(last=False)
            self._cached_bytes -= dropped
        return batch.last_seq, events

    def _latest(
        self, lo: str, hi: str | None, after: str | None, since: int, limit: int | None = None
    ) -> Iterator[Event]:
        # One query per range: each is an ordered walk of the topic index, and the ranges
        # are disjoint and sorted, so the results come out in topic order.
        where, params = _range_sql("topic", [(lo, hi)], after)
        sql = f"SELECT topic, last_seq FROM topics WHERE {where} AND last_seq > ? ORDER BY topic"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        cur = self._conn.execute(sql, [*params, _bound(since)])
        while rows := cur.fetchmany(_LOOKUP_CHUNK):
            events = self._lookup([seq for _, seq in rows])
            yield from (events[seq] for _, seq in rows if seq in events)

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
        with self._read():
            sequence = self._settled()
            for lo, hi in _ranges(subtrees):
                # One extra row tells whether another page follows.
                for event in self._latest(lo, hi, after, since, limit + 1 - len(events)):
                    if not budget.take(event):
                        break
                    events.append(event)
                if budget.full:
                    break
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
        with self._read():
            yield self._settled()
            for lo, hi in ranges:
                yield from self._latest(lo, hi, None, since)

    def replay(
        self, subtrees: tuple[str, ...], after_seq: int, limit: int, max_bytes: int | None = None
    ) -> list[Event]:
        """Logged events (not only the latest) with seq > after_seq, in sequence order:
        ``limit`` at most, and no more than ``max_bytes`` of them (at least one); up to
        the high watermark on a replica."""
        budget = _Budget(limit, max_bytes)
        events: list[Event] = []
        with self._read():
            for event in self._replay(subtrees, after_seq, self._visible_end()):
                if not budget.take(event):
                    break
                events.append(event)
        return events

    def log_page(
        self, subtrees: tuple[str, ...], after_seq: int, limit: int, max_bytes: int | None = None
    ) -> Page:
        """:meth:`replay` as a page: its ``next`` is the last sequence when more may follow,
        and its ``sequence`` the log's last one (on a replica, the high watermark when
        lower), read in the same transaction (so every matching event up to it is in the
        pages from ``after_seq``)."""
        budget = _Budget(limit, max_bytes)
        events: list[Event] = []
        with self._read():
            sequence = self._visible_end()
            for event in self._replay(subtrees, after_seq, sequence):
                if not budget.take(event):
                    break
                events.append(event)
        return Page(events, str(events[-1].seq) if budget.full else None, sequence)

    def _visible_end(self) -> int:
        """The log's last sequence in this read transaction, or the high watermark when
        that is lower: reads in sequence order stop there rather than wait for it."""
        sequence = max_sequence(self._conn)
        visible = self.visible
        return sequence if visible is None else min(sequence, visible())

    def _replay(
        self, subtrees: tuple[str, ...], after_seq: int, end: int | None = None
    ) -> Iterator[Event]:
        prefixes = _prefixes(subtrees)
        for batch in batches_from(self._conn, after_seq):
            if end is None or batch.last_seq <= end:
                yield from _matching(batch, after_seq, prefixes)
                continue
            for event in _matching(batch, after_seq, prefixes):
                if event.seq > end:
                    return
                yield event
            return

    def resume(self, subtrees: tuple[str, ...], since: int) -> tuple[int, Iterator[Event]]:
        """:meth:`snapshot` for a client resuming after ``since``: every matching event
        above it, in sequence order (not only each topic's latest), in one read
        transaction, read as the stream is consumed."""
        stream = self._resume_stream(subtrees, since)
        sequence = cast(int, next(stream))
        self._stream_ref = weakref.ref(stream)
        return sequence, cast(Iterator[Event], stream)

    def _resume_stream(self, subtrees: tuple[str, ...], since: int) -> Iterator[int | Event]:
        with self._read():
            yield self._settled()
            yield from self._replay(subtrees, since)

    def recent(self, prefix: str, limit: int, after: int = 0) -> list[Event]:
        """The newest events whose topic starts with ``prefix`` and whose sequence is
        above ``after``, newest first. Reads the log backwards from its end, so a rare
        prefix costs a longer walk (never below ``after``)."""
        prefixes = _prefixes((prefix,))
        with self._read():
            found = (
                event
                for batch in batches_from(self._conn, _bound(after), newest_first=True)
                for event in _matching(batch, after, prefixes, newest_first=True)
            )
            return list(itertools.islice(found, max(limit, 0)))

    def topics(self, prefix: str, limit: int, after: str | None = None) -> list[TopicStat]:
        """Topics starting with ``prefix`` in order, from after the topic ``after``."""
        where, params = _range_sql("topic", _ranges((prefix,)), after)
        with self._read():
            rows = self._conn.execute(
                f"SELECT topic, count, bytes, last_seq FROM topics WHERE {where}"
                " ORDER BY topic LIMIT ?",
                [*params, limit],
            ).fetchall()
            # The last event's time (None if retention deleted it, which it never does to
            # a topic's latest; a log copied without it may lack it).
            latest = self._lookup([row[3] for row in rows])
        stats = []
        for topic, count, size, last in rows:
            event = latest.get(last)
            stats.append(TopicStat(topic, count, size, last, None if event is None else event.ts))
        return stats

    def batches(self, after_seq: int, limit: int) -> list[StoredBatch]:
        """Up to ``limit`` stored batches holding sequences above ``after_seq``, as they
        are stored: what a follower appends with
        :meth:`~zbus.eventbus.server.store.SqliteEventLog.append_stored`. The first may
        also hold sequences at or below ``after_seq``."""
        with self._read():
            return list(itertools.islice(batches_from(self._conn, after_seq), max(limit, 0)))

    def stats(self) -> LogStats:
        with self._read():
            row = self._conn.execute(
                "SELECT first_seq FROM batches ORDER BY first_seq LIMIT 1"
            ).fetchone()
            first = 0 if row is None else row[0]
            last = max_sequence(self._conn)
            events = self._conn.execute("SELECT value FROM meta WHERE key = 'events'").fetchone()
            topics = self._conn.execute("SELECT count(*) FROM topics").fetchone()[0]
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
