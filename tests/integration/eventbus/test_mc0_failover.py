"""An mc0 client given several doors: a CONNECT unanswered is tried at the next one, and
a door gone silent is left for the next one, where the session and its topics are made
again."""

from __future__ import annotations

from pathlib import Path

import zbus
from tests.support.bus import bus_thread
from tests.support.ports import HeldPorts
from tests.support.waiting import UNIT, Deadline
from zbus.eventbus.client import BusEndpoints, EventBusClient


def test_a_dead_first_door_is_passed_over_when_connecting(tmp_path: Path) -> None:
    with HeldPorts() as dead, bus_thread(tmp_path / "bus") as bus:
        doors = [f"tcp://127.0.0.1:{dead.port}", bus.endpoints["mc0"]]
        with zbus.Mc0Client(doors, timeout=2 * UNIT) as client:
            client.subscribe("/m/")
            client.put("/m/x", b"one")
            message = client.next(timeout=10)
            endpoint, failovers = client.endpoint, client.failovers
    assert message == zbus.Mc0Message("/m/x", b"one", {})
    assert endpoint == bus.endpoints["mc0"] and failovers == 1


def test_a_silent_door_is_left_for_the_next_with_its_topics(tmp_path: Path) -> None:
    with bus_thread(tmp_path / "b") as second:
        with bus_thread(tmp_path / "a") as first:
            client = zbus.Mc0Client(f"{first.endpoints['mc0']},{second.endpoints['mc0']}", ttl=0.3)
            client.connect()
            client.subscribe("/f/")
            assert client.endpoint == first.endpoints["mc0"]
        with EventBusClient(BusEndpoints.from_info(second.info()), producer="p") as publisher:
            deadline = Deadline(20, "a message at the second door")
            message = None
            while message is None:
                deadline.left()
                publisher.publish("/f/x", b"there")
                message = client.next(timeout=0.1)
        client.close()
    assert message == zbus.Mc0Message("/f/x", b"there", {})
    assert client.failovers == 1 and client.endpoint == second.endpoints["mc0"]
