"""The broker's clients, worker, worker service and ``zbus jobs`` over CURVE.

A real broker runs CURVE on both ports with a ZAP allow-list that lists the keys of one
client and one worker; an intruder's key pair is left off the list. Every key comes from
:func:`generate_keys` in the test's own directory.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import zmq
import zmq.asyncio
from zmq.utils.monitor import recv_monitor_message

from tests.support.broker import running_broker
from tests.support.waiting import UNIT, async_wait_until
from zbus.broker.client import AsyncBrokerClient, BrokerClient, BrokerUnavailable
from zbus.broker.client.worker import Worker
from zbus.broker.server.service import BrokerService
from zbus.cli import main
from zbus.common.security import KeyPair, generate_keys, load_keys
from zbus.common.settings import ConfigError
from zbus.worker.service import WorkerService, WorkerSettings


@dataclass(frozen=True)
class CurveKeys:
    """Key files: the broker's, its allow-list, listed and unlisted client key pairs."""

    broker_secret: Path
    broker_public: Path
    allowed: Path  # the broker's allow-list directory
    client_secret: Path  # listed
    worker_secret: Path  # listed
    intruder_secret: Path  # not listed

    def curve(self, secret: Path) -> tuple[KeyPair, bytes]:
        """The ``curve`` argument of a client or worker with the key pair in ``secret``."""
        return load_keys(secret), load_keys(self.broker_public).public


@pytest.fixture
def keys(tmp_path: Path) -> CurveKeys:
    directory, allowed = tmp_path / "keys", tmp_path / "allowed"
    allowed.mkdir()
    broker_public, broker_secret = generate_keys(directory, "broker")
    secrets = {}
    for name in ("client", "worker", "intruder"):
        public, secrets[name] = generate_keys(directory, name)
        if name != "intruder":
            (allowed / public.name).write_bytes(public.read_bytes())
    return CurveKeys(
        broker_secret=broker_secret,
        broker_public=broker_public,
        allowed=allowed,
        client_secret=secrets["client"],
        worker_secret=secrets["worker"],
        intruder_secret=secrets["intruder"],
    )


@asynccontextmanager
async def curve_broker(
    tmp_path: Path, keys: CurveKeys, **settings: Any
) -> AsyncIterator[BrokerService]:
    async with running_broker(
        tmp_path / "broker",
        curve_secret_key=keys.broker_secret,
        curve_allowed_clients=keys.allowed,
        **settings,
    ) as broker:
        yield broker


@asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[Worker]:
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        worker.request_stop()
        await asyncio.wait_for(task, 30 * UNIT)


async def listed_workers(broker: BrokerService) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=broker.admin_url or "") as http:
        workers: list[dict[str, Any]] = (await http.get("/api/v1/workers")).json()["workers"]
        return workers


class MonitoredContext(zmq.asyncio.Context):
    """Attaches a handshake monitor to every DEALER it makes, before it connects: a CURVE
    client refused by ZAP does not retry, so a monitor attached later would see nothing."""

    monitors: list[zmq.asyncio.Socket]  # declared here: zmq takes other attributes as options

    def __init__(self) -> None:
        super().__init__()
        self.monitors = []

    def socket(self, socket_type: int, *args: Any, **kwargs: Any) -> Any:
        sock = super().socket(socket_type, *args, **kwargs)
        if socket_type == zmq.DEALER:
            events = zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH
            self.monitors.append(sock.get_monitor_socket(events))
        return sock

    async def handshake(self, index: int = 0) -> int:
        """The event that ended the handshake of the ``index``-th DEALER made."""

        async def made() -> bool:
            return len(self.monitors) > index

        await async_wait_until(made, what=f"DEALER number {index + 1}")
        event = await asyncio.wait_for(recv_monitor_message(self.monitors[index]), 10 * UNIT)
        return int(event["event"])

    def close_all(self) -> None:
        for monitor in self.monitors:
            monitor.close(linger=0)
        self.destroy(linger=0)


# --------------------------------------------------------------------------- the libraries


async def test_a_listed_client_and_worker_run_jobs_over_curve(
    tmp_path: Path, keys: CurveKeys
) -> None:
    async with curve_broker(tmp_path, keys) as broker:
        worker = Worker(
            broker.endpoints["workers"], queues=("default",), curve=keys.curve(keys.worker_secret)
        )
        worker.register_builtins()
        async with running(worker):
            curve = keys.curve(keys.client_secret)
            async with AsyncBrokerClient(broker.endpoints["clients"], curve=curve) as client:
                value = await client.submit_and_wait("default", "echo", args=(1, "a"), timeout=30)
                assert value == [1, "a"]

            def blocking() -> Any:
                with BrokerClient(broker.endpoints["clients"], curve=curve) as client:
                    return client.submit_and_wait("default", "echo", args=(2,), timeout=30)

            assert await asyncio.to_thread(blocking) == [2]
            assert worker.stats()["curve"] is True
            assert worker.counters["succeeded"] == 2


async def test_a_reconnected_worker_speaks_curve_again(tmp_path: Path, keys: CurveKeys) -> None:
    # The broker heartbeats rarely and the worker gives up on it soon, so the worker
    # keeps replacing its socket (a new identity each time) after each INFORM's ACK.
    async with curve_broker(tmp_path, keys, heartbeat_interval=60) as broker:
        worker = Worker(
            broker.endpoints["workers"],
            queues=("default",),
            heartbeat_interval=0.05,
            misses=1,
            curve=keys.curve(keys.worker_secret),
        )
        async with running(worker):

            async def informed_twice() -> bool:
                # The broker's port admits only CURVE clients that are listed, so a second
                # identity known to it is a re-created socket that made the handshake.
                return worker.counters["reconnects"] >= 1 and len(await listed_workers(broker)) >= 2

            await async_wait_until(informed_twice, what="INFORMs from two of the worker's sockets")


async def test_an_unlisted_client_gets_no_acknowledgement(tmp_path: Path, keys: CurveKeys) -> None:
    async with curve_broker(tmp_path, keys) as broker:
        endpoint, curve = broker.endpoints["clients"], keys.curve(keys.intruder_secret)
        async with AsyncBrokerClient(endpoint, ack_timeout=0.5 * UNIT, curve=curve) as client:
            with pytest.raises(BrokerUnavailable) as refused:
                await client.submit("default", "echo", args=(1,))

        def blocking() -> None:
            with BrokerClient(endpoint, ack_timeout=0.5 * UNIT, curve=curve) as client:
                client.submit("default", "echo", args=(1,))

        with pytest.raises(BrokerUnavailable):
            await asyncio.to_thread(blocking)

        # Nothing got through the handshake: the broker knows nothing of the job.
        (job_id,) = refused.value.job_ids
        async with httpx.AsyncClient(base_url=broker.admin_url or "") as http:
            assert (await http.get(f"/api/v1/jobs/{job_id}")).status_code == 404


async def test_an_unlisted_worker_never_gets_a_job(tmp_path: Path, keys: CurveKeys) -> None:
    async with curve_broker(tmp_path, keys) as broker:
        client_curve = keys.curve(keys.client_secret)
        async with AsyncBrokerClient(broker.endpoints["clients"], curve=client_curve) as client:
            job_id = await client.submit("default", "echo", args=("kept",))

            ctx = MonitoredContext()
            try:
                intruder = Worker(
                    broker.endpoints["workers"],
                    queues=("default",),
                    context=ctx,
                    curve=keys.curve(keys.intruder_secret),
                )
                intruder.register_builtins()
                async with running(intruder):
                    assert await ctx.handshake() == zmq.EVENT_HANDSHAKE_FAILED_AUTH
                    async with httpx.AsyncClient(base_url=broker.admin_url or "") as http:
                        job = (await http.get(f"/api/v1/jobs/{job_id}")).json()
                        assert job["state"] == "queued"
                        assert (await http.get("/api/v1/workers")).json()["workers"] == []

                    listed = Worker(
                        broker.endpoints["workers"],
                        queues=("default",),
                        curve=keys.curve(keys.worker_secret),
                    )
                    listed.register_builtins()
                    async with running(listed):
                        assert await client.result(job_id, timeout=30 * UNIT) == ["kept"]
                    assert (intruder.connected, intruder.counters["succeeded"]) == (False, 0)
                    assert listed.counters["succeeded"] == 1
            finally:
                ctx.close_all()


def test_a_public_key_file_is_not_a_client_key_pair(keys: CurveKeys) -> None:
    public_only = (load_keys(keys.broker_public), load_keys(keys.broker_public).public)
    with pytest.raises(ConfigError, match="secret"):
        Worker(curve=public_only)
    with pytest.raises(ConfigError, match="secret"):
        BrokerClient(curve=public_only)


# --------------------------------------------------------------------------- the service


async def test_the_worker_service_connects_over_curve(tmp_path: Path, keys: CurveKeys) -> None:
    async with curve_broker(tmp_path, keys) as broker:
        settings = WorkerSettings.load(
            None,
            data_dir=tmp_path / "worker",
            broker_endpoint=broker.endpoints["workers"],
            broker_public_key=keys.broker_public,
            curve_secret_key=keys.worker_secret,
        )
        service = WorkerService(settings)
        task = asyncio.create_task(service.run())

        async def started() -> bool:
            if task.done():
                task.result()
            return service.readiness()["started"]

        try:
            await async_wait_until(started, what="worker service start")
            curve = keys.curve(keys.client_secret)
            async with AsyncBrokerClient(broker.endpoints["clients"], curve=curve) as client:
                value = await client.submit_and_wait("default", "echo", args=(7,), timeout=30)
                assert value == [7]
            async with httpx.AsyncClient(base_url=service.admin_url or "") as http:
                info = (await http.get("/api/v1/worker")).json()
                assert (info["curve"], info["connected"], info["jobs_done"]) == (True, True, 1)
        finally:
            service.request_stop()
            await asyncio.wait_for(task, 30 * UNIT)


# --------------------------------------------------------------------------- zbus jobs


async def test_jobs_submit_with_curve_options(
    tmp_path: Path, keys: CurveKeys, capsys: pytest.CaptureFixture[str]
) -> None:
    async with curve_broker(tmp_path, keys) as broker:
        worker = Worker(
            broker.endpoints["workers"], queues=("default",), curve=keys.curve(keys.worker_secret)
        )
        worker.register("add", lambda a, b: {"sum": a + b})
        async with running(worker):
            submit = ["jobs", "submit", "default", "add", "-p", "a=2", "-p", "b=40"]
            submit += ["--broker", broker.endpoints["clients"], "--wait", "30"]
            secret = ["--curve-secret-key", str(keys.client_secret)]
            public = ["--broker-public-key", str(keys.broker_public)]

            code = await asyncio.to_thread(main, [*submit, *secret, *public])
            assert code == 0
            assert json.loads(capsys.readouterr().out) == {"sum": 42}

            for half in (secret, public):
                code = await asyncio.to_thread(main, [*submit, *half])
                err = capsys.readouterr().err
                assert code == 2 and "--curve-secret-key and --broker-public-key" in err

            missing = ["--curve-secret-key", str(tmp_path / "nothing.key_secret")]
            code = await asyncio.to_thread(main, [*submit, *missing, *public])
            assert code == 2 and "cannot load CURVE key file" in capsys.readouterr().err

            not_secret = ["--curve-secret-key", str(keys.broker_public)]
            code = await asyncio.to_thread(main, [*submit, *not_secret, *public])
            assert code == 2 and "holds no secret key" in capsys.readouterr().err
