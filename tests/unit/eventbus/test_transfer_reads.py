"""The I/O half of a spec transfer: the reads the core asks for, on a real log."""

from __future__ import annotations

import functools
import sqlite3
import time
import uuid as uuidlib
from pathlib import Path

import pytest

from zbus.eventbus.core.spec import OpenTransfer, ReadTransfer
from zbus.eventbus.server.store import NewEvent, SqliteEventLog, SqliteEventLogReader, StoreError
from zbus.eventbus.server.transfers import TransferReads

TS = "2026-11-22T08:35:32.862Z"


@pytest.fixture
def log(tmp_path: Path) -> SqliteEventLog:
    log = SqliteEventLog(tmp_path / "events.db")
    events = [
        NewEvent(f"/t/{i % 3}", "p", TS, str(uuidlib.UUID(int=i + 1)), bytes(10)) for i in range(10)
    ]
    log.append(events, time.time())
    return log


def test_a_state_transfer_reads_by_count_and_ends(log: SqliteEventLog) -> None:
    reads = TransferReads(log.reader)
    assert reads.open(OpenTransfer(1, ("/t/",), 0, False)) == 10
    events, ended = reads.read(ReadTransfer(1, 2, 1 << 20))
    assert [e.topic for e in events] == ["/t/0", "/t/1"] and not ended
    events, ended = reads.read(ReadTransfer(1, 2, 1 << 20))
    assert [e.seq for e in events] == [9] and ended  # each topic's latest
    reads.close(1)
    reads.close(1)  # closed already: nothing to do


def test_a_resume_reads_every_event_above_and_stops_at_the_byte_budget(
    log: SqliteEventLog,
) -> None:
    reads = TransferReads(log.reader)
    reads.open(OpenTransfer(7, (), 4, True))
    events, ended = reads.read(ReadTransfer(7, 100, 25))  # 10 bytes each: 3 reach 25
    assert [e.seq for e in events] == [5, 6, 7] and not ended
    events, ended = reads.read(ReadTransfer(7, 100, 1))  # at least one
    assert [e.seq for e in events] == [8] and not ended
    reads.close_all()


def test_closing_ends_the_read_transaction(log: SqliteEventLog, tmp_path: Path) -> None:
    reader = SqliteEventLogReader(tmp_path / "events.db")
    reads = TransferReads(lambda: reader)
    reads.open(OpenTransfer(1, (), 0, False))
    reads.close(1)
    with pytest.raises(sqlite3.ProgrammingError):
        reader.stats()  # its connection is closed: the transaction is over


def test_a_failed_open_leaves_its_reader_to_close(log: SqliteEventLog, tmp_path: Path) -> None:
    closed = []

    class Broken(SqliteEventLogReader):
        def snapshot(self, subtrees: tuple[str, ...], since: int):  # type: ignore[no-untyped-def]
            raise StoreError("disk I/O error")

        def close(self) -> None:
            closed.append(True)
            super().close()

    reads = TransferReads(functools.partial(Broken, tmp_path / "events.db"))
    with pytest.raises(StoreError):
        reads.open(OpenTransfer(1, (), 0, False))
    reads.close(1)
    assert closed == [True]
