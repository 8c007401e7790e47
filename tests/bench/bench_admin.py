"""Admin API benchmarks: requests per second on one kept-alive HTTP connection.

Every real client of an admin API keeps its connection alive (the dashboard, Prometheus,
the CLI, ``requests.Session``). A real event bus process serves ``GET /api/v1/info``,
``GET /api/v1/topics``, ``GET /metrics`` and ``POST /api/v1/events``; each is asked, with
http.client and with httpx, on one kept-alive connection, and alternately on a fresh
connection per request, the baseline measured in the same run. [A request on a kept-alive
connection costs no more than one on a fresh connection: cost ratio <= 1.]
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.bench.harness import Result, interleaved, report
from tests.support.ports import released_port

ROOT = Path(__file__).resolve().parents[2]
REQUESTS = int(os.environ.get("ZBUS_BENCH_ADMIN_REQUESTS", "200"))
ROUNDS = 5
EVENT = json.dumps({"topic": "/bench/admin", "data": {"n": 1}}).encode()
JSON = {"content-type": "application/json"}
CASES: list[tuple[str, str, bytes | None]] = [
    ("GET /api/v1/info", "/api/v1/info", None),
    ("GET /api/v1/topics", "/api/v1/topics", None),
    ("GET /metrics", "/metrics", None),
    ("POST /api/v1/events", "/api/v1/events", EVENT),
]


def _start_bus(data_dir: Path) -> tuple[subprocess.Popen[bytes], int]:
    admin = released_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "zbus.eventbus", "--port", str(released_port(4))],
        cwd=ROOT,
        env={
            **os.environ,
            "ZBUS_DATA_DIR": str(data_dir),
            "ZBUS_ADMIN_PORT": str(admin),
            "ZBUS_LOG_LEVEL": "WARNING",
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=1):
                return proc, admin
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("the event bus did not start") from None
            time.sleep(0.05)


def _http_client(port: int, path: str, body: bytes | None) -> tuple[Callable[[int], None], ...]:
    method = "GET" if body is None else "POST"
    headers = {} if body is None else JSON
    kept = http.client.HTTPConnection("127.0.0.1", port)

    def one(conn: http.client.HTTPConnection) -> None:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{method} {path}: HTTP {resp.status}")

    def kept_alive(n: int) -> None:
        for _ in range(n):
            one(kept)

    def fresh(n: int) -> None:
        for _ in range(n):
            conn = http.client.HTTPConnection("127.0.0.1", port)
            one(conn)
            conn.close()

    return kept_alive, fresh


def _httpx(port: int, path: str, body: bytes | None) -> tuple[Callable[[int], None], ...]:
    url = f"http://127.0.0.1:{port}{path}"
    method = "GET" if body is None else "POST"
    headers = {} if body is None else JSON
    kept = httpx.Client()
    # One client for the baseline too (a new httpx.Client costs more than the request):
    # `connection: close` makes it open a new connection for every request.
    closing = httpx.Client(headers={"connection": "close"})

    def kept_alive(n: int) -> None:
        for _ in range(n):
            kept.request(method, url, content=body, headers=headers).raise_for_status()

    def fresh(n: int) -> None:
        for _ in range(n):
            closing.request(method, url, content=body, headers=headers).raise_for_status()

    return kept_alive, fresh


def main() -> bool:
    tmp = Path(tempfile.mkdtemp(prefix="zbus-bench-admin-"))
    proc, port = _start_bus(tmp)
    results: list[Result] = []
    try:
        for client, make in (("http.client", _http_client), ("httpx", _httpx)):
            for label, path, body in CASES:
                kept_alive, fresh = make(port, path, body)
                kept_rate, fresh_rate = interleaved(kept_alive, fresh, REQUESTS, ROUNDS)
                results.append(Result(f"{client} {label}", kept_rate, fresh_rate, 1.0))
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{REQUESTS} requests a round, best of {ROUNDS}; baseline: a fresh connection each")
    return report(results, "admin API: requests/s on one kept-alive connection")


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
