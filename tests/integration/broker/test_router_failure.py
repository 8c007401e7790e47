"""The broker's routing thread is the broker: a real broker process whose routing thread
fails logs the cause and exits with status 1 (a supervisor restarts it) instead of
staying up, answering /healthz and serving nothing."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import zmq

from tests.support.broker import DIALECT, new_id, start_broker_process, stop_process
from tests.support.faulty_broker import FAULT_QUEUE
from tests.support.waiting import UNIT
from zbus.common.protocols import emqp


def _healthz(admin: str) -> int:
    with urllib.request.urlopen(f"{admin}/healthz", timeout=10 * UNIT) as answer:
        status: int = answer.status
        return status


def test_a_dead_routing_thread_stops_the_broker_with_a_non_zero_status(tmp_path: Path) -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    proc, endpoints = start_broker_process(tmp_path, "tests.support.faulty_broker")
    try:
        assert _healthz(endpoints["admin"]) == 200
        client = ctx.socket(zmq.DEALER)
        client.linger = 0
        client.connect(endpoints["clients"])
        client.send_multipart(emqp.encode(emqp.Request(new_id(), FAULT_QUEUE, (), b"x"), DIALECT))
        try:
            status = proc.wait(timeout=30 * UNIT)  # before the fix: alive, serving nothing
        except subprocess.TimeoutExpired:
            pytest.fail("the broker lost its routing thread and did not exit")
        client.close()
        assert proc.stdout is not None
        lines: list[dict[str, Any]] = [json.loads(line) for line in proc.stdout.readlines()]
    finally:
        stop_process(proc)
        ctx.destroy(linger=0)
    assert status == 1
    died = [e for e in lines if e["msg"] == "broker-router failed"]
    assert died and "injected by the test" in died[0]["exc"]
    assert any(
        e["msg"] == "exiting after a failure" and "broker-router" in e["error"] for e in lines
    )
    with pytest.raises(OSError):  # nothing answers /healthz any more
        urllib.request.urlopen(f"{endpoints['admin']}/healthz", timeout=5 * UNIT)
