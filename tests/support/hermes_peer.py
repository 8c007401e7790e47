"""Runs the real Hermes (PyPI ``Hermes-lnestelroad`` 1.0.2) for the integration tests.

Executed by the Python of the Hermes virtualenv (``tests/support/hermes.py``), never
imported by the suite: it imports Hermes, not zbus. Hermes's own code runs unchanged
but for two things:

- where its beacon goes and is listened for: a UDP port the test picks on 127.0.0.1
  instead of broadcast to port 5245 (a test sends nothing beyond this machine's
  loopback);
- its broker's handlers run on its loop's thread. Hermes hands each message to a pool
  thread that answers on the ROUTER its loop thread polls at the same time, which
  libzmq does not allow: on a busy machine the broker aborts within a few dozen
  messages (``Assertion failed: !_current_out (src/router.cpp:193)``). Inline, every
  handler does what it did (one that raises sends nothing and the broker goes on, as
  in the pool), so its frames are unchanged.

Each result is printed as one JSON line.

    hermes_peer.py broker  <beacon port>
    hermes_peer.py service <beacon port> <name> [<UPDATE body as JSON>]
    hermes_peer.py client  <beacon port> <name>...     ('' asks for the list)
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import Callable
from typing import Any

import Hermes.Reactor
from Hermes.Client import Client
from Hermes.CoreCatalogService import CoreCatalogService
from Hermes.Node import Node
from Hermes.Service import Service


class InlineExecutor:
    """Stands in for the broker's ``ThreadPoolExecutor``: runs each handler at once."""

    def __init__(self, max_workers: int | None = None) -> None:
        pass

    def __enter__(self) -> InlineExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except Exception:
            traceback.print_exc()  # what the pool would have kept in the future


def say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def main(argv: list[str]) -> None:
    mode, beacon_port = argv[0], int(argv[1])

    def discover(self: Node, port: int = 5245, timeout: float = 10) -> Any:
        return Node.discover(self, port=beacon_port, timeout=timeout)

    if mode == "broker":

        class Broker(CoreCatalogService):
            def broadcast(self, port: int = 5245, broadcast_addr: Any = None) -> None:
                super().broadcast(port=beacon_port, broadcast_addr="127.0.0.1")

        Hermes.Reactor.ThreadPoolExecutor = InlineExecutor  # type: ignore[misc,assignment]
        broker = Broker(log_level=logging.INFO)
        say(port=broker.loop.interfaces["router"]["port"])
        broker.start()
    elif mode == "service":

        class HermesService(Service):
            pass

        HermesService.discover = discover  # type: ignore[method-assign]
        service = HermesService(name=argv[2], log_level=logging.INFO)
        registered = service.register()
        say(registered=registered, interfaces=service.loop.interfaces)
        if registered and len(argv) > 3:
            service.update_config(json.loads(argv[3]))
            # update_config closes its socket on "Acknowledged" and opens a new one
            # (reconnect) on anything else.
            say(acknowledged="service->bus" not in service.sockets)
        service.loop.close_ctx()
        service.close_ctx()
    elif mode == "client":

        class HermesClient(Client):
            pass

        HermesClient.discover = discover  # type: ignore[method-assign]
        client = HermesClient(log_level=logging.INFO)
        for name in argv[2:]:
            say(name=name, services=client.get_services(name))
        client.close_ctx()
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
