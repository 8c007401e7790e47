"""The job store on real SQLite files: round trips, upserts, load, purge, reader lists and
counts, schedules, crash durability and refusal of foreign files."""

from __future__ import annotations

import dataclasses
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from zbus.broker.core.model import TERMINAL, Job, JobState, Schedule
from zbus.broker.server.store import JobReader, JobStore, StoreError
from zbus.eventbus.server.store import SqliteEventLog

ROOT = Path(__file__).resolve().parents[3]
T0 = 1_763_800_000.123456


def job(n: int, queue: str = "default", state: JobState = JobState.QUEUED, **kw: object) -> Job:
    fields: dict[str, object] = {
        "id": f"job-{n}",
        "queue": queue,
        "headers": (("retry-count", "3"),),
        "body": b'["run", {"n": %d}]' % n,
        "client": b"\x00\x80\x00\x41\xa7",
        "state": state,
        "attempts": 0,
        "max_retries": 3,
        "timeout": None,
        "not_before": 0.0,
        "created": T0 + n,
        "updated": T0 + n,
    }
    fields.update(kw)
    return Job(**fields)  # type: ignore[arg-type]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "jobs.db"


@pytest.fixture
def store(path: Path) -> Iterator[JobStore]:
    store = JobStore(path)
    yield store
    store.close()


@pytest.fixture
def reader(store: JobStore) -> Iterator[JobReader]:
    reader = store.reader()
    yield reader
    reader.close()


# ----------------------------------------------------------------------- round trips


def full_jobs() -> list[Job]:
    """One job per state with every optional field set, and one with every field empty."""
    out = [
        Job(
            id=f"full-{state.value}",
            queue="q.é",
            headers=(("retry-count", "2"), ("timeout", "1.5"), ("x", "a,b:c"), ("x", "")),
            body=bytes(range(256)),
            client=b"\x00\xff\x00",
            state=state,
            attempts=7,
            max_retries=9,
            timeout=12.25,
            not_before=T0 + 0.000001,
            created=T0,
            updated=T0 + 1 / 3,
            worker=b"\x00\x01\xfe",
            started=T0 + 0.5,
            result=b"\x00{}",
            error="worker expired\nafter 3 heartbeats",
            schedule_id="sched-\U0001f600",
        )
        for state in JobState
    ]
    out.append(
        Job(
            id="",
            queue="",
            headers=(),
            body=b"",
            client=None,
            state=JobState.QUEUED,
            attempts=0,
            max_retries=0,
            timeout=None,
            not_before=-1.0,
            created=0.0,
            updated=0.0,
        )
    )
    return out


def test_every_field_of_every_state_round_trips_across_reopen(path: Path) -> None:
    jobs = full_jobs()
    store = JobStore(path)
    store.write(jobs)
    assert [store.get(j.id) for j in jobs] == jobs
    store.close()

    store = JobStore(path)
    reader = store.reader()
    for j in jobs:
        got = store.get(j.id)
        assert got == j
        assert got is not None and type(got.state) is JobState and type(got.headers) is tuple
        assert reader.get(j.id) == j
    assert store.get("missing") is None
    assert reader.get("missing") is None
    reader.close()
    store.close()


def test_schedules_round_trip_replace_and_delete(store: JobStore, reader: JobReader) -> None:
    every = Schedule("s-every", "q", (("a", "1"),), b"\x00body", 2.5, None, T0 + 2.5, T0)
    cron = Schedule("s-cron", "q2", (), b"", None, "*/5 * * * 1-5", T0 + 300, T0 - 1)
    store.write([], [every, cron])
    assert reader.schedules() == [cron, every]  # by id
    assert store.load() == ([], [cron, every])

    moved = dataclasses.replace(every, next_run=T0 + 5.0, interval=None, cron="0 0 * * *")
    store.write([], [moved], ["s-cron", "never-existed"])
    assert reader.schedules() == [moved]
    store.write([], deleted_schedules=["s-every"])
    assert reader.schedules() == []


# --------------------------------------------------------------------------- writes


def test_upsert_replaces_the_whole_row_and_keeps_its_place(
    store: JobStore, reader: JobReader
) -> None:
    first = [job(i) for i in range(3)]
    store.write(first)
    full = full_jobs()[0]
    replaced = dataclasses.replace(full, id="job-0", queue="other", created=T0 + 100)
    store.write([replaced])
    assert store.get("job-0") == replaced
    # And back: every field set to None again is stored as None.
    store.write([first[0]])
    assert store.get("job-0") == first[0]
    # Still the oldest: lists order jobs by their first write.
    assert [j.id for j in reader.list(None, None, 10)] == ["job-2", "job-1", "job-0"]


def test_a_later_duplicate_in_one_write_wins(store: JobStore) -> None:
    a = job(1)
    b = dataclasses.replace(a, state=JobState.RUNNING, attempts=1, worker=b"w")
    store.write([a, b])
    assert store.get(a.id) == b


def test_a_failed_write_leaves_nothing_behind(store: JobStore, reader: JobReader) -> None:
    sched = Schedule("s", "q", (), b"", 1.0, None, T0, T0)
    store.write([job(1)], [sched])
    bad = dataclasses.replace(job(3), body=object())  # type: ignore[arg-type]
    with pytest.raises(StoreError, match=r"jobs\.db.*write"):
        store.write(
            [dataclasses.replace(job(1), state=JobState.DEAD), job(2), bad],
            [dataclasses.replace(sched, queue="other")],
            ["s"],
        )
    assert store.get("job-1") == job(1)
    assert store.get("job-2") is None
    assert reader.schedules() == [sched]
    store.write([job(2)])  # the store is still usable
    assert store.get("job-2") == job(2)


def test_fsync_mode_writes_and_reopens(path: Path) -> None:
    store = JobStore(path, fsync=True)
    assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    store.write([job(1)])
    store.close()
    store = JobStore(path)
    assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert store.get("job-1") == job(1)
    store.close()


# ----------------------------------------------------------------------------- load


def test_load_returns_exactly_the_live_jobs_in_order(store: JobStore) -> None:
    jobs = [job(i, state=list(JobState)[i % len(JobState)]) for i in range(60)]
    store.write(jobs[:30])
    store.write(jobs[30:])
    live = [j for j in jobs if not j.state.terminal]
    assert {j.state for j in live} == {JobState.QUEUED, JobState.RUNNING}
    assert store.load() == (live, [])

    # Moves in both directions: a live job finishes, a cancelled one is stored queued.
    done = dataclasses.replace(jobs[0], state=JobState.SUCCEEDED, result=b"ok")
    back = dataclasses.replace(jobs[5], state=JobState.QUEUED)
    store.write([done, back])
    expected = [
        back if j.id == back.id else j
        for j in jobs
        if j.id == back.id or (not j.state.terminal and j.id != done.id)
    ]
    assert [j.id for j in expected][:4] == ["job-1", "job-5", "job-6", "job-7"]
    assert store.load()[0] == expected


# ---------------------------------------------------------------------------- purge


def test_purge_by_ttl_keeps_live_jobs_whatever_their_age(store: JobStore) -> None:
    now = T0 + 10_000
    old_live = [job(i, state=s, updated=0.0) for i, s in enumerate(JobState) if not s.terminal]
    old_done = [job(10 + i, state=s, updated=now - 61) for i, s in enumerate(TERMINAL)]
    young_done = [job(20 + i, state=s, updated=now - 59) for i, s in enumerate(TERMINAL)]
    store.write(old_live + old_done + young_done)
    assert store.purge(now, 60.0) == len(old_done)
    assert all(store.get(j.id) is None for j in old_done)
    assert all(store.get(j.id) == j for j in old_live + young_done)
    assert store.purge(now, 60.0) == 0
    assert store.purge(now + 2, 60.0) == len(young_done)
    assert store.load()[0] == old_live


def test_purge_works_in_chunks_and_bounded_calls(store: JobStore, reader: JobReader) -> None:
    done = [job(i, state=JobState.SUCCEEDED, updated=float(i)) for i in range(5_000)]
    store.write([*done, job(-1, updated=0.0)])
    assert store.purge(2_500.0, 0.0, max_delete=1_000) == 1_000
    assert store.get("job-999") is None and store.get("job-1000") is not None  # oldest first
    assert store.purge(2_500.0, 0.0) == 1_500
    assert store.purge(1e9, 0.0) == 2_500  # more than one chunk
    assert reader.counts() == {"default": dict.fromkeys(JobState, 0) | {"queued": 1}}


# ---------------------------------------------------------------------------- reader


@pytest.fixture
def mixed(store: JobStore) -> list[Job]:
    """Jobs over three queues and every state, written in several batches; newest first."""
    states = list(JobState)
    jobs = [job(i, f"q{i % 3}", states[(i // 3) % len(states)]) for i in range(90)]
    for k in range(0, 90, 25):
        store.write(jobs[k : k + 25])
    # Later updates do not move a job in the lists.
    store.write([dataclasses.replace(jobs[4], state=JobState.DEAD, error="gone")])
    jobs[4] = dataclasses.replace(jobs[4], state=JobState.DEAD, error="gone")
    return jobs[::-1]


def pages(reader: JobReader, queue: str | None, state: JobState | None, limit: int) -> list[Job]:
    out: list[Job] = []
    before: str | None = None
    for _ in range(1000):  # bounded: a cursor that does not advance must fail, not hang
        page = reader.list(queue, state, limit, before)
        assert len(page) <= limit
        out += page
        if len(page) < limit:
            return out
        before = page[-1].id
    raise AssertionError("paging does not end")


@pytest.mark.parametrize("queue", [None, "q0", "q2", "nope"])
@pytest.mark.parametrize("state", [None, JobState.QUEUED, JobState.DEAD, JobState.SUCCEEDED])
def test_list_filters_orders_newest_first_and_pages(
    mixed: list[Job], reader: JobReader, queue: str | None, state: JobState | None
) -> None:
    expected = [j for j in mixed if queue in (None, j.queue) and state in (None, j.state)]
    assert reader.list(queue, state, 1000) == expected
    assert reader.list(queue, state, 4) == expected[:4]
    for limit in (1, 7):
        assert pages(reader, queue, state, limit) == expected


def test_list_rejects_a_bad_limit_and_an_unknown_cursor(
    mixed: list[Job], reader: JobReader
) -> None:
    with pytest.raises(ValueError, match="limit"):
        reader.list(None, None, 0)
    with pytest.raises(ValueError, match="no job 'gone'"):
        reader.list("q0", None, 5, "gone")
    # A cursor from another queue is a position in the common order.
    older = [j for j in mixed if j.queue == "q0" and int(j.id.removeprefix("job-")) < 50]
    assert reader.list("q0", None, 2, "job-50") == older[:2]
    assert older[0].id == "job-48"


def test_counts_per_queue_and_state(mixed: list[Job], reader: JobReader) -> None:
    expected: dict[str, dict[str, int]] = {}
    for j in mixed:
        per = expected.setdefault(j.queue, dict.fromkeys(JobState, 0))
        per[j.state] += 1
    counts = reader.counts()
    assert counts == expected
    assert all(type(s) is str for per in counts.values() for s in per)
    assert set(expected) == {"q0", "q1", "q2"}


def test_a_reader_sees_each_commit_and_is_read_only(store: JobStore, reader: JobReader) -> None:
    assert reader.counts() == {}
    assert reader.list(None, None, 5) == []
    store.write([job(1)])
    assert reader.get("job-1") == job(1)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader._conn.execute("DELETE FROM jobs")


# ------------------------------------------------------------------------ durability

CHILD = """
import sys
from pathlib import Path
from zbus.broker.core.model import Job, JobState, Schedule
from zbus.broker.server.store import JobStore
store = JobStore(Path(sys.argv[1]))
n = 0
while True:
    jobs = [
        Job(f"{n}-{k}", "q", (("batch", str(n)),), b"body-%d" % k, None, JobState.QUEUED,
            0, 3, None, 0.0, 1.0, 1.0)
        for k in range(300)
    ]
    if n:  # finish the previous batch
        jobs += [
            Job(f"{n - 1}-{k}", "q", (("batch", str(n - 1)),), b"body-%d" % k, None,
                JobState.SUCCEEDED, 1, 3, None, 0.0, 1.0, 2.0, result=b"done")
            for k in range(300)
        ]
    store.write(jobs, [Schedule(f"s{n}", "q", (), b"", 1.0, None, 0.0, 0.0)])
    print(n, flush=True)
    n += 1
"""


def test_written_batches_survive_kill_9(path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    written: list[int] = []
    try:
        for line in child.stdout:
            written.append(int(line))
            if len(written) == 41:  # prime: no commit period lines up with it
                break
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
    assert written == list(range(41)), "child died early"

    store = JobStore(path)
    jobs, schedules = store.load()
    reader = store.reader()
    counts = reader.counts()["q"]
    # Every printed batch is there; batches are atomic, so the one the kill interrupted is
    # there whole or not at all.
    last = len(schedules) - 1
    assert last >= written[-1]
    assert [s.id for s in schedules] == sorted(f"s{n}" for n in range(last + 1))
    assert [j.id for j in jobs] == [f"{last}-{k}" for k in range(300)]
    assert counts["succeeded"] == 300 * last and counts["queued"] == 300
    assert sum(counts.values()) == 300 * (last + 1)
    assert reader.get("0-299") == Job(
        "0-299", "q", (("batch", "0"),), b"body-299", None, JobState.SUCCEEDED,
        1, 3, None, 0.0, 1.0, 2.0, result=b"done",
    )  # fmt: skip
    reader.close()
    store.close()


# --------------------------------------------------------------------- foreign files


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not an SQLite database, just some text\n" * 200)
    with pytest.raises(StoreError, match=r"junk\.db"):
        JobStore(junk)


def test_another_applications_database_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE jobs(x)")
    conn.close()
    with pytest.raises(StoreError, match=r"other\.db.*not a zbus job store"):
        JobStore(other)


def test_an_event_log_is_not_a_job_store(tmp_path: Path) -> None:
    SqliteEventLog(tmp_path / "events.db").close()
    with pytest.raises(StoreError, match=r"events\.db.*not a zbus job store"):
        JobStore(tmp_path / "events.db")


def test_an_unknown_schema_version_is_refused(path: Path) -> None:
    JobStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(StoreError, match=r"jobs\.db.*version 99"):
        JobStore(path)


def test_a_missing_directory_is_reported(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="nowhere"):
        JobStore(tmp_path / "nowhere" / "jobs.db")
    with pytest.raises(StoreError, match="nowhere"):
        JobReader(tmp_path / "nowhere" / "jobs.db")
