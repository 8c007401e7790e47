"""The archive's files: their names and partitions, the mark, and events as Arrow tables.

Pure helpers, apart from the writer (:mod:`zbus.eventbus.server.archive_writer`) and the
thread (:mod:`zbus.eventbus.server.archive`) because they are the archive's format: what
a name or a mark means and how a producer's timestamp becomes a row's, with no I/O but
opening a filesystem object. The layout is described in :mod:`zbus.eventbus.server.archive`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from zbus.common.archive_schema import ARCHIVE_SCHEMA
from zbus.eventbus.core.log import Event

_TS = ARCHIVE_SCHEMA.field("ts").type
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MIN_US = (datetime(1, 1, 1, tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)
_MAX_US = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)
MARK_FILE = "_zbus_archive.json"
MARK_VERSION = 1

_PART = re.compile(r"part-(\d{20})-(\d{20})\.parquet")
# A part being written: renamed into place once whole, removed at start if left over.
TEMP_PREFIX = ".part-"
TEMP_SUFFIX = ".tmp"


class ArchiveError(Exception):
    """The archive cannot be read or written; the message says where and why."""


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
