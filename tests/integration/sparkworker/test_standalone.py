"""The sparkworker on a standalone Spark cluster: a master and a worker started with
pyspark's own ``bin/spark-class`` on 127.0.0.1, jobs submitted through the broker."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyspark.find_spark_home import _find_spark_home

from tests.integration.sparkworker.test_process import ROOT
from tests.support.archive import make_events, write_archive
from tests.support.broker import running_broker
from tests.support.ports import HeldPorts
from tests.support.service_log import logged_endpoints
from tests.support.waiting import UNIT, async_wait_until
from zbus.broker.client import AsyncBrokerClient

WAIT = 120 * UNIT
# The broker's acknowledgement of a submit: its thread shares the machine with Spark's
# JVMs, which can hold both cores for seconds.
ACK_TIMEOUT = 30 * UNIT


def _spark_class(*args: str, log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    script = Path(_find_spark_home()) / "bin" / "spark-class"
    with log.open("wb") as out:
        return subprocess.Popen([str(script), *args], stdout=out, stderr=subprocess.STDOUT, env=env)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def standalone_cluster(tmp: Path) -> Iterator[tuple[str, str]]:
    """A master and one worker (1 core, 1 GiB); yields (master URL, master web UI)."""
    # Spark's own ports, for its command line: held until the master starts.
    held = HeldPorts(3)
    port, ui, worker_ui = held.ports
    held.release()
    tmp.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_WORKER_DIR": str(tmp / "work"),
        "SPARK_LOG_DIR": str(tmp / "logs"),
        "PYSPARK_PYTHON": sys.executable,
    }
    master = _spark_class(
        "org.apache.spark.deploy.master.Master",
        *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)),
        log=tmp / "master.log",
        env=env,
    )
    url = f"spark://127.0.0.1:{port}"
    worker = _spark_class(
        "org.apache.spark.deploy.worker.Worker",
        *("--host", "127.0.0.1", "--cores", "1", "--memory", "1g"),
        *("--webui-port", str(worker_ui), url),
        log=tmp / "worker.log",
        env=env,
    )
    try:
        yield url, f"http://127.0.0.1:{ui}"
    finally:
        _stop(worker)
        _stop(master)


@contextlib.asynccontextmanager
async def sparkworker(
    tmp: Path, broker: str, master: str
) -> AsyncIterator[asyncio.subprocess.Process]:
    log = (tmp / "sparkworker.log").open("w")
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "zbus", "sparkworker"),
        *("--admin-port", "0", "--broker-endpoint", broker),  # read back from its log
        *("--data-dir", str(tmp / "data"), "--archive-path", str(tmp / "archive")),
        *("--spark-master", master),
        *("--spark-conf", "spark.executor.memory=512m,spark.sql.shuffle.partitions=2"),
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 60 * UNIT)
            except TimeoutError:
                process.kill()
                await process.wait()
        log.close()


@pytest.mark.slow
async def test_jobs_run_on_a_standalone_master_and_worker(tmp_path: Path) -> None:
    events = make_events(300, ("s/a", "s/b", "t/c"), datetime(2024, 5, 1, tzinfo=UTC))
    write_archive(tmp_path / "archive", events)
    with standalone_cluster(tmp_path / "spark") as (master, master_ui):
        async with httpx.AsyncClient() as http:

            async def worker_joined() -> bool:
                try:
                    state: dict[str, Any] = (await http.get(f"{master_ui}/json/")).json()
                except (httpx.TransportError, ValueError):
                    return False
                return int(state.get("aliveworkers", 0)) >= 1

            await async_wait_until(worker_joined, within=WAIT, what="the Spark worker")
            async with (
                running_broker(tmp_path / "broker") as broker,
                sparkworker(tmp_path, broker.endpoints["workers"], master) as proc,
                AsyncBrokerClient(broker.endpoints["clients"], ack_timeout=ACK_TIMEOUT) as client,
            ):
                admin = ""

                async def ready() -> bool:
                    nonlocal admin
                    assert proc.returncode is None, (tmp_path / "sparkworker.log").read_text()
                    endpoints = logged_endpoints(tmp_path / "sparkworker.log")
                    if endpoints is None:
                        return False
                    admin = endpoints["admin"]
                    try:
                        return (await http.get(f"{admin}/readyz")).status_code == 200
                    except httpx.TransportError:
                        return False

                await async_wait_until(ready, within=WAIT, what="the sparkworker on the cluster")
                spark = (await http.get(f"{admin}/api/v1/spark")).json()
                assert spark["master"] == master and spark["up"] is True

                reply = await client.submit_and_wait(
                    "spark", "topic-stats", kwargs={"prefix": "s/"}, timeout=WAIT
                )
                expected = {t: sum(e.topic == t for e in events) for t in ("s/a", "s/b")}
                assert reply["result"]["events"] == sum(expected.values())
                got = {row["topic"]: row["events"] for row in reply["result"]["preview"]}
                assert got == expected

                # The application ran on the cluster's worker, not in the driver.
                state = (await http.get(f"{master_ui}/json/")).json()
                apps = state.get("activeapps", []) + state.get("completedapps", [])
                assert any(app.get("id") == spark["app_id"] for app in apps), state
