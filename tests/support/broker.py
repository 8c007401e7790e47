"""Helpers for broker tests: a real broker in process, and raw eMQP peers."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid as uuidlib
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from tests.support.running import running_service
from tests.support.waiting import UNIT, Deadline
from zbus.broker.server.config import BrokerSettings
from zbus.broker.server.service import BrokerService
from zbus.common.clock import Clock
from zbus.common.protocols import emqp

DIALECT = emqp.Dialect(eventmq_commands=True)
ROOT = Path(__file__).resolve().parents[2]


def start_broker_process(
    data_dir: Path, module: str = "zbus.broker", log: list[dict[str, Any]] | None = None
) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    """A broker process (``python -m module``) on free ports, once it logged "service
    ready": the process (stdout: its JSON log lines, read on) and its endpoints. The
    lines logged until then are added to ``log``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", module, "--client-port", "0", "--worker-port", "0"],
        cwd=ROOT,
        env={**os.environ, "ZBUS_DATA_DIR": str(data_dir), "ZBUS_ADMIN_PORT": "0"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        entry = json.loads(line)
        if log is not None:
            log.append(entry)
        if entry["msg"] == "service ready":
            return proc, entry["endpoints"]
    raise AssertionError(f"broker exited before it was ready: {proc.wait()}")


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """Kill ``proc`` if it still runs, and close its pipe."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def running_broker(
    data_dir: Path, *, clock: Clock | None = None, **settings: Any
) -> AbstractAsyncContextManager[BrokerService]:
    """A real broker on this loop, on ports it chose, reading ``clock`` (the system's by
    default)."""
    service = BrokerService(
        BrokerSettings(client_port=0, worker_port=0, data_dir=data_dir, **settings), clock=clock
    )
    return running_service(service, "broker start")


def new_id() -> str:
    return str(uuidlib.uuid4())


def call_body(name: str, *args: Any) -> bytes:
    return emqp.build_call_body(emqp.EventmqCall(callable=name, path="zbus", args=args))


class Peer:
    """A DEALER speaking eMQP frames, for tests that play a client or a worker."""

    def __init__(self, ctx: zmq.asyncio.Context, endpoint: str) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.connect(endpoint)

    async def send(self, cmd: emqp.EmqpCommand) -> None:
        await self.sock.send_multipart(emqp.encode(cmd, DIALECT))

    async def recv(self, within: float = 10.0) -> emqp.EmqpCommand:
        frames = await asyncio.wait_for(self.sock.recv_multipart(), within * UNIT)
        return emqp.decode(frames, DIALECT)

    async def recv_skipping_heartbeats(self, within: float = 10.0) -> emqp.EmqpCommand:
        deadline = Deadline(within, "a command other than a HEARTBEAT")
        while True:
            cmd = await self.recv(deadline.left() / UNIT)
            if not isinstance(cmd, emqp.Heartbeat):
                return cmd

    def close(self) -> None:
        self.sock.close(linger=0)
