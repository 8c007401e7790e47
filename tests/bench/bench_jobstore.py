"""Job store (services/zbus/broker/server/store.py): group-commit upsert rate, load and purge times.

- Upsert: ``JobStore.write`` of batches of 500 jobs, one transaction each, on a table
  already holding ``ZBUS_BENCH_TERMINAL_JOBS`` finished jobs (default 500,000). Two cases:
  new jobs only, and the broker's steady state (each batch a third new jobs, a third
  handed to workers, a third finished). Baseline: the same row tuples by a plain
  ``executemany`` INSERT into a bare table with no key or index, one transaction per
  batch, same pragmas, measured in alternation with the subject. The figure is the best
  round; the target is absolute: >= 30,000 rows/s on the machine the broker runs on.
- Load (``load()`` of the live jobs beside the finished ones) and purge (the oldest
  200,000 finished jobs, in chunks) are printed for information.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import sqlite3
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.bench.harness import Result, report
from zbus.broker.core.model import Job, JobState
from zbus.broker.server.store import JobStore, job_row

BATCH = 500
ROUND = 60  # batches per timed round: 30,000 rows
ROUNDS = 7
TARGET = 30_000  # rows/s
BODY = b'["run", {"path": "zbus.jobs.bench", "callable": "noop", "args": [], "kwargs": {}}]'
HEADERS = (("guarantee", ""), ("retry-count", "3"))


_QUEUES = itertools.cycle([f"queue{i}" for i in range(4)])


def _new(now: float, state: JobState = JobState.QUEUED) -> Job:
    # Random ids (eventmq's msgids are uuid4): the id index takes them all over its pages.
    return Job(
        str(uuid.uuid4()), next(_QUEUES), HEADERS, BODY, b"\x00k\x8bEg", state, 0, 3, None,
        0.0, now, now,
    )  # fmt: skip


def _fresh(state: JobState = JobState.QUEUED) -> Iterator[list[Job]]:
    while True:
        now = time.time()
        yield [_new(now, state) for _ in range(BATCH)]


def _lifecycle() -> Iterator[list[Job]]:
    """Batches as the broker writes them: new jobs, jobs handed out, jobs finished."""
    queued: deque[Job] = deque()
    running: deque[Job] = deque()
    while True:
        now = time.time()
        batch: list[Job] = []
        while running and len(batch) < BATCH // 3:
            j = running.popleft()
            batch.append(
                dataclasses.replace(
                    j, state=JobState.SUCCEEDED, updated=now, result=b'{"value": null}'
                )
            )
        while queued and len(batch) < 2 * BATCH // 3:
            j = dataclasses.replace(
                queued.popleft(), state=JobState.RUNNING, attempts=1, worker=b"\x00w\x01",
                started=now, updated=now,
            )  # fmt: skip
            running.append(j)
            batch.append(j)
        while len(batch) < BATCH:
            j = _new(now)
            queued.append(j)
            batch.append(j)
        yield batch


def _open_bare(path: Path) -> sqlite3.Connection:
    bare = sqlite3.connect(path, isolation_level=None)
    bare.execute("PRAGMA journal_mode = WAL")
    bare.execute("PRAGMA synchronous = NORMAL")
    bare.execute("PRAGMA cache_size = -65536")
    bare.execute(f"CREATE TABLE bare({', '.join(f'c{i}' for i in range(17))})")
    return bare


def _rates(
    store: JobStore, bare: sqlite3.Connection, source: Iterator[list[Job]]
) -> tuple[float, float]:
    """Best subject and baseline rates over ROUNDS rounds, measured in alternation."""
    insert = f"INSERT INTO bare VALUES ({', '.join('?' * 17)})"
    best_s = best_b = float("inf")
    for _ in range(ROUNDS):
        batches = [next(source) for _ in range(ROUND)]
        rows: list[list[tuple[Any, ...]]] = [[job_row(j) for j in b] for b in batches]
        t0 = time.perf_counter()
        for batch in batches:
            store.write(batch)
        t1 = time.perf_counter()
        for chunk in rows:
            bare.execute("BEGIN")
            bare.executemany(insert, chunk)
            bare.execute("COMMIT")
        t2 = time.perf_counter()
        best_s, best_b = min(best_s, t1 - t0), min(best_b, t2 - t1)
    n = ROUND * BATCH
    return n / best_s, n / best_b


def main() -> bool:
    n_done = int(os.environ.get("ZBUS_BENCH_TERMINAL_JOBS", "500000"))
    with tempfile.TemporaryDirectory(prefix="zbus-bench-") as tmp:
        root = Path(tmp)
        store = JobStore(root / "jobs.db")
        bare = _open_bare(root / "bare.db")
        t0 = time.perf_counter()
        done, fresh, cycle = _fresh(JobState.SUCCEEDED), _fresh(), _lifecycle()
        for _ in range(n_done // BATCH):
            store.write(next(done))
        fill = n_done / (time.perf_counter() - t0)
        print(f"(filling {n_done:,} finished jobs, batches of {BATCH}: {fill:,.0f} rows/s)")

        results = [
            Result(f"upsert new jobs, batches of {BATCH}", *_rates(store, bare, fresh), None),
            Result(f"upsert steady state, batches of {BATCH}", *_rates(store, bare, cycle), None),
        ]
        bare.close()
        ok = report(results, "job store (SQLite WAL, synchronous=NORMAL)")
        for r in results:
            met = r.rate >= TARGET
            verdict = "met" if met else "NOT met"
            print(f"{r.name}: {r.rate:,.0f} rows/s, target >= {TARGET:,}/s  {verdict}")
            ok = ok and met

        t0 = time.perf_counter()
        live, _ = store.load()
        print(f"load: {len(live):,} live jobs in {time.perf_counter() - t0:.3f} s", end="")
        reader = store.reader()
        counts = reader.counts()
        reader.close()
        total = sum(sum(per.values()) for per in counts.values())
        print(f" (table of {total:,} jobs)")
        t0 = time.perf_counter()
        purged = store.purge(time.time() + 1, 0.0, max_delete=200_000)
        spent = time.perf_counter() - t0
        print(f"purge: {purged:,} finished jobs in {spent:.2f} s ({purged / spent:,.0f}/s)")
        store.close()
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
