"""``zbus jobs submit`` against a real broker and worker."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.support.broker import running_broker
from zbus.broker.client.worker import Worker
from zbus.cli import main
from zbus.cli.jobs import parse_params


def test_params_from_pairs_and_json() -> None:
    assert parse_params(["n=3", "name=abc", 'tags=["a"]', "eq=a=b"], '{"n": 1, "x": null}') == {
        "n": 3,
        "x": None,
        "name": "abc",
        "tags": ["a"],
        "eq": "a=b",
    }
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_params(["novalue"], None)
    with pytest.raises(ValueError, match="JSON object"):
        parse_params([], "[1]")


async def test_submit_prints_the_result_or_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running_broker(tmp_path) as broker:
        worker = Worker(broker.endpoints["workers"], queues=("default",), concurrency=2)
        worker.register_builtins()
        worker.register("add", lambda a, b: {"sum": a + b})
        running = asyncio.create_task(worker.run())
        try:
            clients = broker.endpoints["clients"]
            args = ["jobs", "submit", "default", "add", "-p", "a=2", "--params", '{"b": 40}']
            code = await asyncio.to_thread(main, [*args, "--broker", clients, "--wait", "30"])
            assert code == 0
            assert json.loads(capsys.readouterr().out) == {"sum": 42}

            args = ["jobs", "submit", "default", "fail", "-p", "message=no disk", "--retries", "0"]
            code = await asyncio.to_thread(main, [*args, "--broker", clients, "--wait", "30"])
            err = capsys.readouterr().err
            assert code == 1 and "no disk" in err

            code = await asyncio.to_thread(main, ["jobs", "submit", "default", "add", "-p", "x"])
            assert code == 2 and "KEY=VALUE" in capsys.readouterr().err
        finally:
            worker.request_stop()
            await asyncio.wait_for(running, 30)
