"""`kill -9` of the broker with jobs queued and running: none lost, none run twice once
its completion was acknowledged."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import zmq

from tests.support.broker import DIALECT, call_body, new_id
from tests.support.waiting import UNIT, Deadline, wait_until
from zbus.broker.server.store import JobStore
from zbus.common.protocols import emqp

ROOT = Path(__file__).resolve().parents[3]


def _start(data_dir: Path) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zbus.broker",
            "--client-port",
            "0",
            "--worker-port",
            "0",
            "--admin-port",
            "0",
        ],
        cwd=ROOT,
        env={**os.environ, "ZBUS_DATA_DIR": str(data_dir)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        entry = json.loads(line)
        if entry["msg"] == "service ready":
            return proc, entry["endpoints"]
    raise AssertionError(f"broker exited before it was ready: {proc.wait()}")


def _state(admin: str, job_id: str) -> str | None:
    with urllib.request.urlopen(f"{admin}/api/v1/jobs/{job_id}", timeout=10) as answer:
        state: str | None = json.loads(answer.read()).get("state")
        return state


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


def test_jobs_survive_kill_9_and_acknowledged_results_do_not_run_again(tmp_path: Path) -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    proc, endpoints = _start(tmp_path)
    executed_after_restart: list[str] = []
    try:
        client = _Peer(ctx, endpoints["clients"])
        jobs = [new_id() for _ in range(200)]
        for job_id in jobs:
            client.send(emqp.Request(job_id, "default", (), call_body("noop")))
        acked = set()
        while len(acked) < len(jobs):
            ack = client.recv()
            assert isinstance(ack, emqp.Ack)
            acked.add(ack.ref_id)

        worker = _Peer(ctx, endpoints["workers"])
        worker.send(emqp.Inform(new_id(), (("default", 10),)))
        assert isinstance(worker.recv(), emqp.Ack)
        for _ in range(5):
            worker.send(emqp.Ready(new_id()))
        running = []
        for _ in range(5):
            request = worker.recv()
            assert isinstance(request, emqp.Request)
            running.append(request.msgid)
        done_before = running[:3]
        for job_id in done_before:
            worker.send(emqp.Reply(new_id(), b'{"value": "first"}', job_id))
        for _ in done_before:  # the client has the result: completion acknowledged
            reply = client.recv()
            assert isinstance(reply, emqp.Reply) and reply.request_id in done_before

        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        client.sock.close()
        worker.sock.close()

        proc, endpoints = _start(tmp_path)
        worker = _Peer(ctx, endpoints["workers"])
        worker.send(emqp.Inform(new_id(), (("default", 10),)))
        assert isinstance(worker.recv(), emqp.Ack)
        remaining = len(jobs) - len(done_before)
        for _ in range(8):
            worker.send(emqp.Ready(new_id()))
        while len(executed_after_restart) < remaining:
            request = worker.recv()
            assert isinstance(request, emqp.Request)
            executed_after_restart.append(request.msgid)
            worker.send(emqp.Reply(new_id(), b'{"value": "second"}', request.msgid))
            worker.send(emqp.Ready(new_id()))
        admin = endpoints["admin"]

        def all_succeeded() -> bool:  # the last REPLYs reached the broker and its store
            return all(_state(admin, job_id) == "succeeded" for job_id in jobs)

        wait_until(all_succeeded, what="every job succeeded")
        worker.sock.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        ctx.destroy(linger=0)

    # Every job ran to completion; none whose completion was acknowledged ran again.
    assert sorted(executed_after_restart) == sorted(set(jobs) - set(done_before))
    store = JobStore(tmp_path / "jobs.db")
    try:
        finished = {j: store.get(j) for j in jobs}
    finally:
        store.close()
    assert all(job is not None and job.state.value == "succeeded" for job in finished.values())
    for job_id in done_before:
        job = finished[job_id]
        assert job is not None and job.result == b'{"value": "first"}' and job.attempts == 1
    for job_id in running[3:]:  # running at the kill: a second attempt after the restart
        job = finished[job_id]
        assert job is not None and job.attempts == 2
