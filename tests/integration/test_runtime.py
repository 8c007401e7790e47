"""The service runtime on real sockets: start, health, metrics, graceful shutdown."""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import zmq
import zmq.asyncio
from prometheus_client.parser import text_string_to_metric_families

from tests.support.echo_service import EchoService, EchoSettings
from tests.support.waiting import UNIT, async_wait_until, wait_until
from zbus.common.settings import ConfigError


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


async def _started(service: EchoService) -> asyncio.Task[None]:
    task = asyncio.create_task(service.run())

    async def ready() -> bool:
        if task.done():
            task.result()
        return service.readiness()["started"]

    await async_wait_until(ready, what="service start")
    return task


async def test_service_answers_health_metrics_and_info(tmp_path: Path) -> None:
    service = EchoService(EchoSettings(data_dir=tmp_path))
    task = await _started(service)
    try:
        async with httpx.AsyncClient(base_url=service.admin_url or "") as http:
            assert (await http.get("/healthz")).json() == {"status": "ok"}
            ready = await http.get("/readyz")
            assert ready.status_code == 200
            assert ready.json() == {"ready": True, "checks": {"started": True}}

            # A real round trip through the service's socket, then see it counted.
            ctx = zmq.asyncio.Context()
            dealer = ctx.socket(zmq.DEALER)
            dealer.connect(service.endpoints["echo"])
            await dealer.send_multipart([b"hello", b"world"])
            assert await asyncio.wait_for(dealer.recv_multipart(), 5 * UNIT) == [
                b"hello",
                b"world",
            ]
            dealer.close(linger=0)
            ctx.term()

            metrics = await http.get("/metrics")
            assert metrics.headers["content-type"].startswith("text/plain")
            families = {f.name: f for f in text_string_to_metric_families(metrics.text)}
            assert families["zbus_echo_messages"].samples[0].value == 1.0
            info_sample = families["zbus_service_info"].samples[0]
            assert info_sample.labels["service"] == "echo"
            assert families["zbus_service_uptime_seconds"].samples[0].value >= 0
            assert "process_cpu_seconds" in families

            info = (await http.get("/api/v1/info")).json()
            assert info["name"] == "echo"
            assert info["endpoints"]["echo"].startswith("tcp://127.0.0.1:")
            assert info["endpoints"]["admin"] == service.admin_url
    finally:
        service.request_stop()
        await asyncio.wait_for(task, 10 * UNIT)


async def test_admin_connections_are_accepted_without_nagle(tmp_path: Path) -> None:
    # A response goes out in two writes (headers, body). With Nagle's algorithm on the
    # accepted socket, the second write waits for the ACK of the first, which a client
    # on a kept-alive connection delays by 40 ms: a request on such a connection took
    # 44 ms instead of 1. Every accepted admin connection must have TCP_NODELAY set.
    service = EchoService(EchoSettings(data_dir=tmp_path))
    task = await _started(service)
    try:
        assert service._admin is not None
        connections = service._admin.server_state.connections
        async with httpx.AsyncClient(base_url=service.admin_url or "") as http:
            for _ in range(2):  # the second request reuses the kept-alive connection
                assert (await http.get("/healthz")).status_code == 200
            assert len(connections) == 1
            for protocol in connections:
                sock = protocol.transport.get_extra_info("socket")
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        service.request_stop()
        await asyncio.wait_for(task, 10 * UNIT)


async def test_shutdown_closes_everything_within_deadline(tmp_path: Path) -> None:
    service = EchoService(EchoSettings(data_dir=tmp_path, shutdown_timeout=2.0))
    before = asyncio.all_tasks()
    task = await _started(service)
    admin_port = int((service.admin_url or "").rsplit(":", 1)[1])
    zmq_port = int(service.endpoints["echo"].rsplit(":", 1)[1])
    assert not _port_is_free(admin_port)
    assert not _port_is_free(zmq_port)

    started = time.monotonic()
    service.request_stop()
    await asyncio.wait_for(task, 10 * UNIT)
    elapsed = time.monotonic() - started

    assert elapsed < service.settings.shutdown_timeout + 3
    assert service.drained.is_set()
    assert service.ctx.closed
    assert asyncio.all_tasks() - before - {asyncio.current_task()} == set()
    assert _port_is_free(admin_port)
    assert _port_is_free(zmq_port)
    assert service.readiness()["started"] is False


async def test_a_stuck_drain_is_cut_at_the_deadline(tmp_path: Path) -> None:
    class StuckEcho(EchoService):
        async def drain(self) -> None:
            await asyncio.Event().wait()  # never finishes on its own

    service = StuckEcho(EchoSettings(data_dir=tmp_path, shutdown_timeout=0.3))
    task = await _started(service)
    service.request_stop()
    await asyncio.wait_for(task, 10 * UNIT)
    assert service.ctx.closed


async def test_a_failing_background_task_stops_the_service(tmp_path: Path) -> None:
    class Crashing(EchoService):
        async def _serve(self) -> None:
            raise RuntimeError("boom")

    service = Crashing(EchoSettings(data_dir=tmp_path))
    task = asyncio.create_task(service.run())
    await asyncio.wait_for(task, 10 * UNIT)
    assert service.ctx.closed
    assert service.failure is not None and "boom" in service.failure


async def test_admin_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        service = EchoService(EchoSettings(data_dir=tmp_path, admin_port=port))
        with pytest.raises(ConfigError, match=f"cannot bind admin port 127.0.0.1:{port}"):
            await asyncio.wait_for(service.run(), 10 * UNIT)
        assert service.ctx.closed


def test_sigterm_stops_a_service_process_within_its_deadline(tmp_path: Path) -> None:
    env = {**os.environ, "ZBUS_DATA_DIR": str(tmp_path), "ZBUS_SHUTDOWN_TIMEOUT": "2"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.echo_service", "--admin-port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert proc.stdout is not None
        # The service logs one JSON line "service ready" once it serves.
        for line in proc.stdout:
            if b'"service ready"' in line:
                break
        else:
            pytest.fail(f"service exited before it was ready: {proc.wait()}")
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=10 * UNIT)
        rest = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0
    assert time.monotonic() - started < 2 + 3
    assert b'"service stopped"' in rest


def test_a_service_stops_cleanly_when_its_lifeline_closes(tmp_path: Path) -> None:
    read, write = os.pipe()
    env = {**os.environ, "ZBUS_DATA_DIR": str(tmp_path), "ZBUS_LIFELINE_FD": str(read)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.echo_service", "--admin-port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        pass_fds=(read,),
    )
    os.close(read)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if b'"service ready"' in line:
                break
        else:
            pytest.fail(f"service exited before it was ready: {proc.wait()}")
        os.close(write)  # what the kernel does when the starter dies, even by kill -9
        write = -1
        code = proc.wait(timeout=30 * UNIT)
        rest = proc.stdout.read()
    finally:
        if write >= 0:
            os.close(write)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    assert code == 0
    assert b"started this service is gone" in rest
    assert b'"service stopped"' in rest


async def test_a_lifeline_that_is_not_an_open_pipe_is_a_clear_error(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "file", os.O_CREAT | os.O_RDWR)
    try:
        service = EchoService(EchoSettings(data_dir=tmp_path, lifeline_fd=fd))
        with pytest.raises(ConfigError, match=f"lifeline_fd: file descriptor {fd} is not a pipe"):
            await asyncio.wait_for(service.run(), 10 * UNIT)
    finally:
        os.close(fd)
    unused = resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 1  # the highest, not in use
    with pytest.raises(OSError):
        os.fstat(unused)
    service = EchoService(EchoSettings(data_dir=tmp_path, lifeline_fd=unused))
    with pytest.raises(ConfigError, match=f"lifeline_fd: file descriptor {unused} is not open"):
        await asyncio.wait_for(service.run(), 10 * UNIT)


def test_invalid_configuration_exits_with_a_clear_message(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tests.support.echo_service", "--admin-port", "seventy"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert b"admin_port" in result.stderr
    assert b"valid integer" in result.stderr
    assert b"Traceback" not in result.stderr


def test_wait_for_reports_what_it_waited_for() -> None:
    with pytest.raises(AssertionError, match="waiting for nothing"):
        wait_until(lambda: False, timeout=0.05, what="nothing")
