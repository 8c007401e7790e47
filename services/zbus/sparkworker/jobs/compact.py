"""``compact``: rewrite an archive partition's many small files as a few large ones.

A partition ``date=X`` is rewritten into ``_compact-date=X`` (Spark skips ``_`` entries,
so readers never see it), sorted by ``seq`` and cut into ``ceil(size / target)`` files
named as the archiver names them, ``part-<first seq>-<last seq>.parquet``, with a
``_zbus_compaction.json`` marker. Then the directories are swapped: ``date=X`` ->
``_old-date=X``, ``_compact-date=X`` -> ``date=X``, and ``_old-date=X`` is deleted. Each
step is a rename, so a crash leaves one of a few states, which every compact run repairs
first (:func:`recover`):

- ``_old-date=X`` and a ``date=X`` with the marker: the swap finished; the old files go;
- ``_old-date=X`` and a ``date=X`` without it: the archiver wrote a late event into a
  new ``date=X`` mid-swap; the old files are moved in beside it;
- ``_old-date=X`` alone: the swap stopped half-way; the old files go back;
- ``_compact-date=X`` left over: an unfinished rewrite; it is deleted.

The archiver's rules (docs/archive.md) are kept: only files wholly at or below its mark
(``archived_through`` in ``_zbus_archive.json``) are rewritten, so no output holds an
event the archiver may write again; a partition with files above the mark, or with a file
being written (``.part-*.tmp``), is left alone. The mark itself, and every entry of the
archive root other than ``date=*``, ``_old-date=*`` and ``_compact-date=*``, is never
touched; ``_``-files inside a partition are copied into its new directory. Only closed
partitions (before today, UTC) are compacted, and one whose files changed while it was
rewritten is left as it is. One compaction runs at a time per archive in a process; run
compaction from one worker only (e.g. a schedule on one queue).
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Any, Final

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from zbus.sparkworker.archive import (
    EVENT_SCHEMA,
    MARK,
    FileEntry,
    HadoopFiles,
    is_data_name,
    local_or_uri,
    partition_name,
    read_mark,
    require_session_conf,
)
from zbus.sparkworker.errors import ParamError, SparkWorkerError
from zbus.sparkworker.params import (
    check_params,
    optional,
    parse_date,
    parse_positive,
    parse_text,
    parse_whole,
)

__all__ = ["MARK", "MARKER", "CompactionError", "compact", "read_mark", "recover"]

_PARAMS: Final = ("date", "target_file_mb", "min_files", "archive")
_MB: Final = 1024 * 1024
_PARTITION: Final = re.compile(r"date=(\d{4}-\d{2}-\d{2})")
_OLD: Final = "_old-"
_TEMP: Final = "_compact-"
_FILE: Final = re.compile(r"part-(\d{20})-(\d{20})\.parquet")
MARKER: Final = "_zbus_compaction.json"  # in a rewritten partition until its swap is done
# Files Spark writes beside its output that a partition does not need.
_SPARK_MARKERS: Final = ("_SUCCESS", "._SUCCESS.crc")

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


class CompactionError(SparkWorkerError):
    """A rewrite that does not match its original (nothing was swapped), or an archive
    mark this worker cannot read (nothing was done)."""


def _lock(root: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(local_or_uri(root).rstrip("/"), threading.Lock())


def _merge(files: HadoopFiles, source: str, target: str) -> None:
    """Move what ``source`` holds into ``target`` (names already there win), then drop it."""
    present = {e.name for e in files.list(target)}
    for entry in files.list(source):
        # A checksum file moves with its data file, so it may be gone already.
        if entry.name not in present and files.exists(entry.path):
            files.rename(entry.path, f"{target}/{entry.name}")
    files.delete(source)


def recover(files: HadoopFiles, root: str) -> list[dict[str, str]]:
    """Repair what an interrupted compaction left under ``root``; returns what was done."""
    done: list[dict[str, str]] = []
    entries = {e.name: e for e in files.list(root) if e.is_dir}
    for name in sorted(entries):
        if not (name.startswith(_OLD) and _PARTITION.fullmatch(name.removeprefix(_OLD))):
            continue
        partition = name.removeprefix(_OLD)
        old, part = f"{root}/{name}", f"{root}/{partition}"
        if partition not in entries:
            files.rename(old, part)
            action = "restored the original files"
        elif files.exists(f"{part}/{MARKER}"):
            files.delete(old)
            files.delete(f"{part}/{MARKER}")
            action = "deleted the replaced files"
        else:
            _merge(files, old, part)
            action = "moved the original files beside the archiver's new ones"
        done.append({"partition": partition, "action": action})
    for name in sorted(entries):
        if name.startswith(_TEMP) and _PARTITION.fullmatch(name.removeprefix(_TEMP)):
            files.delete(f"{root}/{name}")
            done.append({"partition": name.removeprefix(_TEMP), "action": "deleted a rewrite"})
    return done


def _fingerprint(row: Any) -> tuple[int, int]:
    """(rows, sum of seq) of an aggregate row: what a rewrite must keep."""
    return int(row[0]), int(row[1] or 0)


def _data_files(files: HadoopFiles, path: str) -> list[FileEntry]:
    return [e for e in files.list(path) if not e.is_dir and is_data_name(e.name)]


def _keep(entry: FileEntry) -> bool:
    """Whether an entry of a partition must follow it into its new directory: ``_`` files
    other than Spark's and ours (hidden ``.`` files are checksums and unfinished writes)."""
    return (
        not entry.is_dir
        and entry.name.startswith("_")
        and entry.name not in (*_SPARK_MARKERS, MARKER)
    )


def _unready(entries: list[FileEntry], mark: int | None) -> str | None:
    """Why a partition's files must not be rewritten now, if they must not."""
    if any(e.name.startswith(".") and e.name.endswith(".tmp") for e in entries):
        return "a file is being written into it"
    if mark is None:
        return None
    for entry in entries:
        if entry.is_dir or not is_data_name(entry.name):
            continue
        match = _FILE.fullmatch(entry.name)
        if match is None or int(match[2]) > mark:
            return f"{entry.name} is not wholly archived (mark {mark})"
    return None


def _compact_partition(
    spark: SparkSession,
    files: HadoopFiles,
    root: str,
    day: date,
    target_bytes: int,
    min_files: int,
    mark: int | None,
    hook: Callable[[str], None],
) -> dict[str, Any]:
    name = partition_name(day)
    part, temp, old = f"{root}/{name}", f"{root}/{_TEMP}{name}", f"{root}/{_OLD}{name}"
    listing = files.list(part)
    before = [e for e in listing if not e.is_dir and is_data_name(e.name)]
    size = sum(e.size for e in before)
    report: dict[str, Any] = {"partition": name, "files_before": len(before), "bytes_before": size}
    wanted = max(1, math.ceil(size / target_bytes))
    if len(before) < min_files:
        return {**report, "skipped": f"fewer than min_files ({min_files}) files"}
    if wanted >= len(before):
        return {**report, "skipped": f"already {len(before)} files for {wanted} wanted"}
    reason = _unready(listing, mark)
    if reason is not None:
        return {**report, "skipped": reason}

    source = spark.read.schema(EVENT_SCHEMA).parquet(*(e.path for e in before))
    rows, checksum = _fingerprint(source.agg(F.count(F.lit(1)), F.sum("seq")).first())
    if rows == 0:
        return {**report, "rows": 0, "skipped": "no rows"}
    files.delete(temp)
    source.repartitionByRange(wanted, "seq").sortWithinPartitions("seq").write.parquet(temp)
    hook("written")
    ranges = (
        spark.read.schema(EVENT_SCHEMA)
        .parquet(temp)
        .groupBy(F.input_file_name().alias("file"))
        .agg(
            F.min("seq").alias("first"),
            F.max("seq").alias("last"),
            F.count(F.lit(1)).alias("rows"),
            F.sum("seq").alias("checksum"),
        )
        .collect()
    )
    if (sum(int(r["rows"]) for r in ranges), sum(int(r["checksum"] or 0) for r in ranges)) != (
        rows,
        checksum,
    ):
        files.delete(temp)
        raise CompactionError(f"{name}: the rewrite does not have the original's rows; kept")
    for r in ranges:
        spark_name = str(r["file"]).rsplit("/", 1)[1]
        files.rename(
            f"{temp}/{spark_name}", f"{temp}/part-{r['first']:020d}-{r['last']:020d}.parquet"
        )
    for marker in _SPARK_MARKERS:
        files.delete(f"{temp}/{marker}")
    for entry in files.list(part):
        if _keep(entry):
            files.copy(entry.path, f"{temp}/{entry.name}")
    files.write(
        f"{temp}/{MARKER}",
        json.dumps(
            {"partition": name, "replaces": [e.name for e in before], "rows": rows}
        ).encode(),
    )
    if [(e.name, e.size) for e in _data_files(files, part)] != [(e.name, e.size) for e in before]:
        files.delete(temp)
        return {**report, "rows": rows, "skipped": "its files changed while it was rewritten"}

    files.rename(part, old)
    hook("swapping")
    try:
        files.rename(temp, part)
    except FileExistsError:  # the archiver made the partition anew in between
        _merge(files, old, part)
        files.delete(temp)
        return {**report, "rows": rows, "skipped": "the archiver wrote to it during the swap"}
    hook("swapped")
    files.delete(old)
    files.delete(f"{part}/{MARKER}")
    after = _data_files(files, part)
    return {
        **report,
        "rows": rows,
        "files_after": len(after),
        "bytes_after": sum(e.size for e in after),
    }


def _no_hook(step: str) -> None:
    pass


def compact(
    spark: SparkSession,
    params: dict[str, Any],
    *,
    archive: str,
    hook: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Rewrite archive partitions into fewer files, with the same rows.

    Params: ``date`` (``YYYY-MM-DD``: that partition; default: every partition before
    today, UTC), ``target_file_mb`` (size of a rewritten file; default 128),
    ``min_files`` (partitions with fewer files are left alone; default 2), ``archive``
    (default: the worker's archive path). ``hook(step)`` is called between steps (tests
    use it to stop a run half-way).
    """
    check_params("compact", params, _PARAMS)
    day = optional(params, "date", parse_date)
    target_mb = optional(params, "target_file_mb", parse_positive) or 128.0
    min_files = optional(params, "min_files", parse_whole) or 2
    root = (optional(params, "archive", parse_text) or archive).rstrip("/")
    today = datetime.now(UTC).date()
    if day is not None and day >= today:
        raise ParamError("date", f"only closed partitions (before {today}, UTC) are compacted")
    require_session_conf(spark)  # microsecond timestamps, as the archiver writes them
    files = HadoopFiles(spark, root)
    with _lock(root):
        recovered = recover(files, root)
        try:
            mark = read_mark(files, root)
        except ValueError as exc:
            raise CompactionError(str(exc)) from None
        present = sorted(
            date.fromisoformat(m.group(1))
            for e in files.list(root)
            if e.is_dir and (m := _PARTITION.fullmatch(e.name))
        )
        if day is not None and day not in present:
            raise ParamError("date", f"the archive has no partition {partition_name(day)}")
        days = [day] if day is not None else [d for d in present if d < today]
        reports = [
            _compact_partition(
                spark, files, root, d, int(target_mb * _MB), min_files, mark, hook or _no_hook
            )
            for d in days
        ]
    done = [r for r in reports if "skipped" not in r]
    return {
        "archive": local_or_uri(root),
        "recovered": recovered,
        "partitions": done,
        "skipped": [r for r in reports if "skipped" in r],
        "files_before": sum(r["files_before"] for r in done),
        "files_after": sum(r["files_after"] for r in done),
        "rows": sum(r["rows"] for r in done),
        "bytes_before": sum(r["bytes_before"] for r in done),
        "bytes_after": sum(r["bytes_after"] for r in done),
    }
