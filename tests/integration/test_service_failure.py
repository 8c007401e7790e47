"""A service that loses a part it cannot serve without stops looking alive: it logs the
cause, answers /healthz with 503 while it stops, and its process exits with status 1 (a
supervisor restarts it), whether the part is an essential thread or a background task."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
import zmq

from tests.support.echo_service import EchoService, EchoSettings
from tests.support.waiting import UNIT, async_wait_until
from zbus.common.threads import EssentialThread


class _HotPath(EchoService):
    """An echo service with an essential thread that fails when told to, and a drain
    that waits for the test, so that /healthz can be asked while the service stops."""

    async def start(self) -> None:
        await super().start()
        self.fault = threading.Event()
        self.release = asyncio.Event()
        self.hot = EssentialThread("echo-hot-path", self._hot_path)
        self.essential(self.hot)
        self.hot.start()

    def _hot_path(self) -> None:
        self.fault.wait()
        if not self.hot.halted:
            raise RuntimeError("the hot path failed")

    async def drain(self) -> None:
        await self.release.wait()
        self.hot.stop()
        self.fault.set()


async def _started(service: EchoService) -> asyncio.Task[None]:
    task = asyncio.create_task(service.run())

    async def ready() -> bool:
        if task.done():
            task.result()
        return service.readiness()["started"]

    await async_wait_until(ready, what="service start")
    return task


async def test_a_dead_essential_thread_stops_the_service_and_healthz_says_so(
    tmp_path: Path,
) -> None:
    service = _HotPath(EchoSettings(data_dir=tmp_path, shutdown_timeout=60 * UNIT))
    task = await _started(service)
    assert service.admin_url is not None
    async with httpx.AsyncClient(base_url=service.admin_url, timeout=10 * UNIT) as http:
        assert (await http.get("/healthz")).status_code == 200
        service.fault.set()

        async def failed() -> bool:
            return service.failure is not None

        await async_wait_until(failed, what="the service to notice the dead thread")
        answer = await http.get("/healthz")  # the drain is held: the admin API still runs
        assert answer.status_code == 503
        assert answer.json()["status"] == "failing"
        assert "echo-hot-path" in answer.json()["error"]
        assert "the hot path failed" in answer.json()["error"]
        assert (await http.get("/readyz")).status_code == 503
    service.release.set()
    await asyncio.wait_for(task, 30 * UNIT)  # it stopped by itself: nobody asked
    assert service.ctx.closed


async def test_a_plain_thread_marked_essential_is_watched(tmp_path: Path) -> None:
    class Watched(EchoService):
        async def start(self) -> None:
            await super().start()
            self.done = threading.Event()
            self.helper = threading.Thread(target=self.done.wait, name="echo-helper")
            self.essential(self.helper)
            self.helper.start()

    service = Watched(EchoSettings(data_dir=tmp_path))
    task = await _started(service)
    service.done.set()  # the thread ends without the service asking it to
    await asyncio.wait_for(task, 30 * UNIT)
    assert service.failure == "thread echo-helper is gone"


def test_a_service_process_whose_part_fails_exits_with_status_1(tmp_path: Path) -> None:
    env = {**os.environ, "ZBUS_DATA_DIR": str(tmp_path), "ZBUS_FAIL_ON": "crash"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.echo_service", "--admin-port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    ctx = zmq.Context()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            entry = json.loads(line)
            if entry["msg"] == "service ready":
                break
        else:
            pytest.fail(f"service exited before it was ready: {proc.wait()}")
        sock = ctx.socket(zmq.DEALER)
        sock.linger = 0
        sock.connect(entry["endpoints"]["echo"])
        sock.send(b"crash")
        try:
            status = proc.wait(timeout=30 * UNIT)
        except subprocess.TimeoutExpired:
            pytest.fail("the service lost its echo task and did not exit")
        sock.close()
        log = [json.loads(line) for line in proc.stdout.readlines()]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        ctx.destroy(linger=0)
    assert status == 1  # before: 0, as if it had been asked to stop
    failed = [e for e in log if e["msg"] == "background task failed; stopping the service"]
    assert failed and "echo failed on request" in failed[0]["exc"]
    assert any(e["msg"] == "exiting after a failure" for e in log)
