"""Servers for the benchmarks' anchors: Debian's redis-server and nats-server, each a
process of its own on 127.0.0.1, on ports free when it starts, stopped when the ``with``
block ends (whatever happens inside it).

Not a benchmark module itself (``python -m tests.bench`` runs the ``bench_*`` ones).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.ports import released_port


def binary(name: str) -> str | None:
    """The path of a Debian server binary (they live in /usr/sbin, not always on PATH)."""
    path = shutil.which(name) or f"/usr/sbin/{name}"
    return path if Path(path).exists() else None


def cpu_seconds(pids: list[int]) -> float:
    """User and system time of the processes so far (/proc/<pid>/stat, fields 14 and 15)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Terminate the processes, then kill any still running after 30 s."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


@contextmanager
def redis_server() -> Iterator[str]:
    """An in-memory redis-server (no snapshots, no append-only file); yields its URL."""
    path = binary("redis-server")
    if path is None:
        raise RuntimeError("redis-server is not installed: apt-get install redis-server")
    port = released_port()
    proc = subprocess.Popen(
        [path, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_port(port, proc, time.monotonic() + 30)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop([proc])


def _wait_port(port: int, proc: subprocess.Popen[bytes], deadline: float) -> None:
    """Wait until 127.0.0.1:``port`` accepts a connection (a server just started may take
    a moment on a loaded machine); raise when ``proc`` exits or ``deadline`` passes."""

    def accepts() -> None:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()

    _wait(accepts, f"port {port}", proc, deadline)


def wait_http(url: str, proc: subprocess.Popen[bytes], deadline: float) -> None:
    """Wait until ``url`` answers 2xx (monotonic ``deadline``); raise when ``proc`` exits
    first or the deadline passes."""

    def answers() -> None:
        with urllib.request.urlopen(url, timeout=1):
            pass

    _wait(answers, url, proc, deadline)


def _wait(
    attempt: Callable[[], None], what: str, proc: subprocess.Popen[bytes], deadline: float
) -> None:
    """Call ``attempt`` until it raises no OSError; raise when ``proc`` exits first or the
    (monotonic) ``deadline`` passes."""
    while True:
        try:
            attempt()
            return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"{what}: the server exited ({proc.returncode})") from None
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: not ready in time") from None
            time.sleep(0.05)


@dataclass(frozen=True, slots=True)
class Nats:
    urls: list[str]  # the client URLs, one a server
    pids: list[int]


@contextmanager
def jetstream(nodes: int, store: Path) -> Iterator[Nats]:
    """``nodes`` nats-servers with JetStream on file storage under ``store``; with more than
    one, a cluster whose routes join every node to the others."""
    path = binary("nats-server")
    if path is None:
        raise RuntimeError("nats-server is not installed: apt-get install nats-server")
    ports = [(released_port(), released_port(), released_port()) for _ in range(nodes)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i, (client, cluster, monitor) in enumerate(ports):
            (store / f"n{i}").mkdir(parents=True, exist_ok=True)
            conf = [
                f'server_name: "n{i}"',
                f'listen: "127.0.0.1:{client}"',
                f'http: "127.0.0.1:{monitor}"',
                f'jetstream {{ store_dir: "{store / f"n{i}"}" }}',
            ]
            if nodes > 1:
                routes = ", ".join(
                    f'"nats-route://127.0.0.1:{p[1]}"' for j, p in enumerate(ports) if j != i
                )
                conf.append(
                    f'cluster {{ name: "bench", listen: "127.0.0.1:{cluster}", '
                    f"routes: [{routes}] }}"
                )
            (store / f"n{i}.conf").write_text("\n".join(conf) + "\n")
            procs.append(
                subprocess.Popen(
                    [path, "-c", str(store / f"n{i}.conf")],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        deadline = time.monotonic() + 60
        for proc, (_, _, monitor) in zip(procs, ports, strict=True):
            wait_http(f"http://127.0.0.1:{monitor}/healthz", proc, deadline)
        yield Nats([f"nats://127.0.0.1:{c}" for c, _, _ in ports], [p.pid for p in procs])
    finally:
        stop(procs)
