"""PPPP fan-out beside the Event BUS PUBLISHER fan-out of the same bus in the same run.

For 1 and 100 subscribers: a publisher sends ZB-PUB batches of 100-byte events on one
topic, and every subscriber gets each one. The PPPP path: the log -> the stream -> the
PPPP door -> a PUBLISH per subscriber (a DEALER that ACKs every 500 messages and when a
burst ends). The Event BUS path: the log -> a BROADCAST per event on the PUBLISHER (a
SUB per subscriber; ZeroMQ fans out, and drops for a SUB past its byte bound). Figures:
deliveries per second, from the first event sent to the last received, and the bus
process's CPU time per delivery.

[target: a PPPP delivery costs at most 6x an Event BUS delivery (the Event BUS rate / the
PPPP rate): PPPP sends one message per subscriber from the door's Python thread, keeps
its position and reads its ACKs, where the PUBLISHER fans out inside ZeroMQ]

``ZBUS_BENCH_PPPP_DELIVERIES`` (default 200,000) sizes each run.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import tempfile
import time
import uuid as uuidlib
from pathlib import Path
from typing import Any

import zmq

from tests.bench.harness import Result, report
from tests.support.bus_process import bus_process
from zbus.common.protocols import eventbus_ext as ext
from zbus.common.protocols import pppp

DELIVERIES = int(os.environ.get("ZBUS_BENCH_PPPP_DELIVERIES", "200000"))
FANOUT = (1, 100)
TARGET = 6.0
CHANNEL = "/bench/"
TOPIC = "/bench/pppp"
TS = "2026-11-22T08:35:32.862Z"


def _subscribers(kind: str, endpoint: str, k: int, n: int, ready: Any, out: Any) -> None:
    ctx = zmq.Context()
    socks = []
    for i in range(k):
        if kind == "pppp":
            sock = ctx.socket(zmq.DEALER)
            sock.routing_id = f"bench-{i}".encode()
            sock.connect(endpoint)
            sock.send_multipart(pppp.encode(pppp.Subscribe(CHANNEL)))
            while True:  # the SYNC's end
                frames = sock.recv_multipart()
                if len(frames) == 3 and frames[1] == bytes(8):
                    sock.send_multipart(pppp.encode(pppp.AckNack(CHANNEL, 0)))
                    break
        else:
            sock = ctx.socket(zmq.SUB)
            sock.rcvhwm = 0
            sock.subscribe(TOPIC.encode())
            sock.connect(endpoint)
        socks.append(sock)
    time.sleep(0.5)  # let the SUBs' subscriptions reach the bus (not a measurement)
    ready.set()
    poller = zmq.Poller()
    for sock in socks:
        poller.register(sock, zmq.POLLIN)
    last_seq = dict.fromkeys(socks, 0)
    acked = dict.fromkeys(socks, 0)
    got, first, last = 0, 0.0, 0.0
    while got < n * k:
        events = poller.poll(10_000)
        if not events:
            break
        for sock, _ in events:
            while True:
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                last = time.perf_counter()
                first = first or last
                if kind == "pppp":
                    if len(frames) < 3:
                        continue  # a heartbeat
                    seq = int.from_bytes(frames[1], "big")
                    if seq != last_seq[sock] + 1:
                        continue  # a resend of one it has
                    last_seq[sock] = seq
                    if seq - acked[sock] >= 500:
                        sock.send_multipart(pppp.encode(pppp.AckNack(CHANNEL, seq)))
                        acked[sock] = seq
                got += 1
            if kind == "pppp" and last_seq[sock] > acked[sock]:
                sock.send_multipart(pppp.encode(pppp.AckNack(CHANNEL, last_seq[sock])))
                acked[sock] = last_seq[sock]
    out.put((first, last, got))
    for sock in socks:
        sock.close(linger=0)
    ctx.term()


def _publish(endpoint: str, n: int) -> float:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.sndhwm = 0
    sock.connect(endpoint)
    start = time.perf_counter()
    for offset in range(0, n, 1000):
        events = tuple(
            ext.EventData(TOPIC, "bench", TS, str(uuidlib.uuid4()), bytes(100))
            for _ in range(min(1000, n - offset))
        )
        sock.send_multipart(ext.encode(ext.PubBatch(events, confirm=True)))
        sock.recv_multipart()
    sock.close(linger=0)
    ctx.term()
    return start


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run(pid: int, endpoints: dict[str, str], kind: str, k: int) -> tuple[float, float]:
    """Deliveries a second and the bus's CPU seconds per delivery."""
    n = max(100, DELIVERIES // k)
    mpx = mp.get_context("spawn")
    out: Any = mpx.Queue()
    ready = mpx.Event()
    endpoint = endpoints["pppp"] if kind == "pppp" else endpoints["publisher"]
    proc = mpx.Process(target=_subscribers, args=(kind, endpoint, k, n, ready, out))
    proc.start()
    assert ready.wait(120)
    cpu = _cpu_seconds(pid)
    start = _publish(endpoints["collector"], n)
    _, last, got = out.get(timeout=300)
    cpu = _cpu_seconds(pid) - cpu
    proc.join(30)
    # The PUBLISHER drops for a SUB past its bound (counted by the bus); PPPP never drops.
    assert got == n * k or kind == "eventbus", (kind, k, got, n * k)
    return got / (last - start), cpu / got


def main() -> bool:
    results = []
    for k in FANOUT:
        rates: dict[str, float] = {}
        for kind in ("eventbus", "pppp"):
            tmp = Path(tempfile.mkdtemp(prefix="zbus-bench-pppp-"))
            try:
                settings = {"ZBUS_PPPP_PORT": "0", "ZBUS_PPPP_IDLE": "30"}
                with bus_process(tmp, settings) as (pid, endpoints):
                    rate, cpu = _run(pid, endpoints, kind, k)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            rates[kind] = rate
            print(f"{kind:>8} x{k:<4} {rate:>10,.0f} deliveries/s  bus CPU {cpu * 1e6:.1f} us each")
        results.append(Result(f"pppp fan-out to {k}", rates["pppp"], rates["eventbus"], TARGET))
    return report(results, "PPPP fan-out (deliveries/s; baseline: Event BUS PUBLISHER)")


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
