"""The worker runner and WorkerService on real sockets, the test playing the broker.

:class:`WorkerPort` is the broker's worker ROUTER: the test receives what the worker sends,
decoded with the codec, and sends it REQUESTs, HEARTBEATs, DISCONNECTs and garbage. Job
functions synchronise with the test through threading events, never by sleeping.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import zmq
import zmq.asyncio
from prometheus_client.parser import text_string_to_metric_families

from tests.support.waiting import UNIT, Deadline, async_wait_until
from zbus.broker.client import DIALECT, call_body
from zbus.broker.client.worker import Worker
from zbus.common.protocols import emqp
from zbus.worker.service import WorkerService, WorkerSettings

BEAT = 0.1  # heartbeat interval of the workers here


class WorkerPort:
    """The broker's worker ROUTER, driven by the test."""

    def __init__(self) -> None:
        self.ctx = zmq.asyncio.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.linger = 0
        self.sock.bind("tcp://127.0.0.1:0")
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)

    async def recv(self, within: float = 5.0) -> tuple[bytes, emqp.EmqpCommand]:
        if not await self.sock.poll(int(within * UNIT * 1000)):
            raise AssertionError(f"nothing from the worker within {within * UNIT:g}s")
        identity, *frames = await self.sock.recv_multipart()
        return identity, emqp.decode(frames, DIALECT)

    async def expect(
        self, kind: type[Any], within: float = 5.0, skip: tuple[type[Any], ...] = ()
    ) -> tuple[bytes, Any]:
        """The next command of ``kind``, skipping HEARTBEATs and the ``skip`` kinds."""
        deadline = Deadline(within, kind.__name__)
        while True:
            identity, cmd = await self.recv(deadline.left() / UNIT)
            if isinstance(cmd, kind):
                return identity, cmd
            assert isinstance(cmd, (emqp.Heartbeat, *skip)), f"expected {kind.__name__}: {cmd}"

    async def handshake(self, slots: int) -> bytes:
        """INFORM, the ACK, then one READY per slot; returns the worker's identity."""
        identity, inform = await self.expect(emqp.Inform)
        await self.send(identity, emqp.Ack("ack", inform.msgid))
        for _ in range(slots):
            ready_from, _ = await self.expect(emqp.Ready)
            assert ready_from == identity
        return identity

    async def send(self, identity: bytes, cmd: emqp.EmqpCommand) -> None:
        await self.sock.send_multipart([identity, *emqp.encode(cmd, DIALECT)])

    async def request(
        self, identity: bytes, job_id: str, callable: str, *args: Any, path: str = ""
    ) -> None:
        body = call_body(callable, args, None, path)
        await self.send(identity, emqp.Request(job_id, "default", (), body))

    async def reply(self, job_id: str | None = None) -> dict[str, Any]:
        """The body of the next REPLY (for ``job_id`` when given), skipping READYs."""
        deadline = Deadline(5, "a REPLY")
        while True:
            _, cmd = await self.recv(deadline.left() / UNIT)
            if isinstance(cmd, emqp.Reply):
                assert job_id is None or cmd.request_id == job_id
                body: dict[str, Any] = json.loads(cmd.body)
                return body
            assert isinstance(cmd, emqp.Heartbeat | emqp.Ready), cmd

    def close(self) -> None:
        self.sock.close(linger=0)
        self.ctx.term()


@pytest.fixture
async def port() -> AsyncIterator[WorkerPort]:
    port = WorkerPort()
    yield port
    port.close()


@asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(worker.run())
    try:
        yield task
    finally:
        worker.request_stop()
        await asyncio.wait_for(task, 10 * UNIT)


def make_worker(port: WorkerPort, **options: Any) -> Worker:
    options.setdefault("heartbeat_interval", 5.0)
    return Worker(port.endpoint, context=port.ctx, **options)


# --------------------------------------------------------------------------- the worker


async def test_inform_then_one_ready_per_slot(port: WorkerPort) -> None:
    worker = make_worker(port, queues=("fast", "default"), concurrency=3)
    async with running(worker):
        identity, inform = await port.expect(emqp.Inform)
        assert inform.queues == (("fast", 10), ("default", 10))
        assert inform.worker_type == "worker"
        assert identity == worker.identity.encode()
        readies = [await port.expect(emqp.Ready) for _ in range(3)]
        assert {who for who, _ in readies} == {identity}


async def test_a_request_runs_the_registered_function(port: WorkerPort) -> None:
    worker = make_worker(port, concurrency=1)
    seen: list[tuple[str, ...]] = []

    @worker.job("add")
    def add(a: int, b: int, scale: int = 1) -> int:
        return (a + b) * scale

    async def double(x: int) -> int:
        await asyncio.sleep(0)
        return 2 * x

    worker.register("app.jobs.double", double)
    worker.before_job.append(lambda job_id, call: seen.append(("before", job_id, call.callable)))
    worker.after_job.append(lambda job_id, call, outcome, s: seen.append((job_id, outcome)))
    async with running(worker):
        identity = await port.handshake(1)
        body = call_body("add", [2, 3], {"scale": 10}, "")
        await port.send(identity, emqp.Request("j1", "default", (), body))
        assert await port.reply("j1") == {"value": 50}
        await port.expect(emqp.Ready)  # the slot is free again
        # Registered under its qualified name, called as eventmq's client calls it.
        await port.request(identity, "j2", "double", 21, path="app.jobs")
        assert await port.reply("j2") == {"value": 42}
    assert seen == [
        ("before", "j1", "add"),
        ("j1", "succeeded"),
        ("before", "j2", "double"),
        ("j2", "succeeded"),
    ]
    assert worker.counters["succeeded"] == 2


async def test_a_failing_job_answers_an_error_and_the_worker_goes_on(port: WorkerPort) -> None:
    worker = make_worker(port, concurrency=1)
    worker.register_builtins()

    @worker.job()
    def explode() -> None:
        raise SystemExit("even this")

    async with running(worker):
        identity = await port.handshake(1)
        await port.request(identity, "f1", "fail", "bad input")
        assert await port.reply("f1") == {"error": {"type": "RuntimeError", "message": "bad input"}}
        await port.request(identity, "f2", "explode")
        assert (await port.reply("f2"))["error"]["type"] == "SystemExit"
        await port.request(identity, "f3", "missing")
        error = (await port.reply("f3"))["error"]
        assert error["type"] == "UnknownJobError" and "'missing'" in error["message"]
        await port.request(identity, "f4", "dumps", [1], path="json")
        assert "allow_import" in (await port.reply("f4"))["error"]["message"]
        await port.send(identity, emqp.Request("f5", "default", (), b"not a call"))
        assert (await port.reply("f5"))["error"]["type"] == "BadRequest"
        await port.request(identity, "f6", "echo", 1, "two")
        assert await port.reply("f6") == {"value": [1, "two"]}
    assert worker.counters["failed"] == 5
    assert worker.counters["succeeded"] == 1


async def test_unregistered_callables_are_imported_when_allowed(port: WorkerPort) -> None:
    worker = make_worker(port, concurrency=1, allow_import=True)
    async with running(worker):
        identity = await port.handshake(1)
        await port.request(identity, "i1", "dumps", [1, 2], path="json")
        assert await port.reply("i1") == {"value": "[1, 2]"}
        # eventmq's "module:Class" form: the class is built, then its method called.
        call = emqp.EventmqCall(
            callable="most_common",
            path="collections:Counter",
            args=(1,),
            class_args=("abca",),
        )
        request = emqp.Request("i2", "default", (), emqp.build_call_body(call))
        await port.send(identity, request)
        assert await port.reply("i2") == {"value": [["a", 2]]}


async def test_no_more_jobs_run_at_once_than_the_concurrency(port: WorkerPort) -> None:
    worker = make_worker(port, concurrency=2)
    release = threading.Event()
    lock = threading.Lock()
    active = [0, 0]  # now, most ever

    @worker.job()
    def block(n: int) -> int:
        with lock:
            active[0] += 1
            active[1] = max(active)
        release.wait(10 * UNIT)
        with lock:
            active[0] -= 1
        return n

    async with running(worker):
        identity = await port.handshake(2)
        # Twice as many REQUESTs as READYs: the extra ones wait for a free slot.
        for n in range(4):
            await port.request(identity, f"b{n}", "block", n)

        async def two_running_two_waiting() -> bool:
            return worker.running == 2 and worker.stats()["backlog"] == 2

        await async_wait_until(two_running_two_waiting, what="two jobs running, two waiting")
        assert active == [2, 2]
        assert [r["job_id"] for r in worker.stats()["running"]] == ["b0", "b1"]
        release.set()
        replies: set[str | None] = set()
        readies = 0
        deadline = Deadline(10, "four REPLYs and two READYs")
        while len(replies) < 4 or readies < 2:
            _, cmd = await port.recv(deadline.left() / UNIT)
            if isinstance(cmd, emqp.Reply):
                replies.add(cmd.request_id)
            elif isinstance(cmd, emqp.Ready):
                readies += 1
        assert replies == {"b0", "b1", "b2", "b3"}
        assert readies == 2  # the backlog took the first two freed slots
        assert active == [0, 2]
        assert worker.counters["overflow"] == 2


async def test_a_silent_broker_gets_a_new_connection(port: WorkerPort) -> None:
    worker = make_worker(port, concurrency=2, heartbeat_interval=BEAT, misses=2)
    async with running(worker):
        first, _ = await port.expect(emqp.Inform)
        # Nothing is answered: after BEAT x 2 the worker starts over as someone new.
        deadline = Deadline(5, "a new INFORM")
        while True:
            second, inform = await port.recv(deadline.left() / UNIT)
            if isinstance(inform, emqp.Inform):
                break
            assert second == first and isinstance(inform, emqp.Ready | emqp.Heartbeat)
        assert second != first
        assert second == worker.identity.encode()
        assert inform.worker_type == "worker"
        for _ in range(2):
            who, _ = await port.expect(emqp.Ready)
            assert who == second
        assert worker.counters["reconnects"] >= 1


async def test_heartbeats_keep_the_connection(port: WorkerPort) -> None:
    worker = make_worker(port, concurrency=1, heartbeat_interval=BEAT, misses=2)
    async with running(worker):
        identity = await port.handshake(1)
        beats = 0
        # The broker's side of the dialog: a HEARTBEAT for each one received.
        while beats < 8:
            who, cmd = await port.recv()
            assert who == identity, "the worker reconnected although the broker talks"
            if isinstance(cmd, emqp.Heartbeat):
                beats += 1
                assert cmd.time is not None
                await port.send(identity, emqp.Heartbeat(f"hb{beats}"))
        assert worker.counters["reconnects"] == 0


async def test_disconnect_makes_the_worker_reconnect(port: WorkerPort) -> None:
    worker = make_worker(port, concurrency=2)
    worker.register_builtins()
    async with running(worker):
        first = await port.handshake(2)
        await port.send(first, emqp.Disconnect("bye"))
        second = await port.handshake(2)
        assert second != first
        assert worker.counters["reconnects"] == 1
        await port.request(second, "d1", "echo", "after")
        assert await port.reply("d1") == {"value": ["after"]}


async def test_stop_finishes_running_jobs_then_says_kbye(port: WorkerPort) -> None:
    worker = make_worker(port, concurrency=1)
    release = threading.Event()
    worker.register("wait", lambda: release.wait(10 * UNIT))
    async with running(worker) as task:
        identity = await port.handshake(1)
        await port.request(identity, "k1", "wait")

        async def started() -> bool:
            return worker.running == 1

        await async_wait_until(started, what="the job to start")
        worker.request_stop()
        assert not task.done()
        release.set()
        assert await port.reply("k1") == {"value": True}
        who, _ = await port.expect(emqp.Kbye)  # and no READY before it
        assert who == identity
        await asyncio.wait_for(task, 5 * UNIT)


async def test_malformed_frames_from_the_broker_are_dropped_and_counted(
    port: WorkerPort,
) -> None:
    worker = make_worker(port, concurrency=1)
    worker.register_builtins()
    async with running(worker):
        identity = await port.handshake(1)
        for frames in (
            [b"junk"],
            [b"", b"eMQP/1.0", b"REQUEST", b"id-only"],
            [b"", b"eMQP/1.0", b"LAUNCH", b"m1"],
            [b"", b"eMQP/1.0", b"REQUEST", b"\xff", b"default", b"", b"x"],
        ):
            await port.sock.send_multipart([identity, *frames])
        await port.send(identity, emqp.Ready("not-for-a-worker"))
        await port.request(identity, "m2", "echo", "still here")
        assert await port.reply("m2") == {"value": ["still here"]}
        assert worker.counters["malformed"] == 4
        assert worker.counters["unexpected"] == 1
        assert worker.counters["reconnects"] == 0
        assert worker.identity.encode() == identity


def test_registration_rules() -> None:
    worker = Worker()
    worker.register_builtins()
    with pytest.raises(ValueError, match="already registered"):
        worker.register("echo", print)
    with pytest.raises(ValueError, match="queues"):
        Worker(queues="default")
    with pytest.raises(ValueError):
        Worker(concurrency=0)
    assert worker.jobs == ["echo", "fail", "noop", "sleep"]


# --------------------------------------------------------------------------- the service

# WorkerService imports this module through ZBUS_IMPORT_JOBS and calls this.


def register_jobs(worker: Worker) -> None:
    worker.register("tests.square", lambda x: x * x)


async def test_worker_service_runs_jobs_reports_and_stops(port: WorkerPort, tmp_path: Path) -> None:
    settings = WorkerSettings.load(
        None,
        data_dir=tmp_path,
        broker_endpoint=port.endpoint,
        queues="default, bulk",
        concurrency=2,
        import_jobs=__name__,
    )
    service = WorkerService(settings)
    task = asyncio.create_task(service.run())

    async def started() -> bool:
        if task.done():
            task.result()
        return service.readiness()["started"]

    await async_wait_until(started, what="service start")
    try:
        identity, inform = await port.expect(emqp.Inform)
        assert [name for name, _ in inform.queues] == ["default", "bulk"]
        await port.send(identity, emqp.Ack("ack", inform.msgid))
        await port.request(identity, "s1", "noop")
        await port.request(identity, "s2", "tests.square", 7)
        await port.request(identity, "s3", "fail")
        bodies = [await port.reply() for _ in range(3)]
        assert {"value": None} in bodies and {"value": 49} in bodies

        async with httpx.AsyncClient(base_url=service.admin_url or "") as http:
            ready = await http.get("/readyz")
            assert ready.status_code == 200

            info = (await http.get("/api/v1/worker")).json()
            assert info["queues"] == ["default", "bulk"]
            assert info["concurrency"] == 2
            assert (info["jobs_done"], info["jobs_failed"]) == (2, 1)
            assert info["running"] == []
            assert info["connected"] is True
            assert {"noop", "echo", "sleep", "fail", "tests.square"} <= set(info["jobs"])

            text = (await http.get("/metrics")).text
            samples = {
                (s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text)
                for s in family.samples
            }
            assert samples[("zbus_worker_jobs_total", (("outcome", "succeeded"),))] == 2
            assert samples[("zbus_worker_jobs_total", (("outcome", "failed"),))] == 1
            assert samples[("zbus_worker_job_seconds_count", ())] == 3
            assert samples[("zbus_worker_running", ())] == 0
            assert samples[("zbus_worker_reconnects_total", ())] == 0
            dropped = ("zbus_worker_dropped_messages_total", (("reason", "malformed"),))
            assert samples[dropped] == 0
    finally:
        service.request_stop()
        await asyncio.wait_for(task, 10 * UNIT)
    who, _ = await port.expect(emqp.Kbye, skip=(emqp.Ready,))
    assert who == identity


def test_worker_settings_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZBUS_BROKER_ENDPOINT", "tcp://10.0.0.1:47290")
    monkeypatch.setenv("ZBUS_QUEUES", "a,b")
    monkeypatch.setenv("ZBUS_CONCURRENCY", "8")
    monkeypatch.setenv("ZBUS_IMPORT_JOBS", "x.jobs")
    settings = WorkerSettings.load([])
    assert (settings.broker_endpoint, settings.queues) == ("tcp://10.0.0.1:47290", "a,b")
    assert (settings.concurrency, settings.import_jobs) == (8, "x.jobs")
    monkeypatch.setenv("ZBUS_QUEUES", " , ")
    with pytest.raises(ValueError, match="queue"):
        WorkerSettings.load([])


async def test_back_to_back_jobs_never_wait_for_a_timer(port: WorkerPort) -> None:
    # Replies and READYs are sent from job completions while the reader waits: each send
    # must leave the reader able to see the next REQUEST at once, not at the next
    # heartbeat (30 s here, far beyond the test's patience).
    worker = make_worker(port, concurrency=4, heartbeat_interval=30.0)
    worker.register_builtins()
    async with running(worker):
        identity, _ = await port.expect(emqp.Inform)
        sent = replies = 0
        while replies < 400:
            _, cmd = await port.recv(within=2.0)
            if isinstance(cmd, emqp.Ready) and sent < 400:
                await port.request(identity, f"n{sent}", "noop")
                sent += 1
            elif isinstance(cmd, emqp.Reply):
                replies += 1
        assert worker.counters["succeeded"] == 400
