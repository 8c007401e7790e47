"""The archive's writer: copies the log into Parquet files, then moves the mark.

Apart from the thread that schedules it (:mod:`zbus.eventbus.server.archive`) because
the writer also runs alone in the archive's child process
(:mod:`zbus.eventbus.server.archive_process`), which needs neither the thread nor the
bus's metrics. The layout and the order of a flush that makes it crash safe are
described in :mod:`zbus.eventbus.server.archive`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid as uuidlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from zbus.common.archive_schema import ARCHIVE_SCHEMA
from zbus.common.sqlite import StoreError
from zbus.eventbus.server.archive_files import (
    MARK_FILE,
    TEMP_PREFIX,
    TEMP_SUFFIX,
    ArchiveError,
    decode_mark,
    encode_mark,
    open_archive,
    parse_part_name,
    part_name,
    partition_dir,
    redact,
    split_by_day,
)
from zbus.eventbus.server.reader import SqliteEventLogReader

# The archive logs under its public module's name, whichever part logs.
log = logging.getLogger("zbus.eventbus.server.archive")

PAGE_EVENTS = 2_000  # events per read of the log
ROW_GROUP_ROWS = 65_536  # rows a date buffers before they become a row group
BUFFER_BYTES = 32 * 1024 * 1024  # buffered rows of all dates before they are written


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
        self.temp = f"{self.dir}/{TEMP_PREFIX}{uuidlib.uuid4().hex}{TEMP_SUFFIX}"
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
        self._reader: SqliteEventLogReader | None = None
        self._recovered = False

    def _where(self) -> tuple[pafs.FileSystem, str]:
        if self._fs is None:
            self._fs, self._root = open_archive(self.uri)
        return self._fs, self._root

    def _log(self) -> SqliteEventLogReader:
        if self._reader is None:
            self._reader = SqliteEventLogReader(self.log_path)
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
            if stale or (name.startswith(TEMP_PREFIX) and name.endswith(TEMP_SUFFIX)):
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
