"""The event archive on real files: a real SQLite log copied into Parquet, read back with
pyarrow; partitions, the mark, recovery after a crash, restarts, retention, bad paths."""

from __future__ import annotations

import json
import uuid as uuidlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from prometheus_client import CollectorRegistry

from tests.support.waiting import wait_until
from zbus.common.clock import ManualClock
from zbus.eventbus.server.archive import (
    ARCHIVE_SCHEMA,
    MARK_FILE,
    ArchiveError,
    Archiver,
    ArchiveWriter,
    decode_mark,
    encode_mark,
    flush_due,
    open_archive,
    parse_part_name,
    parse_timestamp,
    part_name,
    redact,
    split_by_day,
)
from zbus.eventbus.server.metrics import BusMetrics
from zbus.eventbus.server.store import Event, NewEvent, SqliteEventLog

DAY1 = "2026-11-22T23:59:59.999Z"
DAY2 = "2026-11-23T00:00:00.000Z"
NOW = datetime(2027, 1, 2, 3, 4, 5, tzinfo=UTC)


def ev(topic: str, ts: str = DAY1, data: bytes | None = None) -> NewEvent:
    return NewEvent(topic, "prod", ts, str(uuidlib.uuid4()), data or topic.encode())


@pytest.fixture
def log(tmp_path: Path) -> Iterator[SqliteEventLog]:
    log = SqliteEventLog(tmp_path / "events.db")
    yield log
    log.close()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "archive"


@pytest.fixture
def writer(log: SqliteEventLog, root: Path) -> Iterator[ArchiveWriter]:
    writer = ArchiveWriter(str(root), log.path)
    yield writer
    writer.close()


def append(log: SqliteEventLog, *events: NewEvent) -> list[Event]:
    return log.append(list(events), 0.0).stored


def read_back(root: Path) -> pa.Table:
    dataset = ds.dataset(root, format="parquet", partitioning="hive")
    return dataset.to_table().sort_by("seq")


def parts(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.parquet"))


def mark_of(root: Path) -> int:
    return decode_mark((root / MARK_FILE).read_bytes())


# ------------------------------------------------------------------ pure helpers
def test_timestamps_parse_to_utc_and_garbage_is_none() -> None:
    assert parse_timestamp("2026-11-22T23:30:00-01:00") == datetime(2026, 11, 23, 0, 30, tzinfo=UTC)
    assert parse_timestamp("2026-11-22T10:00:00") == datetime(2026, 11, 22, 10, tzinfo=UTC)
    assert parse_timestamp("2026-11-22T10:00:00.123456789Z") == datetime(
        2026, 11, 22, 10, 0, 0, 123456, tzinfo=UTC
    )
    for garbage in ("", "yesterday", "1718000000", "0001-01-01T00:00:00+01:00"):
        assert parse_timestamp(garbage) is None


def test_split_by_day_groups_in_order_and_counts_bad_timestamps() -> None:
    texts = [DAY1, DAY2, "2026-11-22T23:00:00-02:00", "not a time", DAY1]
    events = [Event(i, "/t", "p", t, str(uuidlib.UUID(int=i)), b"") for i, t in enumerate(texts, 1)]
    tables, bad = split_by_day(events, NOW)
    assert bad == 1
    assert {day: t.column("seq").to_pylist() for day, t in tables.items()} == {
        "2026-11-22": [1, 5],
        "2026-11-23": [2, 3],
        "2027-01-02": [4],
    }
    assert tables["2027-01-02"].column("ts")[0].as_py() == NOW
    assert all(t.schema.equals(ARCHIVE_SCHEMA) for t in tables.values())
    # The vectorised path (every text with an offset) agrees with the per-text one.
    clean, none_bad = split_by_day(events[:3], NOW)
    assert none_bad == 0
    assert (
        clean["2026-11-23"].column("ts").to_pylist()
        == tables["2026-11-23"].column("ts").to_pylist()
    )


def test_names_marks_and_schedule() -> None:
    assert part_name(1, 42) == "part-00000000000000000001-00000000000000000042.parquet"
    assert parse_part_name(part_name(7, 9)) == (7, 9)
    for other in ("part-1-2.parquet", "compacted-0001.parquet", part_name(1, 2) + ".tmp"):
        assert parse_part_name(other) is None
    assert decode_mark(encode_mark(12, NOW)) == 12
    assert json.loads(encode_mark(12, NOW))["version"] == 1
    for garbage in (b"{", b"[]", b'{"version": 2, "archived_through": 1}', b'{"version": 1}'):
        with pytest.raises(ArchiveError):
            decode_mark(garbage)
    assert flush_due(now=10, due=10, pending=0, batch=5, failing=True)
    assert flush_due(now=9, due=10, pending=5, batch=5, failing=False)
    assert not flush_due(now=9, due=10, pending=5, batch=5, failing=True)
    assert not flush_due(now=9, due=10, pending=4, batch=5, failing=False)
    assert redact("s3://key:secret@bucket/zbus") == "s3://***@bucket/zbus"
    assert redact("relative/dir") == "relative/dir"
    assert open_archive("relative/dir")[1] == (Path.cwd() / "relative/dir").as_posix()


# -------------------------------------------------------------------- writing
def test_flush_writes_one_file_per_date_in_the_fixed_schema(
    log: SqliteEventLog, writer: ArchiveWriter, root: Path
) -> None:
    stored = append(
        log,
        ev("/a", DAY1),
        ev("/b", DAY2),
        ev("/a", DAY1, b"\x00\xff"),
        ev("/c", DAY2),
        ev("/a", DAY2),
    )
    result = writer.flush(NOW)
    assert (result.archived_through, result.events, result.files) == (5, 5, 2)
    assert parts(root) == [
        f"date=2026-11-22/{part_name(1, 3)}",
        f"date=2026-11-23/{part_name(2, 5)}",
    ]
    for path in root.rglob("*.parquet"):
        assert pq.read_schema(path).equals(ARCHIVE_SCHEMA)  # no date column in the files
    table = read_back(root)
    assert table.column("seq").to_pylist() == [e.seq for e in stored]
    assert table.column("topic").to_pylist() == [e.topic for e in stored]
    assert table.column("uuid").to_pylist() == [e.uuid for e in stored]
    assert table.column("data").to_pylist() == [e.data for e in stored]
    assert table.column("producer").to_pylist() == ["prod"] * 5
    assert [str(d) for d in table.column("date").to_pylist()] == [
        "2026-11-22",
        "2026-11-23",
        "2026-11-22",
        "2026-11-23",
        "2026-11-23",
    ]
    assert table.column("ts")[0].as_py() == datetime(2026, 11, 22, 23, 59, 59, 999000, tzinfo=UTC)
    mark = json.loads((root / MARK_FILE).read_bytes())
    assert mark["version"] == 1 and mark["archived_through"] == 5
    assert not [p for p in root.rglob(".*")]  # no temporary file left
    assert writer.flush(NOW).events == 0  # nothing new: no file, same mark
    assert len(parts(root)) == 2 and mark_of(root) == 5


def test_flushes_are_bounded_by_the_batch_and_read_in_pages(
    log: SqliteEventLog, root: Path
) -> None:
    append(log, *(ev(f"/t/{i % 3}") for i in range(12)))
    writer = ArchiveWriter(str(root), log.path, batch=5, page=2)
    try:
        marks = [writer.flush(NOW).archived_through for _ in range(4)]
    finally:
        writer.close()
    assert marks == [5, 10, 12, 12]
    assert parts(root) == [
        f"date=2026-11-22/{part_name(1, 5)}",
        f"date=2026-11-22/{part_name(6, 10)}",
        f"date=2026-11-22/{part_name(11, 12)}",
    ]
    assert read_back(root).column("seq").to_pylist() == list(range(1, 13))


# ------------------------------------------------------------------- recovery
def test_a_file_beyond_the_mark_is_deleted_and_written_again(
    log: SqliteEventLog, writer: ArchiveWriter, root: Path
) -> None:
    append(log, ev("/a"), ev("/b"), ev("/c"))
    writer.flush(NOW)
    append(log, ev("/d", DAY1), ev("/e", DAY2), ev("/f", DAY1))
    writer.close()
    # A crash after the rename, before the mark: files above the mark, one of them
    # incomplete, and a temporary file that was never renamed.
    stale = pa.table({"seq": [4]}, schema=pa.schema([pa.field("seq", pa.int64())]))
    pq.write_table(stale, root / "date=2026-11-22" / part_name(4, 6))
    (root / "date=2026-11-23").mkdir()
    (root / "date=2026-11-23" / ".part-0123abcd.tmp").write_bytes(b"partial")
    assert mark_of(root) == 3

    again = ArchiveWriter(str(root), log.path)
    try:
        assert again.recover(NOW) == 3
        assert parts(root) == [f"date=2026-11-22/{part_name(1, 3)}"]
        assert not (root / "date=2026-11-23" / ".part-0123abcd.tmp").exists()
        assert again.flush(NOW).archived_through == 6
    finally:
        again.close()
    table = read_back(root)
    assert table.column("seq").to_pylist() == [1, 2, 3, 4, 5, 6]
    assert table.column("topic").to_pylist() == ["/a", "/b", "/c", "/d", "/e", "/f"]


def test_a_failed_mark_write_is_recovered_by_the_next_flush(
    log: SqliteEventLog, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = ArchiveWriter(str(root), log.path)
    try:
        append(log, ev("/a"), ev("/b"))
        writer.flush(NOW)
        append(log, ev("/c"), ev("/d", DAY2))
        write_mark = ArchiveWriter._write_mark

        def failing(*args: object) -> None:
            raise OSError("No space left on device")

        monkeypatch.setattr(ArchiveWriter, "_write_mark", failing)
        with pytest.raises(ArchiveError, match="No space left"):
            writer.flush(NOW)
        assert writer.archived_through == 2 and mark_of(root) == 2
        assert len(parts(root)) == 3  # the files are in place, the mark is not
        monkeypatch.setattr(ArchiveWriter, "_write_mark", write_mark)
        assert writer.flush(NOW).archived_through == 4
    finally:
        writer.close()
    assert read_back(root).column("seq").to_pylist() == [1, 2, 3, 4]


def test_nothing_is_archived_twice_across_restarts(log: SqliteEventLog, root: Path) -> None:
    for round_no in range(3):
        append(log, *(ev(f"/r{round_no}/{i}") for i in range(4)))
        writer = ArchiveWriter(str(root), log.path)
        try:
            writer.flush(NOW)
            writer.flush(NOW)
        finally:
            writer.close()
    writer = ArchiveWriter(str(root), log.path)
    try:
        assert writer.flush(NOW).events == 0  # a restart with nothing new writes nothing
    finally:
        writer.close()
    assert read_back(root).column("seq").to_pylist() == list(range(1, 13))
    assert len(parts(root)) == 3 and mark_of(root) == 12


def test_an_archive_that_is_not_ours_is_refused(log: SqliteEventLog, root: Path) -> None:
    append(log, ev("/a"))
    root.mkdir()
    (root / "someone-elses.parquet").write_bytes(b"x")
    writer = ArchiveWriter(str(root), log.path)
    try:
        with pytest.raises(ArchiveError, match=r"no _zbus_archive\.json"):
            writer.flush(NOW)
        (root / "someone-elses.parquet").unlink()
        (root / MARK_FILE).write_bytes(encode_mark(99, NOW))
        with pytest.raises(ArchiveError, match="another log"):
            writer.flush(NOW)
        (root / MARK_FILE).write_bytes(b"garbage")
        with pytest.raises(ArchiveError, match="not JSON"):
            writer.flush(NOW)
        assert not parts(root)
    finally:
        writer.close()


# ------------------------------------------------------------------ retention
def test_retention_keeps_what_is_not_archived(log: SqliteEventLog, root: Path) -> None:
    metrics = BusMetrics(CollectorRegistry())
    archiver = Archiver(
        ArchiveWriter(str(root), log.path),
        interval=60,
        batch=100,
        metrics=metrics,
        clock=ManualClock(),
        last_sequence=log.last_sequence,
        on_mark=log.hold_retention,
    )
    append(log, *(ev("/t") for _ in range(6)))
    log.hold_retention(0)  # as the bus does before the archive has read its mark
    assert log.apply_retention(now=1e10, max_age=1.0, max_events=1) == 0
    assert archiver.archive_now()
    append(log, *(ev("/t") for _ in range(4)))  # 7..10, not archived
    # Everything is old and beyond max_events, but only the archived events may go.
    assert log.apply_retention(now=1e10, max_age=1.0, max_events=1) == 6
    reader = log.reader()
    assert reader.replay(("",), 0, 100)[0].seq == 7
    reader.close()
    assert archiver.archive_now()
    assert log.apply_retention(now=1e10, max_age=None, max_events=1) == 3  # /t's latest stays
    archiver.writer.close()
    assert read_back(root).column("seq").to_pylist() == list(range(1, 11))


# ---------------------------------------------------------------- the thread
def test_a_bad_path_is_counted_and_retried_and_nothing_is_lost(
    log: SqliteEventLog, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_bytes(b"")
    registry = CollectorRegistry()
    archiver = Archiver(
        ArchiveWriter(str(blocker / "archive"), log.path),
        interval=60,
        batch=100,
        metrics=BusMetrics(registry),
        clock=ManualClock(),
        last_sequence=log.last_sequence,
        on_mark=log.hold_retention,
    )
    append(log, ev("/a"), ev("/b"))
    future = archiver.request_flush()
    assert not archiver.archive_now([future])
    with pytest.raises(ArchiveError):
        future.result(0)
    assert not archiver.archive_now()
    assert registry.get_sample_value("zbus_archive_errors_total") == 2
    assert registry.get_sample_value("zbus_archive_lag_events") == 2
    assert archiver.failing and archiver.last_error and archiver.archived_through is None
    assert append(log, ev("/c"))[0].seq == 3  # the log goes on
    assert log.apply_retention(now=1e10, max_age=1.0, max_events=None) == 0  # held

    blocker.unlink()  # the operator fixes the path
    assert archiver.archive_now()
    archiver.writer.close()
    assert archiver.status()["archived_through"] == 3 and not archiver.status()["failing"]
    assert registry.get_sample_value("zbus_archive_events_total") == 3
    assert registry.get_sample_value("zbus_archive_lag_events") == 0
    assert read_back(blocker / "archive").column("seq").to_pylist() == [1, 2, 3]


def test_the_thread_flushes_on_batch_on_request_and_at_stop(
    log: SqliteEventLog, root: Path
) -> None:
    registry = CollectorRegistry()
    marks: list[int] = []
    archiver = Archiver(
        ArchiveWriter(str(root), log.path),
        interval=3600,  # only the batch, requests and the stop make it flush
        batch=5,
        metrics=BusMetrics(registry),
        clock=ManualClock(),
        last_sequence=log.last_sequence,
        on_mark=marks.append,
        poll=0.01,
    )
    archiver.start()
    try:
        wait_until(lambda: archiver.archived_through == 0, what="recovery at start")
        append(log, *(ev("/t", "bad timestamp") for _ in range(5)))
        wait_until(lambda: archiver.archived_through == 5, what="a flush on batch")
        append(log, ev("/t"))
        assert archiver.request_flush().result(10) == 6
        append(log, ev("/t"), ev("/u"))
    finally:
        archiver.stop()
        archiver.join(10)
    assert not archiver.is_alive()
    assert marks == [0, 5, 6, 8] and mark_of(root) == 8
    assert registry.get_sample_value("zbus_archive_bad_timestamps_total") == 5
    assert registry.get_sample_value("zbus_archive_files_total") == 3
    with pytest.raises(ArchiveError, match="stopped"):
        archiver.request_flush().result(0)
    assert read_back(root).column("seq").to_pylist() == list(range(1, 9))
