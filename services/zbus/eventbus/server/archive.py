"""The event archive: the log copied, as it grows, into Parquet files that Spark reads.

Layout under the archive root (``<data_dir>/archive``, or any URI ``pyarrow.fs`` opens)::

    _zbus_archive.json                                         the high-water mark
    date=YYYY-MM-DD/part-<first_seq:020d>-<last_seq:020d>.parquet

A flush writes one file per UTC date of the producers' timestamps, its rows in sequence
order, in the fixed :data:`ARCHIVE_SCHEMA`; ``date`` is in the directory name only (Hive
partitioning). The mark's ``archived_through`` is the one record of progress: every event
up to it is in a file and none above it is. File names are not trusted for that: a
compaction job may rewrite the files under other names.

Crash safety comes from the order of a flush: (1) each file is written under a hidden
temporary name (``.part-*.tmp``; Spark and pyarrow skip names starting with ``.`` or
``_``) and renamed into place, then (2) the mark is written the same way. A crash
between the two leaves files whose first sequence is above the mark; recovery (at start,
and after a failed flush) deletes them and the next flush writes them again, so nothing
is archived twice or skipped. While the archive is on, retention keeps every event above
the mark (:meth:`SqliteEventLog.hold_retention`).

:class:`ArchiveWriter` is the blocking file work; :class:`Archiver` runs it in a thread
of its own, with its own read connection to the log, so publishing never waits for it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import os
import re
import threading
import uuid as uuidlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from zbus.common.archive_schema import ARCHIVE_SCHEMA
from zbus.common.clock import Clock
from zbus.common.rejects import LogLimiter
from zbus.eventbus.server.metrics import BusMetrics
from zbus.eventbus.server.store import Event, SqliteLogReader, StoreError

log = logging.getLogger(__name__)

_TS = ARCHIVE_SCHEMA.field("ts").type
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MIN_US = (datetime(1, 1, 1, tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)
_MAX_US = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)
MARK_FILE = "_zbus_archive.json"
MARK_VERSION = 1
PAGE_EVENTS = 2_000  # events per read of the log
ROW_GROUP_ROWS = 65_536  # rows a date buffers before they become a row group
BUFFER_BYTES = 32 * 1024 * 1024  # buffered rows of all dates before they are written
POLL_SECONDS = 1.0  # how often the thread looks whether archive_batch events wait

_PART = re.compile(r"part-(\d{20})-(\d{20})\.parquet")
_TEMP_PREFIX = ".part-"
_TEMP_SUFFIX = ".tmp"


class ArchiveError(Exception):
    """The archive cannot be read or written; the message says where and why."""


# ------------------------------------------------------------------ pure helpers
def parse_timestamp(text: str) -> datetime | None:
    """A producer's ISO-8601 timestamp in UTC (text without an offset is taken as UTC).

    None when the text does not parse or its UTC time is outside years 1..9999.
    """
    try:
        ts = datetime.fromisoformat(text)
        return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)
    except (ValueError, OverflowError):
        return None


def part_name(first: int, last: int) -> str:
    """The file name of the events ``first``..``last`` of one date."""
    return f"part-{first:020d}-{last:020d}.parquet"


def parse_part_name(name: str) -> tuple[int, int] | None:
    """``(first, last)`` of a name :func:`part_name` made; None for any other name."""
    m = _PART.fullmatch(name)
    return None if m is None else (int(m[1]), int(m[2]))


def partition_dir(day: str) -> str:
    """The Hive-style directory of a UTC date given as ``YYYY-MM-DD``."""
    return f"date={day}"


def timestamps(texts: Sequence[str], fallback: datetime) -> tuple[pa.Array, int]:
    """The texts as UTC timestamps, and how many did not parse (those get ``fallback``).

    The common case (every text has a zone offset) is one vectorised cast; otherwise each
    text goes through :func:`parse_timestamp`, which both paths agree with for ISO-8601
    text with an offset.
    """
    try:
        ts = pc.cast(pa.array(texts, pa.string()), _TS)
        lo, hi = (v.as_py() for v in pc.min_max(ts.cast(pa.int64())).values())
        if lo is None or (lo >= _MIN_US and hi <= _MAX_US):
            return ts, 0
    except pa.ArrowInvalid:
        pass
    parsed = [parse_timestamp(t) for t in texts]
    bad = parsed.count(None)
    return pa.array([fallback if t is None else t for t in parsed], _TS), bad


def split_by_day(events: Sequence[Event], fallback: datetime) -> tuple[dict[str, pa.Table], int]:
    """The events as one table per UTC date (``YYYY-MM-DD``), rows in the given order, and
    how many timestamps did not parse (those events get ``fallback``, the flush's time)."""
    ts, bad = timestamps([e.ts for e in events], fallback)
    table = pa.Table.from_arrays(
        [
            pa.array([e.seq for e in events], pa.int64()),
            pa.array([e.topic for e in events], pa.string()),
            pa.array([e.producer for e in events], pa.string()),
            ts,
            pa.array([e.uuid for e in events], pa.string()),
            pa.array([e.data for e in events], pa.binary()),
        ],
        schema=ARCHIVE_SCHEMA,
    )
    days = pc.cast(ts, pa.date32())  # the UTC date: the timestamps are in UTC
    distinct = pc.unique(days).to_pylist()
    if len(distinct) == 1:
        return {distinct[0].isoformat(): table}, bad
    return {d.isoformat(): table.filter(pc.equal(days, d)) for d in distinct}, bad


def encode_mark(archived_through: int, updated: datetime) -> bytes:
    """The mark file's content."""
    return json.dumps(
        {
            "version": MARK_VERSION,
            "archived_through": archived_through,
            "updated": updated.astimezone(UTC).isoformat(timespec="milliseconds"),
        },
        indent=1,
    ).encode()


def decode_mark(raw: bytes) -> int:
    """``archived_through`` of a mark file.

    Raises:
        ArchiveError: not a mark this version of the bus writes.
    """
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise ArchiveError(f"the archive mark is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("version") != MARK_VERSION:
        raise ArchiveError(f"the archive mark is not version {MARK_VERSION}")
    mark = doc.get("archived_through")
    if not isinstance(mark, int) or isinstance(mark, bool) or mark < 0:
        raise ArchiveError("the archive mark has no valid archived_through")
    return mark


def flush_due(*, now: float, due: float, pending: int, batch: int, failing: bool) -> bool:
    """Whether to flush: the interval is up, or ``batch`` events wait (not while the
    last flush failed: a failing archive is retried once per interval)."""
    return now >= due or (not failing and pending >= batch)


def redact(uri: str) -> str:
    """The URI without credentials (``s3://key:secret@bucket`` -> ``s3://***@bucket``)."""
    parts = urlsplit(uri)
    if "://" not in uri or "@" not in parts.netloc:
        return uri
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def open_archive(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and root path of an archive: a local path (relative to the working
    directory), or a URI ``pyarrow.fs.FileSystem.from_uri`` understands."""
    if "://" not in uri:
        return pafs.LocalFileSystem(), Path(uri).absolute().as_posix()
    fs, root = pafs.FileSystem.from_uri(uri)
    return fs, root.rstrip("/")


# ------------------------------------------------------------------- the writer
def _sync(fs: pafs.FileSystem, path: str) -> None:
    """fsync a local file or directory, so that a power cut cannot leave the mark ahead
    of the files it counts. Object stores need nothing: a closed upload is stored."""
    if isinstance(fs, pafs.LocalFileSystem):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass(frozen=True, slots=True)
class FlushResult:
    archived_through: int
    events: int
    files: int
    bad_timestamps: int


class _DayFile:
    """One date's file of a flush: rows buffered, then written to a hidden temporary file
    row group by row group, and renamed into place by :meth:`finish`."""

    def __init__(self, fs: pafs.FileSystem, root: str, day: str) -> None:
        self.fs = fs
        self.dir = f"{root}/{partition_dir(day)}"
        self.temp = f"{self.dir}/{_TEMP_PREFIX}{uuidlib.uuid4().hex}{_TEMP_SUFFIX}"
        self.first = self.last = 0  # 0: no row yet (sequences start at 1)
        self.buffered: list[pa.Table] = []
        self.rows = 0
        self.nbytes = 0
        self._writer: pq.ParquetWriter | None = None

    def add(self, table: pa.Table) -> None:
        if not self.first:
            self.first = table["seq"][0].as_py()
        self.last = table["seq"][-1].as_py()
        self.buffered.append(table)
        self.rows += table.num_rows
        self.nbytes += table.nbytes
        if self.rows >= ROW_GROUP_ROWS:
            self.write()

    def write(self) -> None:
        if not self.buffered:
            return
        if self._writer is None:
            self.fs.create_dir(self.dir, recursive=True)
            self._writer = pq.ParquetWriter(
                self.temp,
                ARCHIVE_SCHEMA,
                filesystem=self.fs,
                compression="zstd",
                use_dictionary=["topic", "producer"],
                sorting_columns=[pq.SortingColumn(0)],  # rows are in sequence order
            )
        self._writer.write_table(pa.concat_tables(self.buffered), row_group_size=ROW_GROUP_ROWS)
        self.buffered, self.rows, self.nbytes = [], 0, 0

    def finish(self) -> None:
        self.write()
        assert self._writer is not None
        self._writer.close()
        self._writer = None
        _sync(self.fs, self.temp)
        self.fs.move(self.temp, f"{self.dir}/{part_name(self.first, self.last)}")
        _sync(self.fs, self.dir)

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            if self._writer is not None:
                self._writer.close()
        with contextlib.suppress(Exception):
            self.fs.delete_file(self.temp)


class ArchiveWriter:
    """Copies the log into the archive. Blocking code, for one thread at a time; the log
    reader is opened in the thread that first flushes."""

    def __init__(
        self, uri: str, log_path: Path, *, batch: int = 100_000, page: int = PAGE_EVENTS
    ) -> None:
        self.uri = uri
        self.log_path = log_path
        self.batch = max(1, batch)
        self.page = max(1, page)
        #: Every event up to this sequence is archived; None until the mark was read.
        self.archived_through: int | None = None
        self._fs: pafs.FileSystem | None = None
        self._root = ""
        self._reader: SqliteLogReader | None = None
        self._recovered = False

    def _where(self) -> tuple[pafs.FileSystem, str]:
        if self._fs is None:
            self._fs, self._root = open_archive(self.uri)
        return self._fs, self._root

    def _log(self) -> SqliteLogReader:
        if self._reader is None:
            self._reader = SqliteLogReader(self.log_path)
        return self._reader

    def recover(self, now: datetime) -> int:
        """Read the mark and delete what an interrupted flush left above it.

        A new archive (no mark yet) must be an empty directory; it gets a mark of 0,
        stamped ``now``.

        Raises:
            ArchiveError: the archive cannot be read, is not a zbus archive, or is ahead
                of the log (the archive of another log).
        """
        try:
            return self._recover(now)
        except (OSError, pa.ArrowException, StoreError) as exc:
            raise ArchiveError(f"{redact(self.uri)}: {exc}") from exc

    def _recover(self, now: datetime) -> int:
        self._recovered = False
        fs, root = self._where()
        fs.create_dir(root, recursive=True)
        files = [
            info
            for info in fs.get_file_info(pafs.FileSelector(root, recursive=True))
            if info.type == pafs.FileType.File
        ]
        try:
            with fs.open_input_stream(f"{root}/{MARK_FILE}") as stream:
                raw: bytes | None = stream.read()
        except FileNotFoundError:
            raw = None
        if raw is not None:
            try:
                mark = decode_mark(raw)
            except ArchiveError as exc:
                raise ArchiveError(f"{redact(self.uri)}/{MARK_FILE}: {exc}") from None
        else:
            data = [i.path for i in files if not i.base_name.startswith(("_", "."))]
            if data:
                raise ArchiveError(
                    f"{redact(self.uri)} holds files but no {MARK_FILE} (e.g. {data[0]}): "
                    "restore the mark or archive to an empty directory"
                ) from None
            mark = 0
            self._write_mark(fs, root, mark, now)
        last = self._log().stats().last_seq
        if mark > last:
            raise ArchiveError(
                f"{redact(self.uri)} is archived through {mark}, beyond the log's last "
                f"sequence {last}: it is another log's archive"
            )
        for info in files:
            parent, _, name = info.path.rpartition("/")
            head, _, partition = parent.rpartition("/")
            if head != root or not partition.startswith("date="):
                continue
            span = parse_part_name(name)
            stale = span is not None and span[0] > mark
            if stale or (name.startswith(_TEMP_PREFIX) and name.endswith(_TEMP_SUFFIX)):
                # Written by a flush that did not get to write its mark.
                log.warning("archive: removing an unrecorded file", extra={"file": info.path})
                fs.delete_file(info.path)
        self.archived_through = mark
        self._recovered = True
        return mark

    def _write_mark(self, fs: pafs.FileSystem, root: str, mark: int, now: datetime) -> None:
        temp = f"{root}/{MARK_FILE}.tmp"
        with fs.open_output_stream(temp) as stream:
            stream.write(encode_mark(mark, now))
        _sync(fs, temp)
        fs.move(temp, f"{root}/{MARK_FILE}")
        _sync(fs, root)

    def flush(self, now: datetime) -> FlushResult:
        """Archive up to ``batch`` events after the mark: a file per date, then the mark.

        ``now`` stands in for timestamps that do not parse. After a failure nothing is
        lost: the next call recovers first and writes the same events again.

        Raises:
            ArchiveError: reading the log or writing the archive failed.
        """
        try:
            if not self._recovered:
                self._recover(now)
            return self._flush(now)
        except (OSError, pa.ArrowException, StoreError) as exc:
            raise ArchiveError(f"{redact(self.uri)}: {exc}") from exc

    def _flush(self, now: datetime) -> FlushResult:
        fs, root = self._where()
        mark = after = self.archived_through or 0
        reader = self._log()
        files: dict[str, _DayFile] = {}
        taken = bad = 0
        try:
            while taken < self.batch:
                limit = min(self.page, self.batch - taken)
                events = reader.replay(("",), after, limit)
                if not events:
                    break
                tables, n_bad = split_by_day(events, now)
                bad += n_bad
                for day, table in tables.items():
                    day_file = files.get(day)
                    if day_file is None:
                        day_file = files[day] = _DayFile(fs, root, day)
                    day_file.add(table)
                # Bounded memory, whatever the number of dates in a flush.
                if sum(f.nbytes for f in files.values()) >= BUFFER_BYTES:
                    for f in files.values():
                        f.write()
                after = events[-1].seq
                taken += len(events)
                if len(events) < limit:
                    break
            if not taken:
                return FlushResult(mark, 0, 0, 0)
            for f in files.values():
                f.finish()
            _sync(fs, root)  # the entries of new date directories, before the mark
            self._write_mark(fs, root, after, now)
        except BaseException:
            # Files above the mark may be in place: the next flush recovers first.
            self._recovered = False
            for f in files.values():
                f.abort()
            raise
        self.archived_through = after
        return FlushResult(after, taken, len(files), bad)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


# ------------------------------------------------------------------- the thread
class ArchiveTarget(Protocol):
    """What the :class:`Archiver` drives: an :class:`ArchiveWriter`, or the same calls
    run in a child process (:class:`~zbus.eventbus.server.archive_process.ArchiveProcess`)."""

    uri: str
    archived_through: int | None

    def flush(self, now: datetime) -> FlushResult: ...

    def close(self) -> None: ...


class Archiver(threading.Thread):
    """Runs an :class:`ArchiveWriter` every ``interval`` seconds, or as soon as ``batch``
    events wait (looked at every ``poll`` seconds), until stopped; then flushes once more.
    Errors are logged (at most one line a second), counted and retried the next interval;
    they never stop the thread. ``on_mark`` gets every new mark (the bus holds retention
    there)."""

    def __init__(
        self,
        writer: ArchiveTarget,
        *,
        interval: float,
        batch: int,
        metrics: BusMetrics,
        clock: Clock,
        last_sequence: Callable[[], int],
        on_mark: Callable[[int], None] | None = None,
        poll: float = POLL_SECONDS,
    ) -> None:
        super().__init__(name="eventbus-archive", daemon=True)
        self.writer = writer
        self.interval = interval
        self.batch = batch
        self.poll = poll
        self.metrics = metrics
        self.clock = clock
        self.last_sequence = last_sequence
        self.on_mark = on_mark
        self.files = 0  # written since start
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self.failing = False
        self._reported: int | None = None
        self._limiter = LogLimiter(1)
        self._wake = threading.Event()
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._requests: list[concurrent.futures.Future[int]] = []
        self._closed = False

    @property
    def archived_through(self) -> int | None:
        return self.writer.archived_through

    def lag(self) -> int:
        """Events in the log above the mark."""
        return max(0, self.last_sequence() - (self.archived_through or 0))

    def status(self) -> dict[str, Any]:
        """The archive's state for the admin API."""
        return {
            "enabled": True,
            "path": redact(self.writer.uri),
            "archived_through": self.archived_through,
            "files": self.files,
            "lag": self.lag(),
            "failing": self.failing,
            "last_error": self.last_error,
            "last_error_at": self.last_error_at,
        }

    def stop(self) -> None:
        """Ask for a last flush and the end of the thread (then join it)."""
        self._halt.set()
        self._wake.set()

    def request_flush(self) -> concurrent.futures.Future[int]:
        """Archive everything logged so far, now; the future gets the new mark."""
        future: concurrent.futures.Future[int] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                future.set_exception(ArchiveError("the archive is stopped"))
                return future
            self._requests.append(future)
        self._wake.set()
        return future

    def _take_requests(self, *, close: bool = False) -> list[concurrent.futures.Future[int]]:
        with self._lock:
            requests, self._requests = self._requests, []
            self._closed = self._closed or close
        return requests

    def run(self) -> None:
        try:
            due = self.clock.monotonic()  # at once: recovery, and what was logged meanwhile
            while not self._halt.is_set():
                now = self.clock.monotonic()
                requests = self._take_requests()
                lag = self.lag()
                self.metrics.archive_lag.set(lag)
                if requests or flush_due(
                    now=now, due=due, pending=lag, batch=self.batch, failing=self.failing
                ):
                    self.archive_now(requests)
                    due = self.clock.monotonic() + self.interval
                    continue
                self._wake.wait(min(self.poll, due - now))
                self._wake.clear()
            # Stopping: the pipeline has committed its last events; archive them too.
            self.archive_now(self._take_requests(close=True), final=True)
        finally:
            for future in self._take_requests(close=True):
                future.set_exception(ArchiveError("the archive is stopped"))
            self.writer.close()

    def archive_now(
        self, requests: Sequence[concurrent.futures.Future[int]] = (), *, final: bool = False
    ) -> bool:
        """Flush until the log as it is now is archived; False (logged, counted) on error.

        A stop cuts a long catch-up short after the current flush, except for the
        ``final`` one, which goes on until done or until the shutdown deadline.
        """
        try:
            target = self.last_sequence()
            while True:
                result = self.writer.flush(datetime.fromtimestamp(self.clock.time(), UTC))
                self._record(result)
                if not result.events or result.archived_through >= target:
                    break
                if self._halt.is_set() and not final:
                    break
        except Exception as exc:  # whatever goes wrong, the bus goes on; retried later
            self.failing = True
            self.last_error, self.last_error_at = str(exc), self.clock.time()
            self.metrics.archive_errors.inc()
            if self._limiter.allow(self.clock.time()):
                log.error(
                    "archive flush failed; retrying next interval",
                    extra={"path": redact(self.writer.uri), "error": str(exc)},
                )
            for future in requests:
                future.set_exception(ArchiveError(str(exc)))
            return False
        finally:
            self.metrics.archive_lag.set(self.lag())
        self.failing = False
        mark = self.archived_through or 0
        for future in requests:
            future.set_result(mark)
        return True

    def _record(self, result: FlushResult) -> None:
        if result.events:
            self.files += result.files
            self.metrics.archive_events.inc(result.events)
            self.metrics.archive_files.inc(result.files)
            log.debug(
                "archive flushed",
                extra={
                    "events": result.events,
                    "files": result.files,
                    "archived_through": result.archived_through,
                },
            )
        if result.bad_timestamps:
            self.metrics.archive_bad_timestamps.inc(result.bad_timestamps)
        if result.archived_through != self._reported and self.on_mark is not None:
            self.on_mark(result.archived_through)
        self._reported = result.archived_through
