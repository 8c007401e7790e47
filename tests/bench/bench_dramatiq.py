"""Anchor for the job broker: Dramatiq 2.x on Redis, in the same run (issue targets in
brackets).

- zbus: no-op jobs, durable store on, 4 worker processes, results to a pipelined client
  (the broker benchmark's own measurement, ``bench_broker.zbus_jobs``), and its single-job
  round trip p50 [<= 1 ms];
- Dramatiq: the same no-op actor, 4 worker processes (``--processes 4``) of 8 threads each
  (Dramatiq's default: each process prefetches twice its threads; with 1 thread it ran at
  about half the rate), Redis (Debian's redis-server, in memory) as broker and results
  backend (the ``Results`` middleware with ``RedisBackend``); the client sends N
  messages, then fetches every result [zbus >= 2x Dramatiq's jobs/s]; its single-job
  round trip p50 (send one, wait for its result), printed as the anchor of zbus's.

Rounds alternate zbus and Dramatiq, best of ``ROUNDS`` each (the lowest p50 of the
rounds). ``ZBUS_BENCH_DRAMATIQ_JOBS`` (default 5,000), ``ZBUS_BENCH_DRAMATIQ_SINGLE``
(500) and ``ZBUS_BENCH_DRAMATIQ_THREADS`` (8) size it; the zbus side takes the broker
benchmark's ``ZBUS_BENCH_JOBS`` and ``ZBUS_BENCH_WORKER_PROCESSES``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.bench import servers
from tests.bench.bench_broker import JOBS, ROOT, WORKERS, zbus_jobs

DRAMATIQ_JOBS = int(os.environ.get("ZBUS_BENCH_DRAMATIQ_JOBS", "5000"))
SINGLE = int(os.environ.get("ZBUS_BENCH_DRAMATIQ_SINGLE", "500"))
THREADS = int(os.environ.get("ZBUS_BENCH_DRAMATIQ_THREADS", "8"))
ROUNDS = int(os.environ.get("ZBUS_BENCH_ANCHOR_ROUNDS", "3"))
TARGET_RATIO = 2.0
TARGET_P50_MS = 1.0
TIMEOUT_MS = 120_000


def _dramatiq_round(app: Any) -> tuple[float, float]:
    """Jobs/s of DRAMATIQ_JOBS sent, then every result fetched; single-job p50 in ms."""
    latencies = []
    for _ in range(SINGLE):
        t0 = time.perf_counter()
        app.noop.send().get_result(block=True, timeout=TIMEOUT_MS)
        latencies.append(time.perf_counter() - t0)
    start = time.perf_counter()
    messages = [app.noop.send() for _ in range(DRAMATIQ_JOBS)]
    for m in messages:
        m.get_result(block=True, timeout=TIMEOUT_MS)
    return DRAMATIQ_JOBS / (time.perf_counter() - start), statistics.median(latencies) * 1000


def _rounds(tmp: Path) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    zb: list[tuple[float, float]] = []
    dq: list[tuple[float, float]] = []
    with servers.redis_server() as url:
        os.environ["ZBUS_BENCH_REDIS"] = url  # read by dramatiq_app, here and in the workers
        workers = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dramatiq",
                "tests.bench.dramatiq_app",
                "--processes",
                str(WORKERS),
                "--threads",
                str(THREADS),
                "--skip-logging",
            ],
            cwd=ROOT,
            env={**os.environ, "ZBUS_BENCH_REDIS": url},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            from tests.bench import dramatiq_app as app

            for _ in range(50):  # warm up: also waits for the workers to be up
                app.noop.send().get_result(block=True, timeout=TIMEOUT_MS)
            for i in range(ROUNDS):
                zb.append(zbus_jobs(tmp / f"zbus{i}"))
                dq.append(_dramatiq_round(app))
        finally:
            servers.stop([workers])
    return zb, dq


def main() -> bool:
    print("\n== anchor: Dramatiq on Redis, no-op jobs, results to the client")
    if servers.binary("redis-server") is None:
        print("            redis-server not installed: apt-get install redis-server")
        return False
    import dramatiq

    tmp = Path(tempfile.mkdtemp(prefix="zbus-bench-dramatiq-"))
    try:
        zb, dq = _rounds(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rate, dramatiq_rate = max(r for r, _ in zb), max(r for r, _ in dq)
    p50, dramatiq_p50 = min(p for _, p in zb), min(p for _, p in dq)
    rate_met, p50_met = rate >= TARGET_RATIO * dramatiq_rate, p50 <= TARGET_P50_MS
    rounds = " / ".join(f"{r:,.0f}" for r, _ in zb)
    print(
        f"zbus        {JOBS:,} no-op jobs, {WORKERS} workers, pipelined: {rate:>9,.0f} jobs/s "
        f"(rounds {rounds})"
    )
    rounds = " / ".join(f"{r:,.0f}" for r, _ in dq)
    print(
        f"dramatiq    {dramatiq.__version__}, {DRAMATIQ_JOBS:,} no-op jobs, {WORKERS} processes x "
        f"{THREADS} thread(s), Redis: {dramatiq_rate:>9,.0f} jobs/s (rounds {rounds})"
    )
    print(
        f"            zbus / dramatiq: {rate / dramatiq_rate:.2f}x [target >= {TARGET_RATIO:g}x: "
        f"{'yes' if rate_met else 'NO'}]"
    )
    print(
        f"            single job round trip p50: zbus {p50:.3f} ms [target <= "
        f"{TARGET_P50_MS:g} ms: {'yes' if p50_met else 'NO'}], dramatiq {dramatiq_p50:.3f} ms "
        f"(zbus / dramatiq {p50 / dramatiq_p50:.2f})"
    )
    return rate_met and p50_met


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
