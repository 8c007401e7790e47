"""``zbus sparkworker`` as a process of its own, building its own session: a job that
stops the session does not take the worker down, and SIGTERM stops it cleanly."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.archive import make_events, write_archive
from tests.support.broker import running_broker
from tests.support.service_log import logged_endpoints
from tests.support.waiting import UNIT, async_wait_until, wait_until
from zbus.broker.client import AsyncBrokerClient

ROOT = Path(__file__).resolve().parents[3]
WAIT = 90 * UNIT  # a cold session in a new process, twice
# The broker's acknowledgement of a submit: its thread shares the machine with Spark's
# JVMs, which can hold both cores for seconds.
ACK_TIMEOUT = 30 * UNIT


@pytest.mark.slow
async def test_own_session_survives_a_job_that_stops_it(tmp_path: Path) -> None:
    events = make_events(40, ("a/1", "a/2"), datetime(2024, 3, 9, tzinfo=UTC))
    write_archive(tmp_path / "archive", events)
    async with running_broker(tmp_path / "broker") as broker:
        log = (tmp_path / "sparkworker.log").open("w")
        process = await asyncio.create_subprocess_exec(
            *[
                sys.executable,
                "-m",
                "zbus",
                "sparkworker",
                "--admin-port",
                "0",  # the test reads the port from its log
                "--broker-endpoint",
                broker.endpoints["workers"],
                "--data-dir",
                str(tmp_path / "data"),
                "--archive-path",
                str(tmp_path / "archive"),
                "--spark-master",
                "local[1]",
                "--spark-conf",
                "spark.sql.shuffle.partitions=2",
                "--spark-jobs",
                "stops=tests.support.spark_jobs:stops_session",
            ],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            async with (
                httpx.AsyncClient() as http,
                AsyncBrokerClient(broker.endpoints["clients"], ack_timeout=ACK_TIMEOUT) as client,
            ):

                async def ready() -> bool:
                    assert process.returncode is None, (tmp_path / "sparkworker.log").read_text()
                    endpoints = logged_endpoints(tmp_path / "sparkworker.log")
                    if endpoints is None:
                        return False
                    http.base_url = httpx.URL(endpoints["admin"])
                    try:
                        return (await http.get("/readyz")).status_code == 200
                    except httpx.TransportError:
                        return False

                await async_wait_until(ready, within=WAIT, what="the sparkworker process")
                first: dict[str, Any] = (await http.get("/api/v1/spark")).json()
                assert (first["adopted"], first["master"], first["restarts"]) == (
                    False,
                    "local[1]",
                    0,
                )

                stopped = await client.submit_and_wait("spark", "stops", timeout=WAIT)
                assert stopped["result"] == "stopped"
                stats = await client.submit_and_wait("spark", "topic-stats", timeout=WAIT)
                assert stats["result"]["events"] == 40
                again: dict[str, Any] = (await http.get("/api/v1/spark")).json()
                assert again["restarts"] == 1 and again["up"] is True
                assert again["app_id"] != first["app_id"]
                metrics = (await http.get("/metrics")).text
                assert "zbus_spark_session_restarts_total 1.0" in metrics
                assert "zbus_spark_session_up 1.0" in metrics
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                code = await asyncio.wait_for(process.wait(), 60 * UNIT)
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
                log.close()
    assert code == 0, (tmp_path / "sparkworker.log").read_text()
    assert "service stopped" in (tmp_path / "sparkworker.log").read_text()


def _catches_sigterm(pid: int) -> bool:
    """Whether process ``pid`` has a handler for SIGTERM (Linux: SigCgt in its status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1)))


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_while_it_still_loads_stops_it_with_status_0(
    tmp_path: Path, refused_port: int
) -> None:
    # As soon as the process catches SIGTERM (before PySpark is even imported), a SIGTERM
    # is a graceful stop: the service starts, closes its session and exits 0.
    log = tmp_path / "sparkworker.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "zbus.sparkworker",
                "--admin-port",
                "0",
                "--broker-endpoint",
                f"tcp://127.0.0.1:{refused_port}",
                "--data-dir",
                str(tmp_path / "data"),
                "--spark-master",
                "local[1]",
            ],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: _catches_sigterm(process.pid), what="the process to catch SIGTERM")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=WAIT) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = log.read_text()
    assert '"signal received, shutting down"' in text and '"service stopped"' in text
