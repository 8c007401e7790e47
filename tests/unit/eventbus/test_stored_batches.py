"""The log as a sequence of stored batches: damage detected on read, batches shipped to
another log as they are, a version-1 log migrated on open."""

from __future__ import annotations

import logging
import sqlite3
import uuid as uuidlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zbus.eventbus.core.batchlog import BatchError, encode
from zbus.eventbus.server.store import NewEvent, SqliteEventLog, SqliteEventLogReader, StoreError

TS = "2026-11-22T08:35:32.862Z"


def ev(topic: str, n: int) -> NewEvent:
    return NewEvent(topic, "prod", TS, str(uuidlib.UUID(int=n)), f"{topic}#{n}".encode())


def test_a_damaged_batch_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    log = SqliteEventLog(path)
    log.append([ev("/a", i) for i in range(1, 4)], 1.0)
    log.append([ev("/b", i) for i in range(4, 6)], 2.0)
    log.close()
    conn = sqlite3.connect(path)  # one byte of the first batch's data flipped
    rows = conn.execute("SELECT rows FROM batches WHERE first_seq = 1").fetchone()[0]
    damaged = rows[:-1] + bytes([rows[-1] ^ 1])
    conn.execute("UPDATE batches SET rows = ? WHERE first_seq = 1", (damaged,))
    conn.commit()
    conn.close()
    reader = SqliteEventLogReader(path)
    with pytest.raises(StoreError, match=r"events\.db.*damaged.*sequence 1.*CRC"):
        reader.replay((), 0, 10)
    assert [e.seq for e in reader.replay((), 3, 10)] == [4, 5]  # the rest still reads
    reader.close()
    # The writer reads the uuids of the batches above its index mark: it refuses to open.
    with pytest.raises(StoreError, match=r"events\.db: damaged event log.*sequence 1.*CRC"):
        SqliteEventLog(path)


def test_a_damaged_batch_in_the_uuid_window_refuses_the_open(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    log = SqliteEventLog(path)
    log.append([ev("/a", 1)], 1.0)
    log.close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE batches SET crc = crc + 1")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match=r"events\.db: damaged event log.*CRC"):
        SqliteEventLog(path)


def test_a_malformed_batch_is_a_batch_error() -> None:
    good = encode(range(1, 3), 0.0, bytes(32), (["/a", "/b"], ["p", "p"], [TS, TS], [b"", b""]))
    bad = encode(range(1, 3), 0.0, bytes(32), (["/a"], ["p"], [TS], [b""]))
    assert [e.topic for e in good.events()] == ["/a", "/b"]
    with pytest.raises(BatchError, match="other lengths"):
        bad.events()


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(["/a", "/a/b", "/c"]), min_size=1, max_size=5), max_size=8)
)
def test_batches_shipped_as_they_are_make_the_same_log(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[str]]
) -> None:
    root = tmp_path_factory.mktemp("ship")
    leader = SqliteEventLog(root / "leader.db", uuid_merge_every=4)
    follower = SqliteEventLog(root / "follower.db", uuid_merge_every=4)
    n = 0
    for topics in batches:
        leader.append([ev(t, (n := n + 1)) for t in topics], float(n))
    source = leader.reader()
    after = 0
    while shipped := source.batches(after, 3):
        for batch in shipped:
            follower.append_stored(batch)
            after = batch.last_seq
    copy = follower.reader()
    assert copy.replay((), 0, 1000) == source.replay((), 0, 1000)
    assert copy.topics("", 100) == source.topics("", 100)
    assert copy.batches(0, 1000) == source.batches(0, 1000)
    # The follower knows the shipped uuids: a retry is a duplicate there too.
    if n:
        assert follower.append([ev("/x", 1)], 0.0).duplicates == [(ev("/x", 1).uuid, 1)]
        with pytest.raises(StoreError, match="does not follow"):
            follower.append_stored(source.batches(0, 1)[0])
    for x in (source, copy, leader, follower):
        x.close()


def test_retention_leaves_batches_that_still_ship(tmp_path: Path) -> None:
    log = SqliteEventLog(tmp_path / "events.db")
    log.append([ev("/a", 1), ev("/b", 2), ev("/a", 3), ev("/c", 4)], 1.0)
    log.append([ev("/a", 5)], 2.0)
    assert log.apply_retention(now=3.0, max_age=None, max_events=0) == 2  # 1 3
    reader = log.reader()
    (thinned, last) = reader.batches(0, 10)
    assert list(thinned.sequences()) == [2, 4] and last.first_seq == 5
    other = SqliteEventLog(tmp_path / "copy.db")
    other.append_stored(thinned)
    other.append_stored(last)
    assert [e.seq for e in other.reader().replay((), 0, 10)] == [2, 4, 5]
    reader.close()
    other.close()
    log.close()


V1_SCHEMA = """
CREATE TABLE events(
    seq INTEGER PRIMARY KEY, topic TEXT NOT NULL, producer TEXT NOT NULL,
    ts TEXT NOT NULL, uuid BLOB NOT NULL, data BLOB NOT NULL);
CREATE TABLE topics(
    topic TEXT PRIMARY KEY, last_seq INTEGER NOT NULL, count INTEGER NOT NULL,
    bytes INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE batches(first_seq INTEGER PRIMARY KEY, received REAL NOT NULL);
CREATE TABLE uuids(
    key INTEGER NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY(key, seq)) WITHOUT ROWID;
CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO meta VALUES ('indexed', 0), ('events', 3);
INSERT INTO batches VALUES (2, 100.0), (4, 200.0);
INSERT INTO topics VALUES ('/a', 4, 2, 2), ('/b', 2, 1, 1);
PRAGMA application_id = 2053272947;
PRAGMA user_version = 1;
PRAGMA journal_mode = WAL;
"""


def test_a_version_1_log_is_migrated_on_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "events.db"
    conn = sqlite3.connect(path)
    conn.executescript(V1_SCHEMA)
    # Event 1 was thinned out by retention; 2 and 3 came in one batch, 4 in another.
    conn.executemany(
        "INSERT INTO events VALUES (?, ?, 'p', ?, ?, ?)",
        [(s, t, TS, uuidlib.UUID(int=s).bytes, b"x") for s, t in [(2, "/b"), (3, "/a"), (4, "/a")]],
    )
    conn.commit()
    conn.close()
    with caplog.at_level(logging.WARNING):
        log = SqliteEventLog(path)
    assert "migrated 3 events to version 2" in caplog.text
    assert log.last_sequence() == 4
    reader = log.reader()
    assert [(e.seq, e.topic) for e in reader.replay((), 0, 10)] == [(2, "/b"), (3, "/a"), (4, "/a")]
    assert [(b.first_seq, b.count, b.received) for b in reader.batches(0, 10)] == [
        (2, 2, 100.0),
        (4, 1, 200.0),
    ]
    assert [(t.topic, t.count, t.last_ts) for t in reader.topics("", 10)] == [
        ("/a", 2, TS),
        ("/b", 1, TS),
    ]
    # The migrated uuids are indexed: a retry of one is a duplicate.
    retry = NewEvent("/a", "p", TS, str(uuidlib.UUID(int=3)), b"x")
    assert log.append([retry], 300.0).duplicates == [(retry.uuid, 3)]
    reader.close()
    log.close()
    SqliteEventLog(path).close()  # and it opens again as version 2
