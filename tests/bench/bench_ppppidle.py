"""The bus's CPU with many idle PPPP subscribers, beside the same bus with none.

``ZBUS_BENCH_PPPP_IDLE`` subscribers (default 10,000, spread over 4 processes of DEALERs)
each SUBSCRIBE to a channel nobody publishes on, ACK the SYNC and then answer every
HEARTBEAT of the door with one of their own (so that the door keeps them live: default
times, a HEARTBEAT a second each way). The figure is the bus process's CPU time over
``ZBUS_BENCH_PPPP_IDLE_SECONDS`` (default 10) once all are subscribed, against the same
window of the bus with the door on and no subscriber. A HEARTBEAT each way is the least
the protocol asks per subscriber and second; what the door spends beyond that is its
timers. The subscribers' processes may not keep up with every HEARTBEAT on a small
machine, so the bus's CPU per HEARTBEAT exchange is printed too. Figures only, no
target (an absolute cost of this machine).

The door's timers alone are measured first, without sockets: its core with the same
number of subscribers, subscribed over one simulated second (so that their deadlines
spread as they do on a running bus), ticked every 25 ms as the door does, each answering
every HEARTBEAT; the figure is the CPU of the core's ``tick`` and ``pump`` per simulated
second, beside the same with a tenth of the subscribers (timers that scale cost ten
times less).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import zmq

from tests.bench.harness import Result, report
from tests.support.bus_process import bus_process
from tests.unit.eventbus.pppp_harness import Door
from zbus.common.protocols import pppp

SUBSCRIBERS = int(os.environ.get("ZBUS_BENCH_PPPP_IDLE", "10000"))
SECONDS = float(os.environ.get("ZBUS_BENCH_PPPP_IDLE_SECONDS", "10"))
PROCESSES = 4
CHANNEL = "/bench/idle/"
HEARTBEAT = pppp.encode(pppp.Heartbeat())


def _subscribers(endpoint: str, first: int, k: int, ready: Any, stop: Any, counts: Any) -> None:
    ctx = zmq.Context()
    ctx.max_sockets = k + 64
    socks = []
    for i in range(first, first + k):
        sock = ctx.socket(zmq.DEALER)
        sock.linger = 0
        sock.routing_id = f"idle-{i}".encode()
        sock.connect(endpoint)
        sock.send_multipart(pppp.encode(pppp.Subscribe(CHANNEL)))
        socks.append(sock)
    for sock in socks:  # the SYNC's end (the channel is empty: the end alone)
        while True:
            frames = sock.recv_multipart()
            if len(frames) == 3 and frames[1] == bytes(8):
                sock.send_multipart(pppp.encode(pppp.AckNack(CHANNEL, 0)))
                break
    for sock in socks:  # live again, those the door took for gone while others subscribed
        sock.send_multipart(pppp.encode(pppp.Subscribe(CHANNEL)))
    ready.release()
    poller = zmq.Poller()
    for sock in socks:
        poller.register(sock, zmq.POLLIN)
    while not stop.is_set():
        beats = 0
        for sock, _ in poller.poll(200):
            while True:
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                beats += frames == HEARTBEAT
            sock.send_multipart(HEARTBEAT)
        with counts.get_lock():
            counts.value += beats
    for sock in socks:
        sock.close(linger=0)
    ctx.term()


def _core_idle(n: int, seconds: float = 10.0) -> float:
    """CPU seconds of the door core's timers and pump per simulated second, ``n`` idle
    live subscribers (time passed in)."""
    door = Door(max_subscribers=n + 1)
    core, beat = door.core, pppp.encode(pppp.Heartbeat())
    step = 0.025  # the door's tick_every with the default first idle time
    per = max(1, int(n * step))
    now, spent, k = 0.0, 0.0, 0
    while now < 1.0 + seconds:
        now += step
        door.now = now
        while k < n and k < per * round(now / step):
            door.subscribe(b"s%d" % k, CHANNEL)
            k += 1
        start = time.perf_counter()
        deadline = core.next_deadline()
        if deadline is None or now >= deadline:
            core.tick(now)
        core.pump(now)
        door.flush()  # the shell's part: send what the core handed out
        spent += (time.perf_counter() - start) * (now > 1.0)
        answering = {identity for identity, _ in door.out}
        door.out.clear()
        for identity in answering:
            core.receive(identity, list(beat), now)
    assert all(s.live for s in core.subscribers.values())
    return spent / seconds


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _idle_cpu(n: int) -> tuple[float, float]:
    """The bus's CPU seconds per second with ``n`` idle PPPP subscribers, and the
    HEARTBEATs a second they got from it."""
    tmp = Path(tempfile.mkdtemp(prefix="zbus-bench-ppppidle-"))
    settings = {"ZBUS_PPPP_PORT": "0", "ZBUS_PPPP_MAX_SUBSCRIBERS": str(max(n, 1))}
    mpx = mp.get_context("spawn")
    ready, stop, counts = mpx.Semaphore(0), mpx.Event(), mpx.Value("q", 0)
    procs = []
    try:
        with bus_process(tmp, settings) as (pid, endpoints):
            per = -(-n // PROCESSES) if n else 0
            for first in range(0, n, per or 1):
                k = min(per, n - first)
                proc = mpx.Process(
                    target=_subscribers, args=(endpoints["pppp"], first, k, ready, stop, counts)
                )
                proc.start()
                procs.append(proc)
            for _ in procs:
                assert ready.acquire(timeout=600)
            time.sleep(2.0)  # let the subscriptions' first heartbeats settle (not measured)
            cpu, beats, start = _cpu_seconds(pid), counts.value, time.perf_counter()
            time.sleep(SECONDS)  # the measurement window: the bus's CPU over it
            cpu, elapsed = _cpu_seconds(pid) - cpu, time.perf_counter() - start
            beats = counts.value - beats
            stop.set()
            for proc in procs:
                proc.join(60)
    finally:
        stop.set()
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        shutil.rmtree(tmp, ignore_errors=True)
    return cpu / elapsed, beats / elapsed


def main() -> bool:
    tenth, core = _core_idle(SUBSCRIBERS // 10), _core_idle(SUBSCRIBERS)
    print(
        f"  the door's core, timers and pump: {SUBSCRIBERS:,} subscribers"
        f" {core * 1000:.1f} ms CPU a simulated second, {SUBSCRIBERS // 10:,}:"
        f" {tenth * 1000:.1f} ms ({core / tenth:.1f}x for 10x the subscribers)"
    )
    base, _ = _idle_cpu(0)
    print(f"  idle bus, no PPPP subscriber:      {base * 1000:7.1f} ms CPU a second")
    busy, beats = _idle_cpu(SUBSCRIBERS)
    per = (busy - base) / SUBSCRIBERS * 1e6
    print(
        f"  {SUBSCRIBERS:,} idle PPPP subscribers: {busy * 1000:7.1f} ms CPU a second"
        f" ({per:.1f} us a subscriber a second)"
    )
    print(
        f"  {beats:,.0f} HEARTBEATs a second each way (10,000 if all keep up):"
        f" {(busy - base) / max(beats, 1) * 1e6:.1f} us of the bus's CPU per exchange"
    )
    # As rates: CPU-seconds the bus can spare per CPU-second it spends (higher is idler).
    results = [
        Result(f"door core, {SUBSCRIBERS} vs a tenth", 1 / core, 1 / tenth, None),
        Result(f"{SUBSCRIBERS} idle pppp subscribers", 1 / busy, 1 / max(base, 1e-3), None),
    ]
    return report(results, "PPPP idle (baseline: the bus with no PPPP subscriber)")


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
