"""Event bus memory under a stalled subscriber [at most ZBUS_STREAM_PEER_BYTES more than
the baseline], next to its baseline of the same run.

A bus process with its default settings takes ``ZBUS_BENCH_MEMORY_EVENTS`` events of
1 kB (default 300,000), published with confirms, while a zbus subscriber in a process of
its own reads along (the baseline) or is stopped with SIGSTOP (the stalled run). Printed:
the bus's resident memory (VmRSS) of both once every event is in, the difference against
the stream's per-peer bound, and for the stalled run how many events the subscriber
repaired from the log once it went on, and in how long.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from zbus.eventbus.client import BusEndpoints, EventBusClient
from zbus.eventbus.server.config import EventBusSettings

ROOT = Path(__file__).resolve().parents[2]
EVENTS = int(os.environ.get("ZBUS_BENCH_MEMORY_EVENTS", "300000"))
BATCH = 500
PAYLOAD = os.urandom(1000)
MiB = 1024 * 1024


def _rss(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB$", status, re.MULTILINE)
    assert match is not None
    return int(match[1]) * 1024


def _run(stall: bool) -> tuple[int, dict[str, object], float, float]:
    """(bus RSS once all is in, the subscriber's report, publish seconds, catch-up seconds)."""
    with tempfile.TemporaryDirectory(prefix="zbus-bench-") as data:
        env = {**os.environ, "ZBUS_DATA_DIR": data, "ZBUS_ARCHIVE": "false"}
        bus = subprocess.Popen(
            [sys.executable, "-m", "zbus.eventbus", "--port", "0", "--admin-port", "0"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert bus.stdout is not None
        try:
            for line in bus.stdout:
                entry = json.loads(line)
                if entry["msg"] == "service ready":
                    ends = entry["endpoints"]
                    break
            args = [json.dumps(ends), "/load/", str(EVENTS + 1)]
            sub = subprocess.Popen(
                [sys.executable, "-m", "tests.support.bus_subscriber", *args],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert sub.stdout is not None
            with EventBusClient(BusEndpoints.from_info(ends), producer="bench") as client:
                client.publish("/load/first", b"x", confirm=True)
                assert sub.stdout.readline() == "live\n"
                if stall:
                    sub.send_signal(signal.SIGSTOP)
                start = time.perf_counter()
                for n in range(0, EVENTS, BATCH):
                    items = [(f"/load/{i % 100}", PAYLOAD) for i in range(n, n + BATCH)]
                    client.publish_many(items, confirm=True, timeout=60)
                published = time.perf_counter() - start
                rss = _rss(bus.pid)
                if stall:
                    sub.send_signal(signal.SIGCONT)
                start = time.perf_counter()
                report = json.loads(sub.stdout.readline())
                caught_up = time.perf_counter() - start
                sub.wait(60)
                sub.stdout.close()
        finally:
            bus.terminate()
            bus.wait(60)
            bus.stdout.close()
    return rss, report, published, caught_up


def main() -> bool:
    print("\n== event bus memory, a stalled stream subscriber")
    bound = EventBusSettings().stream_peer_bytes
    reading, report_r, pub_r, _ = _run(stall=False)
    stalled, report_s, pub_s, caught_up = _run(stall=True)
    extra = stalled - reading
    print(
        f"bus RSS, subscriber reading:  {reading / MiB:>7.0f} MiB  "
        f"({EVENTS:,} events of 1 kB, {EVENTS / pub_r:,.0f} events/s published)"
    )
    print(
        f"bus RSS, subscriber stalled:  {stalled / MiB:>7.0f} MiB  "
        f"({extra / MiB:+.0f} MiB; bound {bound / MiB:.0f} MiB: "
        f"{extra / bound:.2f} of it) [<= 1.00]"
    )
    print(
        f"the stalled subscriber, going on: {report_s['events']:,} events, "
        f"exact: {report_s['exact']}, {report_s['repaired']:,} from the log, "
        f"in {caught_up:.1f} s ({EVENTS / pub_s:,.0f} events/s published meanwhile)"
    )
    return bool(extra <= bound and report_s["exact"] and report_r["exact"])
