"""Reading the bus's event archive, and the file system calls compaction needs.

The archive is Parquet under ``<root>/date=YYYY-MM-DD/part-<first>-<last>.parquet`` (Hive
partitioning, one ``date`` column from the directory); entries whose names start with
``_`` or ``.`` are not data (Spark skips them too). Paths are anything Spark reads: file
system calls go through the session's Hadoop ``FileSystem``, so ``s3a://`` or ``hdfs://``
archives work as local ones do.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import reduce
from typing import Any, Final

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    DateType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

__all__ = [
    "ARCHIVE_SCHEMA",
    "EVENT_SCHEMA",
    "MARK",
    "SESSION_CONF",
    "FileEntry",
    "HadoopFiles",
    "is_data_name",
    "local_or_uri",
    "partition_name",
    "read_archive",
    "read_mark",
    "require_session_conf",
]

#: The columns of an archive file.
EVENT_SCHEMA: Final = StructType(
    [
        StructField("seq", LongType()),
        StructField("topic", StringType()),
        StructField("producer", StringType()),
        StructField("ts", TimestampType()),
        StructField("uuid", StringType()),
        StructField("data", BinaryType()),
    ]
)
#: The columns of the archive read as a table: the file's, plus ``date`` from the path.
ARCHIVE_SCHEMA: Final = StructType([*EVENT_SCHEMA.fields, StructField("date", DateType())])

#: Session settings the jobs rely on: timestamps shown and parsed in UTC, and Parquet
#: timestamps written as the archive's (microseconds, not Spark's legacy INT96).
SESSION_CONF: Final = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}
# The producer's timestamp and the day the event was archived under may differ (clock
# skew, late events): pruning by date keeps this much slack on each side.
_DATE_SLACK: Final = timedelta(days=1)


#: The archiver's high-water mark under the archive root (docs/archive.md).
MARK: Final = "_zbus_archive.json"


def read_mark(files: HadoopFiles, root: str) -> int | None:
    """The archiver's ``archived_through``, or ``None`` when the archive has no mark.

    Raises:
        ValueError: a mark this worker cannot read.
    """
    path = f"{root}/{MARK}"
    if not files.exists(path):
        return None
    try:
        doc = json.loads(files.read(path))
    except ValueError:
        doc = None
    mark = doc.get("archived_through") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("version") != 1 or type(mark) is not int:
        raise ValueError(f"{path} is not an archive mark (version 1) this worker reads")
    return mark


def require_session_conf(spark: SparkSession) -> None:
    """Apply :data:`SESSION_CONF` to ``spark`` where it differs (runtime SQL settings)."""
    for key, value in SESSION_CONF.items():
        if spark.conf.get(key, None) != value:
            spark.conf.set(key, value)


def is_data_name(name: str) -> bool:
    """Whether a file or directory name in the archive holds data (not ``_*`` or ``.*``)."""
    return not name.startswith(("_", "."))


def local_or_uri(path: str) -> str:
    """``path`` made absolute when it is a local path; a URI (``scheme://``) as it is."""
    return path if "://" in path or path.startswith("file:") else os.path.abspath(path)


def read_archive(
    spark: SparkSession,
    root: str,
    since: datetime | None = None,
    until: datetime | None = None,
    prefixes: Sequence[str] = (),
) -> DataFrame:
    """The archived events with ``since <= ts < until`` under the topic ``prefixes``.

    Partitions are pruned by date when a bound is given (with a day of slack, since the
    partition is not necessarily the producer's day). A missing or empty archive reads
    as no events. In an archive the bus writes, only events up to its mark count: a file
    above it is what a flush left when the bus stopped between writing the file and
    moving the mark, and the bus deletes and writes it again when it starts.

    Raises:
        ValueError: the archive's mark is there but cannot be read.
    """
    files = HadoopFiles(spark, root)
    if not files.exists(root):
        return spark.createDataFrame([], ARCHIVE_SCHEMA)
    mark = read_mark(files, root)
    frame = spark.read.schema(ARCHIVE_SCHEMA).option("basePath", root).parquet(root)
    conditions: list[Column] = [] if mark is None else [F.col("seq") <= F.lit(mark)]
    if since is not None:
        conditions.append(F.col("date") >= F.lit((since - _DATE_SLACK).date()))
        conditions.append(F.col("ts") >= F.lit(since))
    if until is not None:
        conditions.append(F.col("date") <= F.lit((until + _DATE_SLACK).date()))
        conditions.append(F.col("ts") < F.lit(until))
    if prefixes:
        conditions.append(reduce(Column.__or__, (F.col("topic").startswith(p) for p in prefixes)))
    for condition in conditions:
        frame = frame.filter(condition)
    return frame


def partition_name(day: date) -> str:
    """The directory name of a day's partition: ``date=YYYY-MM-DD``."""
    return f"date={day.isoformat()}"


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One entry of a directory listing."""

    name: str
    path: str
    is_dir: bool
    size: int


class HadoopFiles:
    """File system calls on the Hadoop ``FileSystem`` that holds ``root``.

    Spark's own view of paths (and its credentials and settings), reached through the
    session's JVM; every call blocks, so run it where blocking is allowed (a job thread).
    """

    def __init__(self, spark: SparkSession, root: str) -> None:
        sc = spark.sparkContext
        jvm: Any = sc._jvm
        self._conf: Any = sc._jsc.hadoopConfiguration()
        self._path: Any = jvm.org.apache.hadoop.fs.Path
        self._util: Any = jvm.org.apache.hadoop.fs.FileUtil
        self._io: Any = jvm.org.apache.commons.io.IOUtils
        self._fs: Any = self._path(root).getFileSystem(self._conf)

    def exists(self, path: str) -> bool:
        return bool(self._fs.exists(self._path(path)))

    def list(self, path: str) -> list[FileEntry]:
        """The entries of directory ``path`` (none when it does not exist), by name."""
        if not self.exists(path):
            return []
        entries = [
            FileEntry(
                str(status.getPath().getName()),
                f"{path.rstrip('/')}/{status.getPath().getName()}",
                bool(status.isDirectory()),
                int(status.getLen()),
            )
            for status in self._fs.listStatus(self._path(path))
        ]
        return sorted(entries, key=lambda e: e.name)

    def rename(self, source: str, target: str) -> None:
        """Rename ``source`` to ``target``, which must not exist.

        Raises:
            OSError: the target exists, or the file system refused.
        """
        if self.exists(target):
            raise FileExistsError(f"cannot rename {source} to {target}: the target exists")
        if not self._fs.rename(self._path(source), self._path(target)):
            raise OSError(f"cannot rename {source} to {target}")

    def delete(self, path: str) -> None:
        """Delete ``path`` and everything under it (nothing when it does not exist)."""
        self._fs.delete(self._path(path), True)

    def read(self, path: str) -> bytes:
        """The content of the (small) file ``path``."""
        stream = self._fs.open(self._path(path))
        try:
            return bytes(self._io.toByteArray(stream))
        finally:
            stream.close()

    def write(self, path: str, data: bytes) -> None:
        """Create (or replace) the small file ``path`` with ``data``."""
        stream = self._fs.create(self._path(path), True)
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()

    def copy(self, source: str, target: str) -> None:
        """Copy the file ``source`` to ``target``."""
        fs, src, dst = self._fs, self._path(source), self._path(target)
        if not self._util.copy(fs, src, fs, dst, False, self._conf):
            raise OSError(f"cannot copy {source} to {target}")
