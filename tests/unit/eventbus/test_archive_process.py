"""The archive's writer in its own process: the same results, errors carried back,
a dead child replaced, and a child that ends with the bus's end of the pipe."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.eventbus.test_archive import DAY1, DAY2, NOW, append, ev, mark_of, read_back
from zbus.eventbus.server.archive import ArchiveError
from zbus.eventbus.server.archive_process import ArchiveProcess
from zbus.eventbus.server.store import SqliteEventLog


@pytest.fixture
def log(tmp_path: Path) -> Iterator[SqliteEventLog]:
    log = SqliteEventLog(tmp_path / "events.db")
    yield log
    log.close()


@pytest.fixture
def process(log: SqliteEventLog, tmp_path: Path) -> Iterator[ArchiveProcess]:
    process = ArchiveProcess(str(tmp_path / "archive"), log.path, batch=1000)
    yield process
    process.close()


def test_flushes_in_the_child_as_the_writer_would(
    log: SqliteEventLog, process: ArchiveProcess, tmp_path: Path
) -> None:
    append(log, ev("/a", DAY1), ev("/b", DAY2), ev("/a", DAY2))
    assert process.recover(NOW) == 0
    result = process.flush(NOW)
    assert (result.archived_through, result.events, result.files) == (3, 3, 2)
    assert process.archived_through == 3 and process.pid not in (None, os.getpid())
    table = read_back(tmp_path / "archive")
    assert table.column("seq").to_pylist() == [1, 2, 3]
    assert mark_of(tmp_path / "archive") == 3


def test_errors_come_back_and_a_dead_child_is_replaced(
    log: SqliteEventLog, process: ArchiveProcess, tmp_path: Path
) -> None:
    append(log, ev("/a"))
    (tmp_path / "archive").mkdir()
    (tmp_path / "archive" / "date=2026-11-22").mkdir()
    (tmp_path / "archive" / "date=2026-11-22" / "stray.parquet").write_bytes(b"x")
    with pytest.raises(ArchiveError, match="holds files but no"):
        process.flush(NOW)  # the child's own error, carried back
    (tmp_path / "archive" / "date=2026-11-22" / "stray.parquet").unlink()

    first, child = process.pid, process._proc
    assert first is not None and child is not None
    os.kill(first, signal.SIGKILL)
    child.join(30)
    result = process.flush(NOW)  # the call that finds it dead starts a new child
    assert process.pid not in (None, first)
    assert result.archived_through == 1


def test_the_child_exits_when_the_bus_end_of_the_pipe_closes(
    log: SqliteEventLog, process: ArchiveProcess
) -> None:
    process.recover(NOW)
    child = process._proc
    assert child is not None and child.is_alive()
    assert process._conn is not None
    process._conn.close()  # as when the bus's process dies
    child.join(30)
    assert not child.is_alive() and child.exitcode == 0
