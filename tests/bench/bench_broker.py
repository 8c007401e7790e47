"""Job broker benchmarks (issue targets in brackets), with Celery on Redis in the same run.

- no-op jobs, durable store on, 4 worker processes: jobs/s round trip (submit -> result
  in the client) with a pipelined client [>= 10,000 jobs/s];
- single-job round trip p50 [<= 1 ms];
- the same workload on Celery with a Redis broker and result backend (Debian
  redis-server, celery from PyPI) [zbus >= 5x Celery's rate].
"""

from __future__ import annotations

import gc
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.bench.servers import wait_http
from tests.support.ports import released_port
from zbus.broker.client import BrokerClient

ROOT = Path(__file__).resolve().parents[2]
JOBS = int(os.environ.get("ZBUS_BENCH_JOBS", "50000"))
SLOTS = int(os.environ.get("ZBUS_BENCH_WORKER_SLOTS", "4"))
CELERY_JOBS = int(os.environ.get("ZBUS_BENCH_CELERY_JOBS", "5000"))
WORKERS = int(os.environ.get("ZBUS_BENCH_WORKER_PROCESSES", "4"))


def _wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    wait_http(url, proc, time.monotonic() + 60)


def zbus_jobs(tmp: Path) -> tuple[float, float]:
    client_port, worker_port, admin = released_port(), released_port(), released_port()
    env = {**os.environ, "ZBUS_LOG_LEVEL": "WARNING"}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "zbus.broker",
                "--client-port",
                str(client_port),
                "--worker-port",
                str(worker_port),
                "--admin-port",
                str(admin),
                "--data-dir",
                str(tmp / "broker"),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        _wait_ready(f"http://127.0.0.1:{admin}/readyz", procs[0])
        for _ in range(WORKERS):
            port = released_port()
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "zbus.worker",
                        "--broker-endpoint",
                        f"tcp://127.0.0.1:{worker_port}",
                        "--concurrency",
                        "16",
                        "--admin-port",
                        str(port),
                        "--data-dir",
                        str(tmp / f"w{port}"),
                    ],
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            _wait_ready(f"http://127.0.0.1:{port}/readyz", procs[-1])
        with BrokerClient(f"tcp://127.0.0.1:{client_port}") as client:
            for _ in range(200):  # warm up, and wait for every worker's INFORM
                client.submit_and_wait("default", "noop", timeout=30)
            latencies = []
            for _ in range(2000):
                t0 = time.perf_counter()
                client.submit_and_wait("default", "noop", timeout=30)
                latencies.append(time.perf_counter() - t0)
            start = time.perf_counter()
            ids = client.submit_many("default", "noop", [()] * JOBS, window=2000)
            for job_id in ids:
                client.result(job_id, timeout=120)
            rate = JOBS / (time.perf_counter() - start)
        return rate, statistics.median(latencies) * 1000
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            proc.wait(30)


def _celery(tmp: Path) -> float:
    redis = shutil.which("redis-server")
    if redis is None:
        raise RuntimeError("redis-server is not installed: apt-get install redis-server")
    port = released_port()
    url = f"redis://127.0.0.1:{port}/0"
    server = subprocess.Popen(
        [redis, "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    env = {**os.environ, "ZBUS_BENCH_REDIS": url}
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tests.bench.celery_app",
            "worker",
            "--concurrency",
            str(WORKERS),
            "--pool",
            "prefork",
            "--loglevel",
            "WARNING",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        os.environ["ZBUS_BENCH_REDIS"] = url
        from tests.bench import celery_app

        celery_app.app.conf.broker_url = url
        celery_app.app.conf.result_backend = url
        for _ in range(50):  # warm up: also waits for the worker to be up
            celery_app.noop.delay().get(timeout=60)
        start = time.perf_counter()
        results = [celery_app.noop.delay() for _ in range(CELERY_JOBS)]
        for r in results:
            r.get(timeout=300)
        rate = CELERY_JOBS / (time.perf_counter() - start)
        # Each result, when freed, tells the result store it is done with it: free them
        # while Redis still runs, or each one retries its connection for seconds.
        del results, r
        gc.collect()
        return rate
    finally:
        worker.terminate()
        worker.wait(60)
        server.terminate()
        server.wait(30)


def main() -> bool:
    print("\n== job broker")
    tmp = Path(tempfile.mkdtemp(prefix="zbus-bench-broker-"))
    try:
        rate, p50 = zbus_jobs(tmp)
        celery = _celery(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"zbus        {JOBS:,} no-op jobs, {WORKERS} workers, pipelined: {rate:>9,.0f} jobs/s "
        f"[target >= 10,000: {'met' if rate >= 10_000 else 'MISSED'}]"
    )
    print(
        f"            single job round trip p50: {p50:.3f} ms "
        f"[target <= 1 ms: {'met' if p50 <= 1 else 'MISSED'}]"
    )
    print(
        f"celery      {CELERY_JOBS:,} no-op jobs, {WORKERS} prefork workers, Redis: "
        f"{celery:>9,.0f} jobs/s"
    )
    print(
        f"            zbus / celery: {rate / celery:.1f}x [target >= 5x: "
        f"{'met' if rate >= 5 * celery else 'MISSED'}]"
    )
    return rate >= 10_000 and p50 <= 1 and rate >= 5 * celery


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
