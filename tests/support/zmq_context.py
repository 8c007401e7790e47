"""A ZeroMQ context that remembers the sockets made from it, to find the ones left open."""

from __future__ import annotations

from collections import Counter
from typing import Any

import zmq


class SocketTrackingContext(zmq.Context[zmq.Socket[Any]]):
    """A ``zmq.Context`` that keeps every socket made from it (monitor sockets too), so
    that the test's end can name those still open: a socket left open by a test holds
    its peer's queue and file descriptors into the next test."""

    # Declared here: pyzmq takes an attribute the class does not declare for an option.
    made: list[zmq.Socket[Any]]

    def __init__(self) -> None:
        super().__init__()
        self.made: list[zmq.Socket[Any]] = []

    def socket(self, socket_type: int, socket_class: Any = None, **kwargs: Any) -> Any:
        sock = super().socket(socket_type, socket_class, **kwargs)
        self.made.append(sock)
        return sock

    def open_sockets(self) -> list[str]:
        """The sockets made here and not closed, by type and last endpoint, with counts."""
        counts = Counter(_describe(sock) for sock in self.made if not sock.closed)
        return [f"{n} x {what}" if n > 1 else what for what, n in counts.items()]


def _describe(sock: zmq.Socket[Any]) -> str:
    kind = zmq.SocketType(int(sock.getsockopt(zmq.TYPE))).name
    try:
        where = sock.getsockopt_string(zmq.LAST_ENDPOINT) or "unbound"
    except zmq.ZMQError:
        where = "?"
    return f"{kind} ({where})"
