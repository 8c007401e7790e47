"""A group of event bus replicas as processes of their own, with a real etcd.

Each replica keeps its ports (base P..P+3, replication, admin, PPPP) across kills and
restarts, so that its peers' and clients' endpoints stay right. A replica's output goes
to a file beside its data, read back when a test fails.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request
import uuid as uuidlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zbus
from tests.support.etcd import EtcdServer, etcd_server
from tests.support.ports import HeldPorts
from tests.support.waiting import UNIT, wait_until
from zbus.eventbus.server.store import SqliteEventLogReader

ROOT = Path(__file__).resolve().parents[2]


class Replica:
    def __init__(self, root: Path, name: str) -> None:
        self.name = name
        self.root = root / name
        self.data_dir = self.root / "data"
        self.log_path = self.root / "bus.log"
        self._held: HeldPorts | None = HeldPorts(7)
        ports = self._held.ports
        self.port, self.replication_port, self.admin_port = ports[0], ports[4], ports[5]
        self.endpoint = f"tcp://127.0.0.1:{self.port}"
        self.pppp_endpoint = f"tcp://127.0.0.1:{ports[6]}"
        self.admin = f"http://127.0.0.1:{self.admin_port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, env: dict[str, str]) -> None:
        assert self.proc is None or self.proc.poll() is not None
        if self._held is not None:
            self._held.release()
            self._held = None
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "zbus.eventbus"],
                cwd=ROOT,
                env={
                    **os.environ,
                    "ZBUS_LOG_LEVEL": "INFO",
                    **env,
                    "ZBUS_REPLICA_NAME": self.name,
                    "ZBUS_DATA_DIR": str(self.data_dir),
                    "ZBUS_PORT": str(self.port),
                    "ZBUS_ADMIN_PORT": str(self.admin_port),
                    "ZBUS_PPPP_PORT": self.pppp_endpoint.rsplit(":", 1)[1],
                    "ZBUS_ARCHIVE": "false",
                },
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def kill(self) -> None:
        """``kill -9``, as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def wipe(self) -> None:
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30 * UNIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)

    def state(self) -> dict[str, Any] | None:
        """``GET /api/v1/replication``; None when it does not answer."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        try:
            with urllib.request.urlopen(f"{self.admin}/api/v1/replication", timeout=1) as r:
                answer: dict[str, Any] = json.load(r)
                return answer
        except (OSError, ValueError):
            return None

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class ReplicaGroup:
    NAMES = ("eventbus-1", "eventbus-2", "eventbus-3")

    def __init__(self, root: Path, etcd: EtcdServer, **settings: str) -> None:
        self.etcd = etcd
        self.replicas = {n: Replica(root, n) for n in self.NAMES}
        self.env = {
            "ZBUS_REPLICAS": ",".join(
                f"{r.name}=127.0.0.1:{r.replication_port}" for r in self.replicas.values()
            ),
            "ZBUS_ETCD_ENDPOINTS": etcd.endpoint,
            "ZBUS_LEASE_TTL": "2",
            "ZBUS_REPLICA_MAX_LAG": "2",
            **settings,
        }

    def __getitem__(self, name: str) -> Replica:
        return self.replicas[name]

    def start(self, name: str) -> None:
        self.replicas[name].start(self.env)

    def endpoints(self) -> list[str]:
        return [r.endpoint for r in self.replicas.values()]

    def doors(self) -> list[str]:
        """Every replica's PPPP door."""
        return [r.pppp_endpoint for r in self.replicas.values()]

    def leader(self, timeout: float = 30.0, *, in_sync: int = 2) -> Replica:
        """The replica that leads with at least ``in_sync`` replicas in sync."""
        found: list[Replica] = []

        def leading() -> bool:
            for r in self.replicas.values():
                s = r.state()
                if s is not None and s["role"] == "leader" and len(s["in_sync"]) >= in_sync:
                    found[:] = [r]
                    return True
            return False

        try:
            wait_until(leading, timeout, what=f"a leader with {in_sync} in sync")
        except AssertionError:
            raise AssertionError(self.outputs()) from None
        return found[0]

    def caught_up(self, timeout: float = 30.0) -> None:
        """Every running replica serves what the leader has (the same HWM and log end)."""

        def same() -> bool:
            states = [r.state() for r in self.replicas.values() if r.proc is not None]
            if any(s is None for s in states):
                return False
            ends = {(s["log_end"], s["high_watermark"]) for s in states if s is not None}
            return len(ends) == 1

        try:
            wait_until(same, timeout, what="every replica caught up")
        except AssertionError as exc:
            states = {r.name: r.state() for r in self.replicas.values()}
            raise AssertionError(f"{exc}: {states}\n{self.outputs()}") from None

    def outputs(self) -> str:
        return "\n".join(f"== {r.name}\n{r.output()[-6000:]}" for r in self.replicas.values())

    def stop(self) -> None:
        for r in self.replicas.values():
            r.resume() if r.proc is not None and r.proc.poll() is None else None
            r.stop()


@contextmanager
def replica_group(root: Path, **settings: str) -> Iterator[ReplicaGroup]:
    """etcd and three replicas, all started; everything killed at the end."""
    with etcd_server(root / "etcd") as etcd:
        group = ReplicaGroup(root, etcd, **settings)
        try:
            for name in group.NAMES:
                group.start(name)
            yield group
        finally:
            group.stop()


@dataclass
class Writer:
    """Publishes confirmed batches of 10 events to the group until stopped."""

    group: ReplicaGroup
    attempted: set[str] = field(default_factory=set)
    confirmed: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with zbus.EventBusClient(self.group.endpoints(), producer="checker") as client:
            n = 0
            while not self.stop.is_set():
                items = [(f"/check/{n % 7}", b"%d" % n, str(uuidlib.uuid4())) for _ in range(10)]
                n += 1
                self.attempted.update(u for _, _, u in items)
                try:
                    client.publish_many(items, confirm=True, timeout=2.0)
                except (zbus.PublishError, TimeoutError) as exc:
                    self.errors.append(str(exc))
                    continue
                self.confirmed.update(u for _, _, u in items)

    def confirmed_past(self, count: int, timeout: float = 60.0) -> None:
        wait_until(lambda: len(self.confirmed) >= count, timeout, what=f"{count} confirmed")


def logs(group: ReplicaGroup, prefix: str = "/check/") -> dict[str, list[tuple[int, str]]]:
    """Every replica's log (the events under ``prefix``), read from its file once the
    replicas are stopped."""
    group.stop()
    out = {}
    for r in group.replicas.values():
        reader = SqliteEventLogReader(r.data_dir / "events.db")
        try:
            out[r.name] = [
                (e.seq, e.uuid)
                for b in reader.batches(0, 10**9)
                for e in b.events()
                if e.topic.startswith(prefix)
            ]
        finally:
            reader.close()
    return out


def check(group: ReplicaGroup, writer: Writer) -> None:
    writer.stop.set()
    group.caught_up(60)
    every = logs(group)
    first = next(iter(every.values()))
    for name, events in every.items():
        assert events == first, f"{name}'s log differs from the others'"
    stored = [u for _, u in first]
    assert len(stored) == len(set(stored)), "duplicates in the log"
    lost = writer.confirmed - set(stored)
    assert not lost, f"lost {len(lost)} confirmed events"
    assert set(stored) <= writer.attempted
