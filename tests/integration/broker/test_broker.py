"""The broker on real sockets, with the test playing clients and workers in raw eMQP."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import zmq
import zmq.asyncio

from tests.support.broker import Peer, call_body, new_id, running_broker
from tests.support.waiting import async_wait_until
from zbus.common.protocols import emqp


async def _worker(ctx: zmq.asyncio.Context, endpoint: str, queues: str = "default") -> Peer:
    worker = Peer(ctx, endpoint)
    await worker.send(emqp.Inform(new_id(), tuple((q, 10) for q in queues.split(","))))
    ack = await worker.recv_skipping_heartbeats()
    assert isinstance(ack, emqp.Ack)
    return worker


async def test_round_trip_returns_the_result_to_the_client(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as broker:
        ctx = zmq.asyncio.Context()
        client = Peer(ctx, broker.endpoints["clients"])
        worker = await _worker(ctx, broker.endpoints["workers"])
        try:
            job_id = new_id()
            await client.send(emqp.Request(job_id, "default", (), call_body("echo", 1, 2)))
            ack = await client.recv()
            assert isinstance(ack, emqp.Ack) and ack.ref_id == job_id

            await worker.send(emqp.Ready(new_id()))
            request = await worker.recv_skipping_heartbeats()
            assert isinstance(request, emqp.Request) and request.msgid == job_id
            assert emqp.parse_call_body(request.body).args == (1, 2)
            await worker.send(emqp.Reply(new_id(), b'{"value": [1, 2]}', job_id))

            reply = await client.recv()
            assert isinstance(reply, emqp.Reply)
            assert (reply.request_id, json.loads(reply.body)) == (job_id, {"value": [1, 2]})

            async def stored() -> bool:
                j = await broker.read(lambda r: r.get(job_id))
                return j is not None and j.state.value == "succeeded"

            await async_wait_until(stored, what="succeeded job in the store")
            # A duplicate REQUEST runs nothing and gets the result again.
            await client.send(emqp.Request(job_id, "default", (), call_body("echo", 1, 2)))
            again = await client.recv()
            assert isinstance(again, emqp.Reply) and again.body == b'{"value": [1, 2]}'
        finally:
            client.close()
            worker.close()
            ctx.term()


async def test_a_silent_worker_expires_its_job_is_retried_then_dead(tmp_path: Path) -> None:
    async with running_broker(
        tmp_path, heartbeat_interval=0.1, heartbeat_misses=2, backoff_base=0.0
    ) as broker:
        ctx = zmq.asyncio.Context()
        client = Peer(ctx, broker.endpoints["clients"])
        try:
            job_id = new_id()
            await client.send(
                emqp.Request(job_id, "default", (("retry-count", "1"),), call_body("noop"))
            )
            assert isinstance(await client.recv(), emqp.Ack)
            for attempt in (1, 2):
                worker = await _worker(ctx, broker.endpoints["workers"])
                await worker.send(emqp.Ready(new_id()))
                got = await worker.recv_skipping_heartbeats()
                assert isinstance(got, emqp.Request) and got.msgid == job_id, attempt
                worker.close()  # dies mid-job: no reply, no heartbeat, no goodbye
            reply = await client.recv(within=10)
            assert isinstance(reply, emqp.Reply) and reply.request_id == job_id
            body = json.loads(reply.body)
            assert body["state"] == "dead"
            job = await broker.read(lambda r: r.get(job_id))
            assert job is not None and job.state.value == "dead" and job.attempts == 2
            assert job.error is not None
        finally:
            client.close()
            ctx.term()


async def test_malformed_frames_are_counted_and_change_nothing(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as broker:
        ctx = zmq.asyncio.Context()
        client = Peer(ctx, broker.endpoints["clients"])
        worker = Peer(ctx, broker.endpoints["workers"])
        try:
            for frames in ([b"garbage"], [b"", b"eMQP/1.0", b"NOPE", b"x"], [b"", b"HTTP/1.1"]):
                await client.sock.send_multipart(frames)
                await worker.sock.send_multipart(frames)
            # A REPLY for a job nobody knows, from a worker that never sent INFORM.
            await worker.send(emqp.Reply(new_id(), b"{}", new_id()))
            answer = await worker.recv()
            assert isinstance(answer, emqp.Disconnect)

            def rejected() -> float:
                total = 0.0
                for port in ("client", "worker"):
                    for reason in ("frame_count", "bad_value", "unknown_command", "refused"):
                        total += (
                            broker.registry.get_sample_value(
                                "zbus_broker_rejected_total", {"port": port, "reason": reason}
                            )
                            or 0.0
                        )
                return total

            await async_wait_until(lambda: asyncio.sleep(0, rejected() >= 7), what="rejections")
            counts = await broker.read(lambda r: r.counts())
            assert counts == {}
            # And the broker still serves a real job.
            job_id = new_id()
            await client.send(emqp.Request(job_id, "default", (), call_body("noop")))
            ack = await client.recv()
            assert isinstance(ack, emqp.Ack) and ack.ref_id == job_id
        finally:
            client.close()
            worker.close()
            ctx.term()


async def test_interval_schedule_fires_jobs(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as broker:
        ctx = zmq.asyncio.Context()
        client = Peer(ctx, broker.endpoints["clients"])
        worker = await _worker(ctx, broker.endpoints["workers"])
        try:
            await client.send(emqp.Schedule(new_id(), "default", (), 1, call_body("tick"), ""))
            for _ in range(2):
                await worker.send(emqp.Ready(new_id()))
                request = await worker.recv_skipping_heartbeats(within=10)
                assert isinstance(request, emqp.Request)
                assert emqp.parse_call_body(request.body).callable == "tick"
                await worker.send(emqp.Reply(new_id(), b'{"value": null}', request.msgid))
            schedules = await broker.read(lambda r: r.schedules())
            assert len(schedules) == 1 and schedules[0].interval == 1
        finally:
            client.close()
            worker.close()
            ctx.term()
