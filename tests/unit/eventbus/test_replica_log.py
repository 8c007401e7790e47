"""What a replica's log does beyond appends: truncation of a deposed leader's tail, the
epoch history, shipped batches checked on arrival, and reads that wait for the high
watermark."""

from __future__ import annotations

import uuid as uuidlib
from pathlib import Path

import msgpack
import pytest

from zbus.eventbus.core import batchlog
from zbus.eventbus.core.batchlog import BatchError
from zbus.eventbus.server import reader as reader_module
from zbus.eventbus.server.store import NewEvent, SqliteEventLog, SqliteEventLogReader, StoreError

TS = "2026-11-27T08:35:32.862Z"


def ev(topic: str, n: int) -> NewEvent:
    return NewEvent(topic, "prod", TS, str(uuidlib.UUID(int=n)), f"{topic}#{n}".encode())


def filled(path: Path) -> SqliteEventLog:
    log = SqliteEventLog(path)
    log.append([ev("/a", 1), ev("/b", 2), ev("/a", 3)], 1.0)  # 1..3
    log.append([ev("/b", 4), ev("/c", 5)], 2.0)  # 4..5
    log.append([ev("/a", 6), ev("/d", 7)], 3.0)  # 6..7
    return log


def test_truncation_drops_the_tail_and_puts_the_topic_index_back(tmp_path: Path) -> None:
    log = filled(tmp_path / "events.db")
    assert log.truncate_after(3) == 4
    assert log.last_sequence() == 3
    reader = log.reader()
    topics = {t.topic: (t.count, t.last_seq) for t in reader.topics("", 10)}
    assert topics == {"/a": (2, 3), "/b": (1, 2)}
    assert reader.stats().events == 3
    # A truncated uuid may come again, and takes the next sequence.
    result = log.append([ev("/b", 4)], 4.0)
    assert [e.seq for e in result.stored] == [4] and not result.duplicates
    # Still there: a uuid below the cut is a duplicate.
    assert log.append([ev("/a", 1)], 5.0).duplicates == [(str(uuidlib.UUID(int=1)), 1)]
    reader.close()
    log.close()
    reopened = SqliteEventLog(tmp_path / "events.db")
    assert reopened.last_sequence() == 4
    reopened.close()


def test_truncation_inside_a_batch_is_refused(tmp_path: Path) -> None:
    log = filled(tmp_path / "events.db")
    with pytest.raises(StoreError, match=r"inside the batch 4\.\.5"):
        log.truncate_after(4)
    assert log.last_sequence() == 7
    assert log.truncate_after(7) == 0


def test_the_epoch_history_is_kept_and_cut_with_the_log(tmp_path: Path) -> None:
    log = filled(tmp_path / "events.db")
    log.set_epochs(((2, 1), (5, 4), (9, 6)))
    log.truncate_after(5)
    assert log.epochs() == ((2, 1), (5, 4))
    log.close()
    assert SqliteEventLog(tmp_path / "events.db").epochs() == ((2, 1), (5, 4))


def test_a_shipped_batch_round_trips_and_bad_ones_are_refused(tmp_path: Path) -> None:
    log = filled(tmp_path / "events.db")
    reader = log.reader()
    for batch in reader.batches(0, 10):
        assert batchlog.unpack(batchlog.pack(batch)) == batch
    good = reader.batches(0, 1)[0]
    fields = msgpack.unpackb(batchlog.pack(good))
    bad = {
        "first after last": [5, 3, *fields[2:]],
        "count beyond the range": [1, 3, 4, *fields[3:]],
        "received not a float": [*fields[:3], "x", *fields[4:]],
        "uuids short": [*fields[:6], fields[6][:-1], fields[7]],
        "crc": [*fields[:4], fields[4] ^ 1, *fields[5:]],
        "sequence 2**63": [2**63, 2**63 + 2, *fields[2:]],
    }
    for what, f in bad.items():
        with pytest.raises(BatchError):
            batchlog.unpack(msgpack.packb(f))
        assert what
    with pytest.raises(BatchError):
        batchlog.unpack(b"\x93\x01\x02")
    reader.close()


def test_snapshots_wait_for_the_high_watermark_and_sequence_reads_stop_at_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = filled(tmp_path / "events.db")
    monkeypatch.setattr(reader_module, "SETTLE_SECONDS", 0.05)
    hwm = [5]
    reader = SqliteEventLogReader(tmp_path / "events.db", visible=lambda: hwm[0])
    with pytest.raises(StoreError, match="up to sequence 7 are not confirmed"):
        reader.snapshot_page(("/",), 0, None, 10)
    page = reader.log_page((), 0, 10)
    assert page.sequence == 5 and [e.seq for e in page.events] == [1, 2, 3, 4, 5]
    assert [e.seq for e in reader.replay((), 3, 10)] == [4, 5]
    hwm[0] = 7
    page = reader.snapshot_page(("/",), 0, None, 10)
    assert page.sequence == 7 and {e.topic for e in page.events} == {"/a", "/b", "/c", "/d"}
    reader.close()
    log.close()


@pytest.mark.parametrize(
    "bad",
    [
        "x" * 36,
        "00000000-0000-0000-0000-00000000000 ",  # fromhex would skip the space
        "00000000-0000-0000-0000-0000000000",  # short, and the next one long
        "000000000-000-0000-0000-000000000000",  # a dash out of place
    ],
)
def test_an_append_with_a_malformed_uuid_is_refused_whole(tmp_path: Path, bad: str) -> None:
    log = SqliteEventLog(tmp_path / "events.db")
    events = [ev("/a", 1), NewEvent("/a", "p", TS, bad, b"x"), ev("/a", 3)]
    if len(bad) == 34:
        events.append(NewEvent("/a", "p", TS, str(uuidlib.UUID(int=4)) + "00", b"x"))
    with pytest.raises(ValueError, match="not a canonical uuid"):
        log.append(events, 1.0)
    assert log.last_sequence() == 0
    log.close()
