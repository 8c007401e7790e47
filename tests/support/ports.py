"""Port numbers for the few tests that need one before the server exists.

Everywhere else the code under test binds port 0 and the test reads the port it got
(``service.endpoints``, ``/api/v1/info``, ``bind_to_random_port``). A number chosen
ahead is needed only where:

- a server restarts on the same port, and its clients keep the endpoint;
- a client is configured before its server starts (a base endpoint, P..P+3);
- a program the test does not run in process is told its ports (the launcher's cluster
  file, Prometheus, Spark, a compose project);
- nothing may listen there (a dead endpoint).

:class:`HeldPorts` takes such ports below the kernel's ephemeral range (32768 and up on
Linux), where the outgoing connections of other processes do not land, and holds them
bound (never listening) in this process until the test lets them go: a dead endpoint
stays dead (connecting is refused) for as long as the test holds it, and a port meant
for a server is released only just before the server binds it.
"""

from __future__ import annotations

import random
import socket
from types import TracebackType
from typing import Self

#: Where held ports are taken: above the well-known and common service ports, below the
#: kernel's ephemeral range.
LOWEST, HIGHEST = 20_000, 32_000

# Every port handed out in this process, never handed out again: two ports taken one
# after the other (and released) for the same program are never the same.
_handed_out: set[int] = set()


class HeldPorts:
    """``count`` consecutive ports on 127.0.0.1, bound by this process and not listening.

    While held, no other process can bind them (no ``SO_REUSEADDR`` here) and a TCP
    connection to them is refused. As a context manager, they are released at the end
    of the block.

    Args:
        count: how many consecutive ports (the event bus's base port P needs P..P+3).
        kind: ``socket.SOCK_STREAM`` (TCP) or ``socket.SOCK_DGRAM`` (UDP).
    """

    def __init__(self, count: int = 1, kind: socket.SocketKind = socket.SOCK_STREAM) -> None:
        rng = random.Random()
        for _ in range(200):
            first = rng.randrange(LOWEST, HIGHEST - count)
            ports = range(first, first + count)
            if _handed_out.intersection(ports):
                continue
            held = _bind_all(ports, kind)
            if held is not None:
                _handed_out.update(ports)
                self._sockets = held
                self.ports = list(ports)
                return
        raise AssertionError(f"no {count} consecutive free ports in {LOWEST}..{HIGHEST}")

    @property
    def port(self) -> int:
        """The first port."""
        return self.ports[0]

    def release(self) -> None:
        """Let the ports go (again: nothing), for a server about to bind them."""
        for sock in self._sockets:
            sock.close()
        self._sockets = []

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()


def _bind_all(ports: range, kind: socket.SocketKind) -> list[socket.socket] | None:
    held: list[socket.socket] = []
    for port in ports:
        sock = socket.socket(socket.AF_INET, kind)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            sock.close()
            for other in held:
                other.close()
            return None
        held.append(sock)
    return held


def beacon_port() -> int:
    """A UDP port for beacon tests, released at once. The beacon sender and its listeners
    are all told the port before any of them binds it, and the listeners bind it together
    (``SO_REUSEADDR``), so it cannot be held for them: it is taken below the ephemeral
    range, where no outgoing datagram's port lands meanwhile."""
    with HeldPorts(kind=socket.SOCK_DGRAM) as held:
        return held.port


def released_port(count: int = 1) -> int:
    """The first of ``count`` consecutive TCP ports free now, released at once: for a
    program started next in a process of its own and told its ports on its command line
    (the benchmarks' servers), so that nothing here can hold them for it."""
    with HeldPorts(count) as held:
        return held.port
