"""Helpers for mc0 tests: a raw mc0 peer, the real connector's CONNECT."""

from __future__ import annotations

import time
from typing import Any

import zmq

from tests.support.waiting import UNIT, wait_until

# The real connector's CONNECT (PEERS.md): keys sorted, VERSION 0.2, TTL in ms.
UUID = b"9d5c1f3a-7e2b-4c8d-a6f0-3b1e5d7c9a24"


class RawPeer:
    """A DEALER that sends and receives mc0 frames exactly as given."""

    def __init__(self, ctx: zmq.Context[Any], endpoint: str, **options: Any) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        for name, value in options.items():
            setattr(self.sock, name, value)
        self.sock.connect(endpoint)

    def send(self, frames: list[bytes]) -> None:
        self.sock.send_multipart(frames)

    def recv(self, timeout: float = 10.0) -> list[bytes]:
        if not self.sock.poll(int(timeout * UNIT * 1000)):
            raise AssertionError(f"no message within {timeout * UNIT:g} s")
        return self.sock.recv_multipart()

    def ask(self, frames: list[bytes]) -> list[bytes]:
        self.send(frames)
        return self.recv()

    def quiet(self) -> bool:
        """True when nothing is waiting to be read now."""
        return not self.sock.poll(0)

    def close(self) -> None:
        self.sock.close(linger=0)


def connector_connect(peer: RawPeer, ttl: bytes = b"30000", ident: bytes = UUID) -> None:
    frames = [b"", b"CONNECT", b"ID", ident, b"TTL", ttl, b"VERSION", b"0.2"]
    assert peer.ask(frames) == [b"", b"OK", b"ID", ident]


def wait_value(read: Any, want: Any, timeout: float = 10.0, what: str = "value") -> None:
    """Poll ``read()`` until it returns ``want``."""
    wait_until(lambda: read() == want, timeout, what=f"{what} == {want!r}")


def until(deadline_s: float) -> float:
    return time.monotonic() + deadline_s * UNIT
