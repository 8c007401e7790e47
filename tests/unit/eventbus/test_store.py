"""The event log on real SQLite files: sequencing, duplicates, snapshots, reads, retention,
crash durability and refusal of foreign files."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zbus.eventbus.server.store import (
    Event,
    EventLogReader,
    NewEvent,
    SqliteEventLog,
    SqliteEventLogReader,
    StoreError,
)

ROOT = Path(__file__).resolve().parents[3]
TS = "2026-11-22T08:35:32.862Z"


def uid(n: int) -> str:
    return str(uuidlib.UUID(int=n))


def ev(topic: str, n: int, data: bytes | None = None) -> NewEvent:
    return NewEvent(topic, "prod", TS, uid(n), f"{topic}#{n}".encode() if data is None else data)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "events.db"


@pytest.fixture
def log(path: Path) -> Iterator[SqliteEventLog]:
    log = SqliteEventLog(path)
    yield log
    log.close()


@pytest.fixture
def reader(log: SqliteEventLog) -> Iterator[SqliteEventLogReader]:
    reader = log.reader()
    yield reader
    reader.close()


def all_pages(
    reader: EventLogReader, subtrees: tuple[str, ...], since: int, limit: int
) -> list[Event]:
    events: list[Event] = []
    after: str | None = None
    for _ in range(1000):  # bounded: a cursor that does not advance must fail, not hang
        page = reader.snapshot_page(subtrees, since, after, limit)
        assert len(page.events) <= limit
        events += page.events
        if page.next is None:
            return events
        assert page.next == page.events[-1].topic
        after = page.next
    raise AssertionError("paging does not end")


# ------------------------------------------------------------------ sequencing, duplicates


def test_sequences_are_contiguous_and_survive_reopen(path: Path) -> None:
    log = SqliteEventLog(path)
    assert log.last_sequence() == 0
    first = log.append([ev("/a", i) for i in range(3)], 1.0)
    second = log.append([ev("/b", i) for i in range(3, 5)], 2.0)
    assert [e.seq for e in first.stored + second.stored] == [1, 2, 3, 4, 5]
    assert first.stored[0] == Event(1, "/a", "prod", TS, uid(0), b"/a#0")
    log.close()

    log = SqliteEventLog(path)
    assert log.last_sequence() == 5
    assert [e.seq for e in log.append([ev("/c", 9)], 3.0).stored] == [6]
    reader = log.reader()
    assert [e.seq for e in reader.replay((), 0, 100)] == [1, 2, 3, 4, 5, 6]
    reader.close()
    log.close()


def test_duplicates_in_the_log_and_in_the_batch_are_reported_not_stored(
    log: SqliteEventLog, reader: SqliteEventLogReader
) -> None:
    log.append([ev("/a", 1), ev("/a", 2)], 1.0)
    result = log.append([ev("/b", 3), ev("/b", 2), ev("/b", 3), ev("/b", 4)], 2.0)
    assert [(e.seq, e.uuid) for e in result.stored] == [(3, uid(3)), (4, uid(4))]
    assert result.duplicates == [(uid(2), 2), (uid(3), 3)]
    # A batch of nothing but duplicates consumes no sequence.
    again = log.append([ev("/c", 1), ev("/c", 4)], 3.0)
    assert again.stored == []
    assert again.duplicates == [(uid(1), 1), (uid(4), 4)]
    assert log.last_sequence() == 4
    assert [e.uuid for e in reader.replay((), 0, 100)] == [uid(1), uid(2), uid(3), uid(4)]
    assert reader.stats().events == 4
    assert [(t.topic, t.count) for t in reader.topics("", 10)] == [("/a", 2), ("/b", 2)]


def test_uuid_text_is_compared_as_a_uuid(log: SqliteEventLog, reader: SqliteEventLogReader) -> None:
    upper = uid(0xABC).upper()
    log.append([NewEvent("/a", "p", TS, upper, b"x")], 1.0)
    result = log.append([NewEvent("/a", "p", TS, uid(0xABC), b"y")], 2.0)
    assert result.duplicates == [(uid(0xABC), 1)]
    assert reader.replay((), 0, 10)[0].uuid == uid(0xABC)  # read back in canonical form


@pytest.mark.parametrize("bad", ["", "not-a-uuid", uid(1)[:-1] + "g", uid(1).replace("-", " ")])
def test_a_malformed_uuid_rejects_the_batch(log: SqliteEventLog, bad: str) -> None:
    with pytest.raises(ValueError, match="uuid"):
        log.append([ev("/a", 1), NewEvent("/a", "p", TS, bad, b"")], 1.0)
    assert log.last_sequence() == 0


def test_a_failed_append_leaves_nothing_behind(
    log: SqliteEventLog, reader: SqliteEventLogReader
) -> None:
    log.append([ev("/a", 1)], 1.0)
    # SQLite cannot store the second event's topic: the first one is already inserted.
    broken = NewEvent(object(), "p", TS, uid(3), b"")  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="append failed"):
        log.append([ev("/a", 2), broken], 2.0)
    assert reader.replay((), 0, 10) == [Event(1, "/a", "prod", TS, uid(1), b"/a#1")]
    assert reader.topics("", 10)[0].count == 1
    # The failed batch's uuids were not remembered and its sequences are reused.
    assert [e.seq for e in log.append([ev("/a", 2)], 3.0).stored] == [2]


@pytest.mark.parametrize(
    ("merge_every", "size", "reopen"), [(7, 2, False), (20, 2, False), (7, 3, True)]
)
def test_duplicates_are_found_across_index_merges(
    path: Path, merge_every: int, size: int, reopen: bool
) -> None:
    # A tiny merge threshold walks the uuids through every state: in memory, being merged,
    # merged (with and without a merge under way), and reloaded after a reopen.
    log = SqliteEventLog(path, uuid_merge_every=merge_every)
    seq_of = {uid(n): log.append([ev("/t", n)], 0.0).stored[0].seq for n in range(size)}
    for b in range(1, 40):
        old = uid((b * 7) % len(seq_of))
        fresh = [ev(f"/t{i % 3}", b * size + i) for i in range(size)]
        result = log.append([*fresh, NewEvent("/x", "p", TS, old, b"")], float(b))
        assert result.duplicates == [(old, seq_of[old])], b
        seq_of.update((e.uuid, e.seq) for e in result.stored)
        if reopen and b % 5 == 0:
            log.close()
            log = SqliteEventLog(path, uuid_merge_every=merge_every)
    assert log.last_sequence() == len(seq_of) == 40 * size
    log.close()


def test_fsync_mode_appends_and_reopens(path: Path) -> None:
    log = SqliteEventLog(path, fsync=True)
    log.append([ev("/a", 1)], 1.0)
    log.close()
    log = SqliteEventLog(path, fsync=True)
    assert log.last_sequence() == 1
    log.close()


# ------------------------------------------------------------------------- snapshots

TOPICS = ["/a", "/a/b", "/a/b/c", "/a/bc", "/a/c", "/ab", "/b/x", "/b/y", "/c", "z"]


@pytest.fixture
def filled(log: SqliteEventLog) -> dict[str, Event]:
    """Two rounds over TOPICS; returns the latest event of each topic."""
    latest: dict[str, Event] = {}
    for round_ in range(2):
        stored = log.append([ev(t, round_ * 100 + i) for i, t in enumerate(TOPICS)], 1.0).stored
        latest.update((e.topic, e) for e in stored)
    return latest


def expected(latest: dict[str, Event], subtrees: tuple[str, ...], since: int = 0) -> list[Event]:
    return sorted(
        (
            e
            for t, e in latest.items()
            if (not subtrees or any(t.startswith(s) for s in subtrees)) and e.seq > since
        ),
        key=lambda e: e.topic,
    )


@pytest.mark.parametrize(
    "subtrees",
    [(), ("",), ("/a",), ("/a/",), ("/a/b",), ("/b/", "/c"), ("/a/", "/a/b/", "/a/b/c"),
     ("/c", "/a/b", "/a"), ("/nothing",), ("z", "/b/y", "/a/bc")],
)  # fmt: skip
@pytest.mark.parametrize("limit", [1, 2, 3, 100])
def test_snapshot_pages_cover_each_matching_topic_once(
    filled: dict[str, Event],
    reader: SqliteEventLogReader,
    subtrees: tuple[str, ...],
    limit: int,
) -> None:
    assert all_pages(reader, subtrees, 0, limit) == expected(filled, subtrees)


def test_snapshot_page_since_cursor_and_read_point(
    log: SqliteEventLog, filled: dict[str, Event], reader: SqliteEventLogReader
) -> None:
    since = filled["/a/bc"].seq
    assert all_pages(reader, ("/a", "/b"), since, 2) == expected(filled, ("/a", "/b"), since)
    page = reader.snapshot_page(("/a/",), 0, "/a/b", 2)
    assert [e.topic for e in page.events] == ["/a/b/c", "/a/bc"]
    assert page.next == "/a/bc"
    assert page.sequence == 20
    last = reader.snapshot_page(("/a/",), 0, page.next, 2)
    assert [e.topic for e in last.events] == ["/a/c"]
    assert last.next is None
    log.append([ev("/a/c", 500)], 2.0)
    assert reader.snapshot_page((), 0, None, 1).sequence == 21
    with pytest.raises(ValueError):
        reader.snapshot_page((), 0, None, 0)


def test_snapshot_stream_equals_the_pages_at_one_read_point(
    log: SqliteEventLog, filled: dict[str, Event], reader: SqliteEventLogReader
) -> None:
    subtrees = ("/a/", "/b")
    sequence, stream = reader.snapshot(subtrees, 3)
    first = next(stream)
    # Appends during the stream are not seen by it: one read transaction.
    log.append([ev("/b/z", 700), ev("/a/b", 701)], 2.0)
    events = [first, *stream]
    assert sequence == 20
    assert events == expected(filled, subtrees, 3)
    assert events != all_pages(reader, subtrees, 3, 2)  # the pages see the new events
    filled["/a/b"], filled["/b/z"] = reader.replay((), 20, 10)[1], reader.replay((), 20, 10)[0]
    sequence, stream = reader.snapshot(subtrees, 3)
    assert sequence == 22
    assert list(stream) == all_pages(reader, subtrees, 3, 2) == expected(filled, subtrees, 3)


def test_an_open_stream_blocks_the_reader_until_closed(
    filled: dict[str, Event], reader: SqliteEventLogReader
) -> None:
    _, stream = reader.snapshot((), 0)
    next(stream)
    with pytest.raises(StoreError, match="snapshot stream"):
        reader.snapshot_page((), 0, None, 10)
    del stream  # dropping the stream ends its read transaction
    assert len(reader.snapshot_page((), 0, None, 100).events) == len(TOPICS)


def test_closing_a_reader_ends_its_stream(filled: dict[str, Event], log: SqliteEventLog) -> None:
    reader = log.reader()
    _, stream = reader.snapshot((), 0)
    next(stream)
    reader.close()
    assert list(stream) == []


ODD_TOPICS = ["a", "a\U0010ffff", "a\U0010ffffb", "b", "\ud7ff", "\ud7ffx", "\ue000", "aa", "ab"]


@pytest.fixture(scope="module")
def odd_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqliteEventLogReader]:
    log = SqliteEventLog(tmp_path_factory.mktemp("odd") / "events.db")
    log.append([ev(t, i) for i, t in enumerate(ODD_TOPICS)], 1.0)
    reader = log.reader()
    yield reader
    reader.close()
    log.close()


@settings(max_examples=200)
@given(
    subtrees=st.lists(
        st.sampled_from(["", "a", "a\U0010ffff", "\ud7ff", "\ue000", "aa", "b", "c", "\U0010ffff"]),
        max_size=4,
    ).map(tuple),
    limit=st.integers(1, 4),
)
def test_prefix_ranges_match_plain_prefix_matching(
    odd_log: SqliteEventLogReader, subtrees: tuple[str, ...], limit: int
) -> None:
    want = sorted(t for t in ODD_TOPICS if not subtrees or any(t.startswith(s) for s in subtrees))
    assert [e.topic for e in all_pages(odd_log, subtrees, 0, limit)] == want
    assert [e.topic for e in odd_log.snapshot(subtrees, 0)[1]] == want


# ----------------------------------------------------------------------- other reads


def test_replay_recent_topics_and_stats(
    log: SqliteEventLog, filled: dict[str, Event], reader: SqliteEventLogReader, path: Path
) -> None:
    everything = reader.replay((), 0, 100)
    assert [e.seq for e in everything] == list(range(1, 21))
    assert [e.seq for e in reader.replay(("/a/b", "/a/b/"), 3, 100)] == [4, 12, 13, 14]
    assert [e.seq for e in reader.replay(("/b/",), 0, 3)] == [7, 8, 17]

    assert [e.seq for e in reader.recent("/a/", 3)] == [15, 14, 13]
    assert [e.seq for e in reader.recent("/b", 10)] == [18, 17, 8, 7]
    assert reader.recent("/q", 10) == []

    stats = reader.topics("/a/", 3)
    assert [(t.topic, t.count, t.last_seq) for t in stats] == [
        ("/a/b", 2, 12),
        ("/a/b/c", 2, 13),
        ("/a/bc", 2, 14),
    ]
    assert stats[0].bytes == len(b"/a/b#1") + len(b"/a/b#101")
    assert [t.topic for t in reader.topics("/a/", 10, after="/a/bc")] == ["/a/c"]

    s = reader.stats()
    assert (s.first_seq, s.last_seq, s.events, s.topics) == (1, 20, 20, len(TOPICS))
    assert s.size_bytes >= path.stat().st_size > 0


def test_stats_of_an_empty_log(reader: SqliteEventLogReader) -> None:
    s = reader.stats()
    assert (s.first_seq, s.last_seq, s.events, s.topics) == (0, 0, 0, 0)


# ------------------------------------------------------------------------ retention


def test_retention_by_age_keeps_the_latest_of_each_topic(
    log: SqliteEventLog, reader: SqliteEventLogReader
) -> None:
    log.append([ev("/a", 1), ev("/b", 2), ev("/a", 3)], 100.0)  # 1 2 3
    log.append([ev("/a", 4), ev("/c", 5)], 200.0)  # 4 5
    log.append([ev("/c", 6)], 300.0)  # 6
    assert log.apply_retention(now=350.0, max_age=100.0, max_events=None) == 3  # 1 3 5
    assert [e.seq for e in reader.replay((), 0, 10)] == [2, 4, 6]
    assert {t.topic: (t.count, t.bytes) for t in reader.topics("", 10)} == {
        "/a": (1, len(b"/a#4")),
        "/b": (1, len(b"/b#2")),
        "/c": (1, len(b"/c#6")),
    }
    assert reader.stats().events == 3
    assert log.apply_retention(now=350.0, max_age=100.0, max_events=None) == 0
    # An event kept as its topic's latest goes once it is superseded and old.
    log.append([ev("/b", 7)], 400.0)
    assert log.apply_retention(now=1000.0, max_age=100.0, max_events=None) == 1  # 2
    assert [e.seq for e in reader.replay((), 0, 10)] == [4, 6, 7]
    # Deleted uuids leave the idempotency window: the same event is accepted again.
    assert [e.seq for e in log.append([ev("/a", 1)], 1001.0).stored] == [8]


def test_retention_by_count_in_chunks_and_bounded_calls(
    log: SqliteEventLog, reader: SqliteEventLogReader
) -> None:
    for b in range(5):
        log.append([ev(f"/t{i % 4}", b * 1000 + i) for i in range(1000)], float(b))
    assert log.apply_retention(now=5.0, max_age=None, max_events=4500, max_delete=300) == 300
    assert log.apply_retention(now=5.0, max_age=None, max_events=4500) == 200
    assert reader.replay((), 0, 1)[0].seq == 501
    # Everything but the four latest events goes; those stay whatever the limit.
    assert log.apply_retention(now=5.0, max_age=None, max_events=0) == 4496
    assert [e.seq for e in reader.replay((), 0, 10)] == [4997, 4998, 4999, 5000]
    assert (reader.stats().events, reader.stats().first_seq) == (4, 4997)
    assert sum(t.count for t in reader.topics("", 10)) == 4
    assert log.apply_retention(now=5.0, max_age=None, max_events=None) == 0


def test_retention_keeps_what_is_above_the_hold(
    log: SqliteEventLog, reader: SqliteEventLogReader
) -> None:
    log.append([ev("/t", n) for n in range(1, 5)], 100.0)  # 1..4
    log.append([ev("/t", n) for n in range(5, 9)], 200.0)  # 5..8
    log.hold_retention(0)
    assert log.apply_retention(now=1000.0, max_age=10.0, max_events=0) == 0
    # A hold inside a batch: the batch's old events below it go, the rest wait.
    log.hold_retention(2)
    assert log.apply_retention(now=250.0, max_age=100.0, max_events=None) == 2
    assert log.apply_retention(now=250.0, max_age=100.0, max_events=2) == 0
    assert [e.seq for e in reader.replay((), 0, 10)] == [3, 4, 5, 6, 7, 8]
    # Released, the rest of that old batch goes by age; the young batch stays.
    log.hold_retention(None)
    assert log.apply_retention(now=250.0, max_age=100.0, max_events=None) == 2
    assert [e.seq for e in reader.replay((), 0, 10)] == [5, 6, 7, 8]
    log.hold_retention(6)
    assert log.apply_retention(now=250.0, max_age=None, max_events=1) == 2  # 5 6
    assert [e.seq for e in reader.replay((), 0, 10)] == [7, 8]


def test_retention_during_an_index_merge_forgets_deleted_uuids(path: Path) -> None:
    log = SqliteEventLog(path, uuid_merge_every=10)
    for b in range(4):  # the first batch's uuids are being merged into the index
        log.append([ev("/t", b * 10 + i) for i in range(10)], float(b))
    assert log.apply_retention(now=10.0, max_age=None, max_events=5) == 35
    assert [e.seq for e in log.append([ev("/t", 0)], 11.0).stored] == [41]
    for b in range(3):  # the merge ends, with rows for events retention deleted
        log.append([ev("/u", 1000 + b)], 11.0)
    result = log.append([ev("/t", n) for n in [*range(10), 12, 36, 39]], 12.0)
    assert result.duplicates == [(uid(0), 41), (uid(36), 37), (uid(39), 40)]
    assert [e.uuid for e in result.stored] == [uid(n) for n in [*range(1, 10), 12]]
    log.close()


# ------------------------------------------------------------------------ durability

CHILD = """
import sys, time
from pathlib import Path
from zbus.eventbus.server.store import NewEvent, SqliteEventLog
log = SqliteEventLog(Path(sys.argv[1]))
n = 0
while True:
    batch = [
        NewEvent(f"/k/{(n + k) % 13}", "child", "2026-01-01T00:00:00Z",
                 "00000000-0000-4000-8000-%012x" % (n + k), b"payload-%d" % (n + k))
        for k in range(50)
    ]
    last = log.append(batch, time.time()).stored[-1].seq
    n += 50
    print(last, flush=True)
"""


def test_acknowledged_events_survive_kill_9(path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    acknowledged = []
    try:
        for line in child.stdout:
            acknowledged.append(int(line))
            if len(acknowledged) == 60:
                break
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
    assert acknowledged == [50 * (i + 1) for i in range(60)], "child died early"

    log = SqliteEventLog(path)
    last = log.last_sequence()
    assert last >= acknowledged[-1]
    assert last % 50 == 0  # batches are atomic: an interrupted one left nothing
    reader = log.reader()
    events = reader.replay((), 0, last + 1)
    assert [e.seq for e in events] == list(range(1, last + 1))
    assert all(e.data == b"payload-%d" % (e.seq - 1) for e in events)
    reader.close()
    # The log goes on from where it was.
    assert log.append([ev("/after", 10**9)], 1.0).stored[0].seq == last + 1
    log.close()


# --------------------------------------------------------------------- foreign files


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not an SQLite database, just some text\n" * 200)
    with pytest.raises(StoreError, match=r"junk\.db"):
        SqliteEventLog(junk)


def test_another_applications_database_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE things(x)")
    conn.close()
    with pytest.raises(StoreError, match=r"other\.db.*not a zbus event log"):
        SqliteEventLog(other)


def test_an_unknown_schema_version_is_refused(path: Path) -> None:
    SqliteEventLog(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(StoreError, match=r"events\.db.*version 99"):
        SqliteEventLog(path)


def test_a_missing_directory_is_reported(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="nowhere"):
        SqliteEventLog(tmp_path / "nowhere" / "events.db")


def test_a_damaged_log_is_reported(path: Path) -> None:
    log = SqliteEventLog(path)
    log.append([ev(f"/t{i}", i, bytes(200)) for i in range(200)], 1.0)
    log.close()
    with path.open("r+b") as f:  # keep the header page, overwrite every table page
        f.seek(4096)
        f.write(b"\xa5" * (path.stat().st_size - 4096))
    with pytest.raises(StoreError, match=r"events\.db"):
        SqliteEventLog(path)


def test_several_holders_hold_retention_and_the_lowest_wins(tmp_path: Path) -> None:
    log = SqliteEventLog(tmp_path / "events.db")
    try:
        log.append([ev("/h/a", 900 + i) for i in range(10)] + [ev("/h/b", 950)], 0.0)
        log.hold_retention(8)  # the archive
        log.hold_retention(3, holder="pppp")
        assert log.apply_retention(now=1.0, max_age=None, max_events=1) == 3  # 1..3 only
        log.hold_retention(None, holder="pppp")  # the door holds nothing now
        assert log.apply_retention(now=1.0, max_age=None, max_events=1) == 5  # 4..8
        log.hold_retention(None)
        assert log.apply_retention(now=1.0, max_age=None, max_events=1) == 1  # 9 (10 latest)
    finally:
        log.close()
