"""The broker's durable job store: SQLite in WAL mode, one writer thread, many readers.

Layout (schema version 1; the file is marked with ``PRAGMA application_id``):

- ``jobs``: one row per job, every field of ``Job``. ``seq`` (the rowid) is the order of
  a job's first write, so new jobs land on the right edge of the table and "newest
  first" is a backwards walk; an upsert keeps the row's ``seq``. The state is a small
  integer (``_STATES``: the live states first, so a job is live when ``state < 2``) and
  the headers are msgpack.
- Indexes, one per query that needs one (each costs every upsert a b-tree update):
  ``jobs_id`` (unique id: the upsert key, get), ``jobs_queue`` (queue, state: lists
  and counts), ``jobs_live`` (partial: the live rows in ``seq`` order, so ``load`` reads
  the live jobs however many finished ones the table holds) and ``jobs_done`` (partial:
  the terminal rows by update time, so ``purge`` takes the oldest first).
- ``schedules``: one row per schedule, keyed by id.

Cost: job ids are random (uuids), so each new job's id lands on its own page of
``jobs_id`` and a commit of N new jobs puts about N index pages into the WAL, which
checkpoints then copy into the database; updates of known jobs touch only recent pages.
Checkpoints run every 4,000 WAL pages: larger ones write more jobs per second but stall
the commit that runs them for longer (measured: ~60 ms at 4,000 pages, ~150 ms at 16,000).

Durability: ``synchronous=NORMAL`` in WAL mode keeps every committed transaction across a
kill of the process; ``fsync=True`` selects ``FULL`` to also survive a power cut. Plain
blocking code for threads, never for an asyncio loop.
"""

from __future__ import annotations

import builtins
import heapq
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgpack

from zbus.broker.core.model import Job, JobState, Schedule
from zbus.common.sqlite import Store, StoreFormat, StoreReader
from zbus.common.sqlite import StoreError as StoreError  # re-exported

SCHEMA_VERSION = 1
_WHAT = "job store"
APPLICATION_ID = 0x7A626A73  # "zbjs"

# Stored state codes: part of the schema, never reorder. Live states come first.
_STATES = (
    JobState.QUEUED,
    JobState.RUNNING,
    JobState.SUCCEEDED,
    JobState.FAILED,
    JobState.DEAD,
    JobState.CANCELLED,
)
_CODE = {state: code for code, state in enumerate(_STATES)}
_LIVE = 2  # codes below this are the live (non-terminal) states

_SCHEMA = f"""
CREATE TABLE jobs(
    seq INTEGER PRIMARY KEY, id TEXT NOT NULL, queue TEXT NOT NULL, headers BLOB NOT NULL,
    body BLOB NOT NULL, client BLOB, state INTEGER NOT NULL, attempts INTEGER NOT NULL,
    max_retries INTEGER NOT NULL, timeout REAL, not_before REAL NOT NULL,
    created REAL NOT NULL, updated REAL NOT NULL, worker BLOB, started REAL, result BLOB,
    error TEXT, schedule_id TEXT);
CREATE UNIQUE INDEX jobs_id ON jobs(id);
CREATE INDEX jobs_queue ON jobs(queue, state);
CREATE INDEX jobs_live ON jobs(seq) WHERE state < {_LIVE};
CREATE INDEX jobs_done ON jobs(updated) WHERE state >= {_LIVE};
CREATE TABLE schedules(
    id TEXT PRIMARY KEY, queue TEXT NOT NULL, headers BLOB NOT NULL, body BLOB NOT NULL,
    interval REAL, cron TEXT, next_run REAL NOT NULL, created REAL NOT NULL) WITHOUT ROWID;
"""
_FORMAT = StoreFormat(_WHAT, APPLICATION_ID, SCHEMA_VERSION, _SCHEMA, 65_536, 16_384)
_JOB_FIELDS = (
    "id, queue, headers, body, client, state, attempts, max_retries, timeout, not_before,"
    " created, updated, worker, started, result, error, schedule_id"
)
_SELECT_JOB = f"SELECT {_JOB_FIELDS} FROM jobs"
_UPSERT_JOB = (
    f"INSERT INTO jobs({_JOB_FIELDS}) VALUES ({', '.join('?' * 17)})"
    " ON CONFLICT(id) DO UPDATE SET "
    + ", ".join(f"{f} = excluded.{f}" for f in _JOB_FIELDS.replace(" ", "").split(",")[1:])
)
_UPSERT_SCHEDULE = "INSERT OR REPLACE INTO schedules VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
_PURGE_CHUNK = 2_000


def _pack(headers: tuple[tuple[str, str], ...]) -> bytes:
    return msgpack.packb(headers)  # type: ignore[no-any-return]


def _unpack(data: bytes) -> tuple[tuple[str, str], ...]:
    return msgpack.unpackb(data, use_list=False)  # type: ignore[no-any-return]


def job_row(j: Job) -> tuple[Any, ...]:
    """A job as the row the jobs table stores (the columns in order)."""
    return (
        j.id, j.queue, _pack(j.headers), j.body, j.client, _CODE[j.state], j.attempts,
        j.max_retries, j.timeout, j.not_before, j.created, j.updated, j.worker, j.started,
        j.result, j.error, j.schedule_id,
    )  # fmt: skip


def _job(r: tuple[Any, ...]) -> Job:
    return Job(
        r[0], r[1], _unpack(r[2]), r[3], r[4], _STATES[r[5]], r[6], r[7], r[8], r[9], r[10],
        r[11], r[12], r[13], r[14], r[15], r[16],
    )  # fmt: skip


def _schedule(r: tuple[Any, ...]) -> Schedule:
    return Schedule(r[0], r[1], _unpack(r[2]), r[3], r[4], r[5], r[6], r[7])


def _get(conn: sqlite3.Connection, job_id: str) -> Job | None:
    row = conn.execute(f"{_SELECT_JOB} WHERE id = ?", (job_id,)).fetchone()
    return None if row is None else _job(row)


class JobStore(Store):
    """Jobs and schedules in one SQLite file. Owned by one writer thread at a time;
    ``reader()`` gives other threads their own read connections."""

    FORMAT = _FORMAT

    def __init__(self, path: Path, *, fsync: bool = False, checkpoint_pages: int = 4000) -> None:
        super().__init__(path, fsync=fsync, checkpoint_pages=checkpoint_pages)

    def write(
        self,
        jobs: Sequence[Job],
        schedules: Sequence[Schedule] = (),
        deleted_schedules: Sequence[str] = (),
    ) -> None:
        """Upsert the jobs (whole rows, by id; a later duplicate wins) and schedules, then
        delete the named schedules, in one transaction: durable once this returns."""
        if not (jobs or schedules or deleted_schedules):
            return
        job_rows = [job_row(j) for j in jobs]
        schedule_rows = [
            (s.id, s.queue, _pack(s.headers), s.body, s.interval, s.cron, s.next_run, s.created)
            for s in schedules
        ]
        with self.transaction("write") as conn:
            if job_rows:
                conn.executemany(_UPSERT_JOB, job_rows)
            if schedule_rows:
                conn.executemany(_UPSERT_SCHEDULE, schedule_rows)
            if deleted_schedules:
                conn.executemany(
                    "DELETE FROM schedules WHERE id = ?", [(i,) for i in deleted_schedules]
                )

    def load(self) -> tuple[list[Job], list[Schedule]]:
        """Every live job (queued, running) in order of first write, and every schedule."""
        conn = self._conn
        conn.execute("BEGIN")
        try:
            jobs = [
                _job(r)
                for r in conn.execute(
                    f"{_SELECT_JOB} INDEXED BY jobs_live WHERE state < {_LIVE} ORDER BY seq"
                )
            ]
            schedules = [_schedule(r) for r in conn.execute("SELECT * FROM schedules ORDER BY id")]
        finally:
            conn.execute("COMMIT")
        return jobs, schedules

    def get(self, job_id: str) -> Job | None:
        return _get(self._conn, job_id)

    def purge(self, now: float, result_ttl: float, *, max_delete: int | None = None) -> int:
        """Delete terminal jobs last updated more than ``result_ttl`` seconds before
        ``now``, oldest first, in transactions of a few thousand rows; returns how many.
        ``max_delete`` bounds one call, so that a writer can interleave its writes (call
        again while it returns ``max_delete``)."""
        deleted = 0
        while max_delete is None or deleted < max_delete:
            chunk = _PURGE_CHUNK if max_delete is None else min(_PURGE_CHUNK, max_delete - deleted)
            with self.transaction("purge") as conn:
                n = conn.execute(
                    "DELETE FROM jobs WHERE seq IN (SELECT seq FROM jobs"
                    f" WHERE state >= {_LIVE} AND updated < ? ORDER BY updated LIMIT ?)",
                    (now - result_ttl, chunk),
                ).rowcount
            deleted += n
            if n < chunk:
                break
        return deleted

    def reader(self) -> JobReader:
        return JobReader(self.path)


class JobReader(StoreReader):
    """A read-only view with its own connection, for one thread at a time (the admin
    API). Readers never block each other or the writer (WAL snapshots)."""

    FORMAT = _FORMAT

    def get(self, job_id: str) -> Job | None:
        return _get(self._conn, job_id)

    def list(
        self, queue: str | None, state: JobState | None, limit: int, before: str | None = None
    ) -> builtins.list[Job]:
        """Up to ``limit`` jobs of the queue and state (None: any), newest first (by
        first write), from after the job ``before`` (the last id of the previous page).

        Raises ValueError when ``before`` names no stored job (purged meanwhile).
        """
        if limit < 1:
            raise ValueError("limit must be at least 1")
        conn = self._conn
        conn.execute("BEGIN")  # one read snapshot for the cursor and the pages
        try:
            below = 2**63 - 1
            if before is not None:
                row = conn.execute("SELECT seq FROM jobs WHERE id = ?", (before,)).fetchone()
                if row is None:
                    raise ValueError(f"unknown cursor: no job {before!r}")
                below = row[0]
            if queue is None and state is None:
                rows = conn.execute(
                    f"{_SELECT_JOB} WHERE seq < ? ORDER BY seq DESC LIMIT ?", (below, limit)
                ).fetchall()
            else:
                # Each (queue, state) pair is one ordered range of the covering index
                # jobs_queue: take the newest of each, keep the newest of all, then read
                # those rows, rather than sort a whole queue or state.
                queues = [queue] if queue is not None else self._queues()
                states = [_CODE[state]] if state is not None else range(len(_STATES))
                sql = (
                    "SELECT seq FROM jobs WHERE queue = ? AND state = ? AND seq < ?"
                    " ORDER BY seq DESC LIMIT ?"
                )
                seqs = heapq.nlargest(
                    limit,
                    (
                        seq
                        for q in queues
                        for s in states
                        for (seq,) in conn.execute(sql, (q, s, below, limit))
                    ),
                )
                by_seq = f"{_SELECT_JOB} WHERE seq = ?"
                rows = [conn.execute(by_seq, (seq,)).fetchone() for seq in seqs]
        finally:
            conn.execute("COMMIT")
        return [_job(r) for r in rows]

    def _queues(self) -> builtins.list[str]:
        """The distinct queues, one index seek each."""
        conn = self._conn
        queues: builtins.list[str] = []
        row = conn.execute("SELECT min(queue) FROM jobs").fetchone()
        while row is not None and row[0] is not None:
            queues.append(row[0])
            row = conn.execute(
                "SELECT queue FROM jobs WHERE queue > ? ORDER BY queue LIMIT 1", (row[0],)
            ).fetchone()
        return queues

    def counts(self) -> dict[str, dict[str, int]]:
        """queue -> state -> number of stored jobs, every state present for each queue."""
        out: dict[str, dict[str, int]] = {}
        for queue, code, n in self._conn.execute(
            "SELECT queue, state, count(*) FROM jobs GROUP BY queue, state"
        ):
            per = out.get(queue)
            if per is None:
                per = out[queue] = {s.value: 0 for s in _STATES}
            per[_STATES[code].value] = n
        return out

    def schedules(self) -> builtins.list[Schedule]:
        return [_schedule(r) for r in self._conn.execute("SELECT * FROM schedules ORDER BY id")]
