"""The broker with a fault a test can trigger from outside: its routing thread raises
while handling a REQUEST for the queue ``explode``. Run as ``python -m
tests.support.faulty_broker`` (the broker's own flags); nothing else differs."""

from __future__ import annotations

import sys

from zbus.broker.core.broker import BrokerCore
from zbus.broker.server.config import BrokerSettings
from zbus.broker.server.service import BrokerService
from zbus.common.protocols.emqp import EmqpCommand, Request
from zbus.runtime.service import run

FAULT_QUEUE = "explode"
_handle = BrokerCore.client_message


def _client_message(
    core: BrokerCore, identity: bytes, cmd: EmqpCommand, now: float, *, wall: float
) -> str | None:
    if isinstance(cmd, Request) and cmd.queue == FAULT_QUEUE:
        raise RuntimeError("a fault in the routing thread, injected by the test")
    return _handle(core, identity, cmd, now, wall=wall)


def main() -> None:
    BrokerCore.client_message = _client_message  # type: ignore[method-assign, assignment]
    run(BrokerService, BrokerSettings, sys.argv[1:])


if __name__ == "__main__":
    main()
