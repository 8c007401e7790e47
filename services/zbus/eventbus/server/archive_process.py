"""The archive's writer in a process of its own.

Reading the log's rows, building Arrow tables and writing Parquet is CPU work that holds
the interpreter lock; in the bus's process it took that lock from the pipeline thread
(publishing ran at 0.59x while the archive flushed). :class:`ArchiveProcess` runs an
:class:`~zbus.eventbus.server.archive.ArchiveWriter` in a spawned child and forwards each
call over a pipe: the :class:`~zbus.eventbus.server.archive.Archiver` thread waits on the
pipe, which holds no lock, while the child does the work.

The child reads the log through its own SQLite connection (WAL lets a reader in another
process see every commit). It is started on the first call, and again by a call that
finds it dead; a call cut short by its death raises
:class:`~zbus.eventbus.server.archive.ArchiveError`, which the archiver counts and retries
(the next flush recovers first, so nothing is lost or written twice). It exits when
asked, or when the bus's end of the pipe closes (the bus exited, even by ``kill -9``).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from zbus.eventbus.server.archive_files import ArchiveError
from zbus.eventbus.server.archive_writer import PAGE_EVENTS, ArchiveWriter, FlushResult

__all__ = ["ArchiveProcess"]

log = logging.getLogger(__name__)

_STOP_SECONDS: Final = 30.0
NICENESS: Final = 10  # the child's scheduling priority, below the bus's


def _serve(
    conn: multiprocessing.connection.Connection,
    uri: str,
    log_path: str,
    batch: int,
    page: int,
    log_level: str,
) -> None:
    """The child: answer ``(operation, args)`` requests until ``close`` or end of pipe."""
    from zbus.common.logs import configure_logging

    configure_logging("eventbus", log_level)
    # Background work: when the cores are busy, publishing goes first and the archive
    # catches up after (retention holds every event it has not archived yet).
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    writer = ArchiveWriter(uri, Path(log_path), batch=batch, page=page)
    try:
        while True:
            try:
                operation, args = conn.recv()
            except (EOFError, OSError):
                return  # the bus is gone
            if operation == "close":
                conn.send(("ok", None))
                return
            try:
                conn.send(("ok", getattr(writer, operation)(*args)))
            except ArchiveError as exc:
                conn.send(("error", str(exc)))
            except Exception as exc:  # reported to the bus, which counts and retries
                conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        writer.close()


class ArchiveProcess:
    """An :class:`ArchiveWriter` (same calls) whose work runs in a child process."""

    def __init__(
        self,
        uri: str,
        log_path: Path,
        *,
        batch: int = 100_000,
        page: int = PAGE_EVENTS,
        log_level: str = "INFO",
    ) -> None:
        self.uri = uri
        self.log_path = log_path
        self.batch = max(1, batch)
        self.page = max(1, page)
        self.log_level = log_level
        #: Every event up to this sequence is archived; None until the mark was read.
        self.archived_through: int | None = None
        self._ctx = multiprocessing.get_context("spawn")  # no fork of a threaded process
        self._proc: Any = None
        self._conn: multiprocessing.connection.Connection | None = None

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else int(self._proc.pid)

    def _start(self) -> multiprocessing.connection.Connection:
        ours, theirs = self._ctx.Pipe()
        proc = self._ctx.Process(
            target=_serve,
            args=(theirs, self.uri, str(self.log_path), self.batch, self.page, self.log_level),
            name="eventbus-archive",
            daemon=True,
        )
        proc.start()
        theirs.close()
        self._proc, self._conn = proc, ours
        return ours

    def _call(self, operation: str, *args: Any) -> Any:
        conn = self._conn
        if conn is None or self._proc is None or not self._proc.is_alive():
            self._end(kill=True)
            conn = self._start()
        try:
            conn.send((operation, args))
            kind, value = conn.recv()
        except (EOFError, OSError) as exc:
            self._end(kill=True)
            raise ArchiveError(f"the archive process stopped ({exc or 'no answer'})") from None
        if kind == "error":
            raise ArchiveError(str(value))
        return value

    def recover(self, now: datetime) -> int:
        """As :meth:`ArchiveWriter.recover`, in the child."""
        mark: int = self._call("recover", now)
        self.archived_through = mark
        return mark

    def flush(self, now: datetime) -> FlushResult:
        """As :meth:`ArchiveWriter.flush`, in the child."""
        result: FlushResult = self._call("flush", now)
        self.archived_through = result.archived_through
        return result

    def close(self) -> None:
        """Ask the child to finish and wait for it (then kill it if it would not)."""
        if self._conn is not None and self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send(("close", ()))
                if self._conn.poll(_STOP_SECONDS):
                    self._conn.recv()
            except (EOFError, OSError):
                pass
        self._end(kill=False)

    def _end(self, *, kill: bool) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            conn.close()
        if proc is not None:
            proc.join(0 if kill else _STOP_SECONDS)
            if proc.is_alive():
                proc.kill()
                proc.join()
