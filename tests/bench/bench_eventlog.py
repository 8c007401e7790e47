"""Event log (zbus.eventbus.server.store): append rate, reopen time, snapshot stream time.

- Append: batches of 1,000 events with 100-byte payloads over 1,000 topics, through
  ``SqliteEventLog.append`` (duplicate check, sequencing, topic index, commit per batch).
  Baseline: the same rows by a plain ``executemany`` INSERT into a bare table with no
  index, one transaction per batch, same pragmas. An untimed first round fills the uuid
  index; the timed rounds follow on the same growing log, each including one uuid index
  merge. The figure is the best round; the sustained rate over all rounds is printed too.
  Target (issue 20): at least 0.6 of the bare insert's rate in the same run.
- Reopen: opening a log of ``ZBUS_BENCH_LOG_EVENTS`` events (default 1,000,000; the
  full-size run sets 10,000,000) until ``last_sequence()`` answers. Target < 5 s.
- Snapshot: streaming the latest event of 1,000,000 topics with ``snapshot()``. Target < 5 s.
"""

from __future__ import annotations

import os
import random
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.bench.harness import Result, report
from zbus.eventbus.server.store import NewEvent, SqliteEventLog

BATCH = 1_000
ROUND = 200_000  # events per timed round: one uuid index merge each
ROUNDS = 5
APPEND_TARGET = 0.6  # of the bare INSERT's rate, measured in the same run
SECONDS_TARGET = 5.0
SNAPSHOT_TOPICS = 1_000_000
TS = "2026-11-22T08:35:32.862Z"


def _uuids(n: int) -> list[str]:
    out = []
    for _ in range(n):
        h = random.getrandbits(128).to_bytes(16, "big").hex()
        out.append(f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}")
    return out


def _batches(n: int, topics: Callable[[int], str], first: int = 0) -> list[list[NewEvent]]:
    """n events in batches; event i (counting from ``first``) goes to ``topics(i)``."""
    data = os.urandom(100)
    events = [
        NewEvent(topics(i), "bench-producer", TS, u, data) for i, u in enumerate(_uuids(n), first)
    ]
    return [events[i : i + BATCH] for i in range(0, n, BATCH)]


def _fill(log: SqliteEventLog, n: int, topics: Callable[[int], str]) -> float:
    """Append n events; returns the rate of the appends alone."""
    spent = 0.0
    for start in range(0, n, ROUND):
        batches = _batches(min(ROUND, n - start), topics, start)
        t0 = time.perf_counter()
        for batch in batches:
            log.append(batch, time.time())
        spent += time.perf_counter() - t0
    return n / spent


def _append_rates(log: SqliteEventLog, bare: sqlite3.Connection) -> tuple[float, float, float]:
    """Best subject rate, best baseline rate, sustained subject rate."""
    names = [f"/bench/sensor{i:04d}/value" for i in range(1_000)]
    # Untimed: the first round fills the uuid index, so the timed rounds see a steady state.
    _fill(log, ROUND, lambda _: random.choice(names))
    best_s = best_b = float("inf")
    total_s = 0.0
    seq = 0
    for _ in range(ROUNDS):
        batches = _batches(ROUND, lambda _: random.choice(names))
        rows = []
        for batch in batches:
            rows.append(
                [
                    (
                        seq := seq + 1,
                        e.topic,
                        e.producer,
                        e.ts,
                        bytes.fromhex(e.uuid.replace("-", "")),
                        e.data,
                    )
                    for e in batch
                ]
            )
        t0 = time.perf_counter()
        for batch in batches:
            log.append(batch, time.time())
        t1 = time.perf_counter()
        for chunk in rows:
            bare.execute("BEGIN")
            bare.executemany("INSERT INTO bare VALUES (?, ?, ?, ?, ?, ?)", chunk)
            bare.execute("COMMIT")
        t2 = time.perf_counter()
        best_s, best_b = min(best_s, t1 - t0), min(best_b, t2 - t1)
        total_s += t1 - t0
    return ROUND / best_s, ROUND / best_b, ROUND * ROUNDS / total_s


def _open_bare(path: Path) -> sqlite3.Connection:
    bare = sqlite3.connect(path, isolation_level=None)
    bare.execute("PRAGMA journal_mode = WAL")
    bare.execute("PRAGMA synchronous = NORMAL")
    bare.execute("PRAGMA cache_size = -65536")
    bare.execute("CREATE TABLE bare(seq, topic, producer, ts, uuid, data)")
    return bare


def _seconds(label: str, seconds: float) -> bool:
    ok = seconds < SECONDS_TARGET
    print(f"{label:<46} {seconds:>8.2f} s   target < {SECONDS_TARGET:g} s  {'yes' if ok else 'NO'}")
    return ok


def main() -> bool:
    n_reopen = int(os.environ.get("ZBUS_BENCH_LOG_EVENTS", "1000000"))
    with tempfile.TemporaryDirectory(prefix="zbus-bench-") as tmp:
        root = Path(tmp)
        log = SqliteEventLog(root / "append.db")
        bare = _open_bare(root / "bare.db")
        best, baseline, sustained = _append_rates(log, bare)
        bare.close()
        ok = report(
            [Result("append, batches of 1,000 x 100 B", best, baseline, 1 / APPEND_TARGET)],
            "event log (SQLite WAL, synchronous=NORMAL)",
        )
        ratio = best / baseline
        met = ratio >= APPEND_TARGET
        print(
            f"append best round {best:,.0f}/s against a bare INSERT of {baseline:,.0f}/s: "
            f"{ratio:.2f}x, target >= {APPEND_TARGET:g}x  {'yes' if met else 'NO'}"
        )
        print(f"append sustained {sustained:,.0f}/s over {ROUND * ROUNDS:,} events")
        ok = ok and met

        # Reopen: top the same log up to the requested size (1,000 topics).
        if log.last_sequence() < n_reopen:
            names = [f"/bench/sensor{i:04d}/value" for i in range(1_000)]
            grown = log.last_sequence()
            fill = _fill(log, n_reopen - grown, lambda _: random.choice(names))
            print(f"(appends growing the log from {grown:,} to {n_reopen:,} events: {fill:,.0f}/s)")
        events = log.last_sequence()
        log.close()
        best_open = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            log = SqliteEventLog(root / "append.db")
            log.last_sequence()
            best_open = min(best_open, time.perf_counter() - t0)
            log.close()
        ok = _seconds(f"reopen a log of {events:,} events", best_open) and ok

        # Snapshot: one event per topic, so every event is some topic's latest.
        log = SqliteEventLog(root / "topics.db")
        fill = _fill(
            log, SNAPSHOT_TOPICS, lambda i: f"/devices/{i // 1000:04d}/sensor{i % 1000:03d}"
        )
        print(f"(appends of {SNAPSHOT_TOPICS:,} events to as many new topics: {fill:,.0f}/s)")
        reader = log.reader()
        best_stream = float("inf")
        for _ in range(2):
            t0 = time.perf_counter()
            _, stream = reader.snapshot((), 0)
            count = sum(1 for _ in stream)
            best_stream = min(best_stream, time.perf_counter() - t0)
        assert count == SNAPSHOT_TOPICS, count
        ok = _seconds(f"snapshot stream of {count:,} topics", best_stream) and ok
        t0 = time.perf_counter()
        after: str | None = None
        pages = 0
        while True:
            page = reader.snapshot_page(("/devices/",), 0, after, 1_000)
            pages += 1
            after = page.next
            if after is None:
                break
        label = f"  (the same as {pages:,} pages of 1,000)"
        print(f"{label:<46} {time.perf_counter() - t0:>8.2f} s")
        reader.close()
        log.close()
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
