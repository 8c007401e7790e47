"""compact: fewer files with the same rows, named as the archiver names them, and the
repair of a compaction interrupted at each of its steps."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from tests.support.archive import (
    ARROW_SCHEMA,
    archive_mark,
    make_events,
    read_events,
    write_archive,
)
from zbus.sparkworker.errors import ParamError
from zbus.sparkworker.jobs.compact import CompactionError, compact

DAY1, DAY2 = "date=2024-03-09", "date=2024-03-10"
MARK = archive_mark(600)
NAME = re.compile(r"part-(\d{20})-(\d{20})\.parquet")


class Crash(Exception):
    """Stands for the process dying at a step of the compaction."""


@pytest.fixture
def fragmented(tmp_path: Path) -> Path:
    """Two days, each in 6 files of 50 events (as an archiver flushing often writes)."""
    root = tmp_path / "archive"
    start = datetime(2024, 3, 9, tzinfo=UTC)
    for batch in range(12):
        day = start + timedelta(days=batch % 2)
        write_archive(root, make_events(50, ("a/x", "b/y"), day, first_seq=1 + batch * 50))
    (root / "_zbus_archive.json").write_text(MARK)
    return root


def data_files(partition: Path) -> list[Path]:
    return sorted(p for p in partition.iterdir() if not p.name.startswith(("_", ".")))


def check_named_by_seq(partition: Path) -> None:
    for file in data_files(partition):
        match = NAME.fullmatch(file.name)
        assert match, file.name
        seqs = pq.read_table(file).column("seq").to_pylist()
        assert (min(seqs), max(seqs)) == (int(match[1]), int(match[2]))
        assert seqs == sorted(seqs)


def run(spark: SparkSession, root: Path, **params: Any) -> dict[str, Any]:
    return compact(spark, params, archive=str(root), hook=params.pop("hook", None))


def test_partitions_become_one_file_with_the_same_rows(
    spark: SparkSession, fragmented: Path
) -> None:
    before = read_events(fragmented)
    result = run(spark, fragmented)
    assert [p["partition"] for p in result["partitions"]] == [DAY1, DAY2]
    assert (result["files_before"], result["files_after"], result["rows"]) == (12, 2, 600)
    assert result["recovered"] == [] and result["skipped"] == []
    for name in (DAY1, DAY2):
        assert len(data_files(fragmented / name)) == 1
        check_named_by_seq(fragmented / name)
    after = read_events(fragmented)
    assert after.equals(before)  # every column of every row, by seq
    file = data_files(fragmented / DAY1)[0]
    assert pq.read_schema(file).remove_metadata().equals(ARROW_SCHEMA)
    assert (fragmented / "_zbus_archive.json").read_text() == MARK
    assert sorted(p.name for p in fragmented.iterdir()) == ["_zbus_archive.json", DAY1, DAY2]

    again = run(spark, fragmented)  # nothing left to do
    assert again["partitions"] == []
    assert {s["partition"] for s in again["skipped"]} == {DAY1, DAY2}


def test_target_size_sets_the_number_of_files(spark: SparkSession, fragmented: Path) -> None:
    size = sum(p.stat().st_size for p in data_files(fragmented / DAY1))
    target_mb = size / 3.5 / (1024 * 1024)  # ceil(3.5) = 4 files wanted
    result = run(spark, fragmented, date="2024-03-09", target_file_mb=target_mb)
    assert [p["partition"] for p in result["partitions"]] == [DAY1]
    files = data_files(fragmented / DAY1)
    assert 1 < len(files) <= 4
    check_named_by_seq(fragmented / DAY1)
    assert len(data_files(fragmented / DAY2)) == 6  # not asked for
    assert read_events(fragmented / DAY1).num_rows == 300


def test_small_partitions_are_left_alone(spark: SparkSession, tmp_path: Path) -> None:
    root = tmp_path / "archive"
    write_archive(root, make_events(10, ("a",), datetime(2024, 3, 9, tzinfo=UTC)))
    result = run(spark, root)
    assert result["partitions"] == []
    assert result["skipped"][0]["skipped"] == "fewer than min_files (2) files"
    write_archive(root, make_events(10, ("a",), datetime(2024, 3, 9, tzinfo=UTC), first_seq=11))
    assert run(spark, root, min_files=3)["partitions"] == []
    assert run(spark, root, min_files=2)["files_after"] == 1


def test_other_files_in_a_partition_are_kept(spark: SparkSession, fragmented: Path) -> None:
    (fragmented / DAY1 / "_notes.json").write_text("{}")
    run(spark, fragmented, date="2024-03-09")
    assert (fragmented / DAY1 / "_notes.json").read_text() == "{}"


@pytest.mark.parametrize(
    ("step", "left_behind"),
    [
        ("written", {"_compact-" + DAY1, DAY1}),
        ("swapping", {"_compact-" + DAY1, "_old-" + DAY1}),  # no DAY1 at all
        ("swapped", {"_old-" + DAY1, DAY1}),
    ],
)
def test_an_interrupted_compaction_is_repaired_by_the_next(
    spark: SparkSession, fragmented: Path, step: str, left_behind: set[str]
) -> None:
    before = read_events(fragmented)

    def crash(at: str) -> None:
        if at == step:
            raise Crash(at)

    with pytest.raises(Crash):
        run(spark, fragmented, date="2024-03-09", hook=crash)
    names = {p.name for p in fragmented.iterdir()}
    assert left_behind <= names
    assert not ({"_compact-" + DAY1, "_old-" + DAY1, DAY1} - left_behind) & names

    result = run(spark, fragmented)
    assert result["recovered"], result
    assert sorted(p.name for p in fragmented.iterdir()) == ["_zbus_archive.json", DAY1, DAY2]
    assert read_events(fragmented).equals(before)
    assert len(data_files(fragmented / DAY1)) == 1


def test_recovery_restores_the_originals_when_the_swap_stopped_half_way(
    spark: SparkSession, fragmented: Path
) -> None:
    originals = {p.name for p in data_files(fragmented / DAY1)}

    def crash(at: str) -> None:
        if at == "swapping":
            raise Crash(at)

    with pytest.raises(Crash):
        run(spark, fragmented, date="2024-03-09", hook=crash)
    # Repair alone (a partition of another day asked for): the old files come back.
    result = run(spark, fragmented, date="2024-03-10")
    assert {"partition": DAY1, "action": "restored the original files"} in result["recovered"]
    assert {p.name for p in data_files(fragmented / DAY1)} == originals


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"date": "2024-02-30"}, "^date: not a valid date"),
        ({"date": "2024-03-11"}, "^date: the archive has no partition date=2024-03-11"),
        ({"target_file_mb": 0}, "^target_file_mb: "),
        ({"min_files": 0}, "^min_files: "),
        ({"files": 2}, "^files: unknown parameter of compact"),
    ],
)
def test_bad_params(
    spark: SparkSession, fragmented: Path, params: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ParamError, match=problem):
        run(spark, fragmented, **params)


def test_open_partitions_are_refused(spark: SparkSession, fragmented: Path) -> None:
    today = datetime.now(UTC).date().isoformat()
    with pytest.raises(ParamError, match=r"^date: only closed partitions"):
        run(spark, fragmented, date=today)


def test_a_missing_archive_has_nothing_to_compact(spark: SparkSession, tmp_path: Path) -> None:
    result = run(spark, tmp_path / "nothing")
    assert (result["partitions"], result["files_before"], result["rows"]) == ([], 0, 0)


def test_files_the_archiver_may_write_again_are_left_alone(
    spark: SparkSession, fragmented: Path
) -> None:
    # A crash of the archiver between a file and its mark: the file is above the mark,
    # and the archiver deletes it at its next start, then writes its events again.
    (fragmented / "_zbus_archive.json").write_text(archive_mark(550))
    result = run(spark, fragmented)
    assert [p["partition"] for p in result["partitions"]] == [DAY1]
    (skipped,) = result["skipped"]
    assert skipped["partition"] == DAY2
    assert skipped["skipped"] == (
        "part-00000000000000000551-00000000000000000600.parquet is not wholly archived (mark 550)"
    )
    assert len(data_files(fragmented / DAY2)) == 6


def test_a_partition_being_written_is_left_alone(spark: SparkSession, fragmented: Path) -> None:
    (fragmented / DAY1 / ".part-00000000000000000601-00000000000000000602.parquet.tmp").touch()
    result = run(spark, fragmented)
    assert [s["skipped"] for s in result["skipped"]] == ["a file is being written into it"]


def test_an_unreadable_mark_stops_the_job(spark: SparkSession, fragmented: Path) -> None:
    (fragmented / "_zbus_archive.json").write_text('{"version": 7}')
    with pytest.raises(CompactionError, match="is not an archive mark"):
        run(spark, fragmented)
    assert len(data_files(fragmented / DAY1)) == 6


def late_event(root: Path) -> None:
    """The archiver writing a late event of DAY1 (it creates the directory if missing)."""
    write_archive(
        root, make_events(1, ("late",), datetime(2024, 3, 9, 12, tzinfo=UTC), first_seq=601)
    )


def test_a_late_event_written_during_the_swap_is_kept(
    spark: SparkSession, fragmented: Path
) -> None:
    before = read_events(fragmented).num_rows

    def meanwhile(at: str) -> None:
        if at == "swapping":  # after date=X became _old-date=X
            late_event(fragmented)

    result = run(spark, fragmented, date="2024-03-09", hook=meanwhile)
    assert result["skipped"][0]["skipped"] == "the archiver wrote to it during the swap"
    assert sorted(p.name for p in fragmented.iterdir()) == ["_zbus_archive.json", DAY1, DAY2]
    assert read_events(fragmented).num_rows == before + 1
    assert len(data_files(fragmented / DAY1)) == 7  # the six originals and the late one


def test_a_late_event_written_before_a_crash_mid_swap_is_kept(
    spark: SparkSession, fragmented: Path
) -> None:
    before = read_events(fragmented).num_rows

    def crash(at: str) -> None:
        if at == "swapping":
            late_event(fragmented)
            raise Crash(at)

    with pytest.raises(Crash):
        run(spark, fragmented, date="2024-03-09", hook=crash)
    result = run(spark, fragmented, date="2024-03-10")
    assert {
        "partition": DAY1,
        "action": "moved the original files beside the archiver's new ones",
    } in result["recovered"]
    assert read_events(fragmented).num_rows == before + 1
    assert len(data_files(fragmented / DAY1)) == 7
