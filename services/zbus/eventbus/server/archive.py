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

The archive is in three modules by role: the format's pure helpers (names, the mark,
timestamps, tables per date) are in :mod:`zbus.eventbus.server.archive_files`, the
writer in :mod:`zbus.eventbus.server.archive_writer`, and the thread is this module,
which also re-exports their names.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from zbus.common.archive_schema import ARCHIVE_SCHEMA
from zbus.common.clock import Clock
from zbus.common.rejects import LogLimiter
from zbus.eventbus.server.archive_files import (
    MARK_FILE,
    MARK_VERSION,
    ArchiveError,
    decode_mark,
    encode_mark,
    open_archive,
    parse_part_name,
    parse_timestamp,
    part_name,
    partition_dir,
    redact,
    split_by_day,
    timestamps,
)
from zbus.eventbus.server.archive_writer import (
    BUFFER_BYTES,
    PAGE_EVENTS,
    ROW_GROUP_ROWS,
    ArchiveWriter,
    FlushResult,
)
from zbus.eventbus.server.metrics import BusMetrics

__all__ = [
    "ARCHIVE_SCHEMA",
    "BUFFER_BYTES",
    "MARK_FILE",
    "MARK_VERSION",
    "PAGE_EVENTS",
    "POLL_SECONDS",
    "ROW_GROUP_ROWS",
    "ArchiveError",
    "ArchiveTarget",
    "ArchiveWriter",
    "Archiver",
    "FlushResult",
    "decode_mark",
    "encode_mark",
    "flush_due",
    "open_archive",
    "parse_part_name",
    "parse_timestamp",
    "part_name",
    "partition_dir",
    "redact",
    "split_by_day",
    "timestamps",
]

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0  # how often the thread looks whether archive_batch events wait


def flush_due(*, now: float, due: float, pending: int, batch: int, failing: bool) -> bool:
    """Whether to flush: the interval is up, or ``batch`` events wait (not while the
    last flush failed: a failing archive is retried once per interval)."""
    return now >= due or (not failing and pending >= batch)


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
