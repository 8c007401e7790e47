"""What a stalled subscriber can make the bus hold is bounded in bytes (docs/eventbus.md,
"Slow peers and memory"), and what the bus dropped for it comes back from the log.

The bus runs as a process of its own so that its memory can be read from /proc. The
baseline is a second run of the same bus with the same load and a subscriber that
reads: the stalled run may hold at most the stream's documented bound more.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.bus_process import bus_process, memory_bytes
from tests.support.waiting import UNIT
from zbus.eventbus.client import BusEndpoints, EventBusClient

ROOT = Path(__file__).resolve().parents[3]
MiB = 1024 * 1024
STREAM_PEER_BYTES = 8 * MiB  # ZBUS_STREAM_PEER_BYTES of the bus under test
EVENTS = 100_000  # 1 kB each: about 100 MB, far beyond the bound
BATCH = 500
PAYLOAD = os.urandom(1000)
# Two runs of one program differ a little in what they allocate (group commit sizes vary
# with scheduling): this much is allowed on top of the bound.
TOLERANCE = 24 * MiB


@contextmanager
def _bus(data_dir: Path) -> Iterator[tuple[int, BusEndpoints, str, str]]:
    settings = {
        "ZBUS_MAX_EVENT_BYTES": str(64 * 1024),
        "ZBUS_STREAM_PEER_BYTES": str(STREAM_PEER_BYTES),
    }
    with bus_process(data_dir, settings) as (pid, ends):
        yield pid, BusEndpoints.from_info(ends), ends["admin"], json.dumps(ends)


def _rss(pid: int) -> int:
    return memory_bytes(pid)


def _metric(admin: str, name: str, **labels: str) -> float:
    with urllib.request.urlopen(f"{admin}/metrics", timeout=10 * UNIT) as resp:
        text = resp.read().decode()
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} ") or (not want and line.startswith(f"{name} ")):
            return float(line.split()[-1])
    return 0.0


def _run(data_dir: Path, *, stall: bool) -> tuple[int, float, dict[str, object]]:
    """Publish EVENTS with a subscriber process that reads along, or is stopped
    (SIGSTOP) meanwhile: the bus's RSS once every event is confirmed (read before the
    stopped subscriber goes on), its stream overflows, and the subscriber's report."""
    with _bus(data_dir) as (pid, ends, admin, info):
        last = EVENTS + 1
        sub = subprocess.Popen(
            [sys.executable, "-m", "tests.support.bus_subscriber", info, "/load/", str(last)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert sub.stdout is not None
        try:
            with EventBusClient(ends, producer="memory") as client:
                assert client.publish("/load/first", b"x", confirm=True) == 1
                assert sub.stdout.readline() == "live\n"
                if stall:
                    sub.send_signal(signal.SIGSTOP)
                for n in range(0, EVENTS, BATCH):
                    client.publish_many(
                        [(f"/load/{i % 100}", PAYLOAD) for i in range(n, n + BATCH)], confirm=True
                    )
                rss = _rss(pid)
                if stall:
                    sub.send_signal(signal.SIGCONT)
                report = json.loads(sub.stdout.readline())
                assert sub.wait(timeout=60 * UNIT) == 0
        finally:
            if sub.poll() is None:
                sub.send_signal(signal.SIGCONT)
                sub.kill()
                sub.wait()
            sub.stdout.close()
        overflows = _metric(admin, "zbus_eventbus_overflows_total", socket="stream")
        return rss, overflows, report


def test_a_stalled_stream_subscriber_holds_at_most_its_byte_bound(tmp_path: Path) -> None:
    baseline, _, report = _run(tmp_path / "reading", stall=False)
    assert report == {"exact": True, "repaired": report["repaired"], "events": EVENTS + 1}
    stalled, overflows, report = _run(tmp_path / "stalled", stall=True)
    growth = (stalled - baseline) / MiB
    assert stalled <= baseline + STREAM_PEER_BYTES + TOLERANCE, (
        f"the stalled run's bus holds {growth:.0f} MiB more than the baseline's "
        f"({baseline / MiB:.0f} MiB); bound {STREAM_PEER_BYTES / MiB:.0f} MiB"
    )
    assert overflows >= 1  # the drops are counted
    # Once it reads again, the subscriber gets every event, what was dropped from the log.
    assert report["exact"] is True and report["events"] == EVENTS + 1
    assert isinstance(report["repaired"], int) and report["repaired"] > 0
