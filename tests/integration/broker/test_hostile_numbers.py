"""Hostile numbers against a real broker process: refused with an error naming the field,
counted, never stored, and the broker goes on serving; a store row out of range left by
an older broker is repaired at start, not fatal."""

from __future__ import annotations

import json
import signal
import sqlite3
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import zmq
from prometheus_client.parser import text_string_to_metric_families

from tests.support.broker import (
    DIALECT,
    call_body,
    new_id,
    running_broker,
    start_broker_process,
    stop_process,
)
from tests.support.waiting import UNIT, Deadline, wait_until
from zbus import AsyncBrokerClient, BrokerClient
from zbus.broker.core.limits import MAX_RETRIES
from zbus.broker.server.store import JobStore
from zbus.common.protocols import emqp

H = [b"", b"eMQP/1.0"]


class _Peer:
    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.rcvtimeo = int(10_000 * UNIT)
        self.sock.connect(endpoint)

    def send(self, cmd: emqp.EmqpCommand) -> None:
        self.sock.send_multipart(emqp.encode(cmd, DIALECT))

    def recv(self) -> emqp.EmqpCommand:
        deadline = Deadline(10, "a command other than a HEARTBEAT")
        while True:
            deadline.left()  # each read has RCVTIMEO; heartbeats alone must not go on
            cmd = emqp.decode(self.sock.recv_multipart(), DIALECT)
            if not isinstance(cmd, emqp.Heartbeat):
                return cmd


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10 * UNIT) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _samples(admin: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    _, text = _get(f"{admin}/metrics")
    found: dict[tuple[tuple[str, str], ...], float] = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def _rejected(admin: str, port: str, reason: str) -> float:
    key = (("port", port), ("reason", reason))
    return _samples(admin, "zbus_broker_rejected_total").get(key, 0.0)


def _refusal(cmd: emqp.EmqpCommand, job_id: str) -> dict[str, Any]:
    assert isinstance(cmd, emqp.Reply) and cmd.request_id == job_id, cmd
    body: dict[str, Any] = json.loads(cmd.body)
    assert body["state"] == "rejected"
    return body


def _log(lines: list[bytes]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines if line.startswith(b"{")]


def test_out_of_range_numbers_are_refused_and_the_broker_keeps_serving(tmp_path: Path) -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    proc, endpoints = start_broker_process(tmp_path)
    admin = endpoints["admin"]
    try:
        client = _Peer(ctx, endpoints["clients"])
        # The frames: 2**63 and more killed the routing thread; 2**63 - 1 was
        # stored and overflowed at the next restart. Both are refused now, by name.
        refused = []
        for value in ("99999999999999999999", "9223372036854775807", "1001", "9" * 5000):
            job_id = new_id()
            refused.append(job_id)
            client.send(emqp.Request(job_id, "default", (("retry-count", value),), b"call"))
            error = _refusal(client.recv(), job_id)["error"]
            assert error["type"] == "HeaderError"
            assert error["message"].startswith("header retry-count: expected a whole number")
            assert "0..1000" in error["message"]
        for header in (("timeout", "1e300"), ("delay", "31536000")):
            job_id = new_id()
            refused.append(job_id)
            client.send(emqp.Request(job_id, "default", (header,), b"call"))
            assert f"header {header[0]}" in _refusal(client.recv(), job_id)["error"]["message"]
        schedule = emqp.Schedule(new_id(), "default", (), 2**64 - 1, call_body("tick"), "")
        client.send(schedule)
        answer = _refusal(client.recv(), schedule.msgid)
        assert answer["error"]["message"].startswith("SCHEDULE interval: expected")
        # Numbers the codec itself cannot carry: counted, and nothing answers.
        worker_sock = ctx.socket(zmq.DEALER)
        worker_sock.linger = 0
        worker_sock.connect(endpoints["workers"])
        worker_sock.send_multipart([*H, b"INFORM", b"i", b'[[18446744073709551616, "q"]]', b"w"])
        client.sock.send_multipart([*H, b"SCHEDULE", b"s", b"q", b"", b"9" * 40, b"b", b""])

        wait_until(
            lambda: (
                _rejected(admin, "client", "out_of_range") >= 8
                and _rejected(admin, "worker", "out_of_range") >= 1
            ),
            what="the refusals counted as out_of_range",
        )
        for job_id in refused:
            assert _get(f"{admin}/api/v1/jobs/{job_id}")[0] == 404  # never stored
        # The same broker still takes, dispatches and answers a job.
        worker = _Peer(ctx, endpoints["workers"])
        worker.send(emqp.Inform(new_id(), (("default", 10),)))
        assert isinstance(worker.recv(), emqp.Ack)
        worker.send(emqp.Ready(new_id()))
        job_id = new_id()
        client.send(emqp.Request(job_id, "default", (("retry-count", "1000"),), b"call"))
        assert isinstance(client.recv(), emqp.Ack)
        request = worker.recv()
        assert isinstance(request, emqp.Request) and request.msgid == job_id
        worker.send(emqp.Reply(new_id(), b'{"value": 7}', job_id))
        result = client.recv()
        assert isinstance(result, emqp.Reply) and result.body == b'{"value": 7}'
        assert _get(f"{admin}/healthz")[0] == 200
        for sock in (client.sock, worker.sock, worker_sock):
            sock.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30 * UNIT) == 0
    finally:
        stop_process(proc)
        ctx.destroy(linger=0)


async def test_the_clients_refuse_out_of_range_options_before_sending(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as broker:
        endpoint = broker.endpoints["clients"]
        bad: list[tuple[str, dict[str, Any]]] = [
            ("retries", {"retries": 10**20}),
            ("retries", {"retries": -1}),
            ("retries", {"retries": True}),
            ("timeout", {"timeout": 1e300}),
            ("delay", {"delay": float("nan")}),
            ("job_id", {"job_id": "x" * 257}),
        ]
        with BrokerClient(endpoint) as client:
            for field, options in bad:
                with pytest.raises(ValueError, match=f"^{field}: expected"):
                    client.submit("default", "noop", **options)
            with pytest.raises(ValueError, match=r"^queue: expected"):
                client.submit("q" * 300, "noop")
            with pytest.raises(ValueError, match=r"^timeout: expected"):
                client.result(new_id(), timeout=float("nan"))
            assert client.pending_acks == 0  # nothing was sent
            job_id = client.submit("default", "noop", retries=MAX_RETRIES, timeout=2592000)
        async with AsyncBrokerClient(endpoint) as aclient:
            for field, options in bad:
                with pytest.raises(ValueError, match=f"^{field}: expected"):
                    await aclient.submit("default", "noop", **options)
            assert aclient.pending_acks == 0
        requests = broker.registry.get_sample_value(
            "zbus_broker_events_total", {"event": "requests"}
        )
        assert requests == 1  # only the valid job reached the broker
        stored = await broker.read(lambda r: r.get(job_id))
        assert stored is not None and stored.max_retries == MAX_RETRIES


def test_a_restart_repairs_a_huge_retry_count_left_in_the_store(tmp_path: Path) -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    proc, endpoints = start_broker_process(tmp_path)
    try:
        client = _Peer(ctx, endpoints["clients"])
        worker = _Peer(ctx, endpoints["workers"])
        worker.send(emqp.Inform(new_id(), (("default", 10),)))
        assert isinstance(worker.recv(), emqp.Ack)
        job_id = new_id()
        client.send(emqp.Request(job_id, "default", (("retry-count", "2"),), call_body("noop")))
        assert isinstance(client.recv(), emqp.Ack)
        worker.send(emqp.Ready(new_id()))
        assert isinstance(worker.recv(), emqp.Request)  # running at the kill
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30 * UNIT)
        stop_process(proc)
        client.sock.close()
        worker.sock.close()
        # The row an older broker stored for `retry-count:9223372036854775807`: its
        # restart added one to it and failed on every start from then on.
        with sqlite3.connect(tmp_path / "jobs.db") as db:
            db.execute("UPDATE jobs SET max_retries = ? WHERE id = ?", (2**63 - 1, job_id))
        db.close()

        started: list[dict[str, Any]] = []
        # Before the fix: exit status 2 here, on this start and every one after.
        proc, endpoints = start_broker_process(tmp_path, log=started)
        (repair,) = [e for e in started if e["msg"] == "stored row out of range, repaired"]
        assert repair["repair"] == f"job {job_id}: max_retries {2**63 - 1} -> {MAX_RETRIES}"
        admin = endpoints["admin"]
        events = _samples(admin, "zbus_broker_events_total")
        assert events[(("event", "repaired_rows"),)] == 1
        worker = _Peer(ctx, endpoints["workers"])
        worker.send(emqp.Inform(new_id(), (("default", 10),)))
        assert isinstance(worker.recv(), emqp.Ack)
        worker.send(emqp.Ready(new_id()))
        request = worker.recv()
        assert isinstance(request, emqp.Request) and request.msgid == job_id
        worker.send(emqp.Reply(new_id(), b'{"value": "done"}', job_id))

        def succeeded() -> bool:
            status, body = _get(f"{admin}/api/v1/jobs/{job_id}")
            return status == 200 and json.loads(body)["state"] == "succeeded"

        wait_until(succeeded, what="the repaired job succeeded")
        worker.sock.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30 * UNIT) == 0
    finally:
        stop_process(proc)
        ctx.destroy(linger=0)
    store = JobStore(tmp_path / "jobs.db")
    try:
        job = store.get(job_id)
    finally:
        store.close()
    # Repaired to the most a job may ask for, plus the one retry the restart gives back.
    assert job is not None and job.max_retries == MAX_RETRIES + 1 and job.attempts == 2
