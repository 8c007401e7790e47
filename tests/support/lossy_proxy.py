"""A lossy ZeroMQ proxy between PPPP subscribers and the bus, for tests.

Subscribers connect to its ROUTER on 127.0.0.1; for each subscriber identity it opens
a DEALER towards the bus with the same ROUTING_ID, so that the bus sees the subscriber
it would see without the proxy (and recognises it when it comes back). Each message is
dropped with a seeded probability, independently in each direction, and counted.

It runs in a thread of its own with its own sockets; :meth:`close` stops it and closes
them.
"""

from __future__ import annotations

import random
import threading
from typing import Any

import zmq

_HWM = 1_000_000  # the proxy itself never drops for want of room: only on purpose


class LossyProxy:
    """``LossyProxy(upstream, up=0.03, down=0.03, seed=1)``: drop 3 % each way.

    ``up`` is the loss from subscribers to the bus, ``down`` from the bus to them.
    """

    def __init__(self, upstream: str, *, up: float, down: float, seed: int) -> None:
        if not (0 <= up < 1 and 0 <= down < 1):
            raise ValueError("loss must be in [0, 1)")
        self.upstream = upstream
        self.up, self.down = up, down
        self._rng = random.Random(seed)
        self.forwarded = {"up": 0, "down": 0}
        self.dropped = {"up": 0, "down": 0}
        self._ctx: zmq.Context[Any] = zmq.Context()
        self._front = self._ctx.socket(zmq.ROUTER)
        self._front.linger = 0
        self._front.router_handover = 1
        self._front.sndhwm = self._front.rcvhwm = _HWM
        self._front.bind("tcp://127.0.0.1:0")
        self.endpoint = self._front.getsockopt_string(zmq.LAST_ENDPOINT)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lossy-proxy", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._ctx.term()

    def __enter__(self) -> LossyProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _keep(self, way: str) -> bool:
        loss = self.up if way == "up" else self.down
        if loss and self._rng.random() < loss:
            self.dropped[way] += 1
            return False
        self.forwarded[way] += 1
        return True

    def _run(self) -> None:
        front = self._front
        backs: dict[bytes, zmq.Socket[Any]] = {}
        identity_of: dict[zmq.Socket[Any], bytes] = {}
        poller = zmq.Poller()
        poller.register(front, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                for sock, _ in poller.poll(50):
                    for _ in range(256):
                        try:
                            frames = sock.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        if sock is front:
                            identity, body = frames[0], frames[1:]
                            back = backs.get(identity)
                            if back is None:
                                back = self._ctx.socket(zmq.DEALER)
                                back.linger = 0
                                back.sndhwm = back.rcvhwm = _HWM
                                back.setsockopt(zmq.ROUTING_ID, identity)
                                back.connect(self.upstream)
                                backs[identity] = back
                                identity_of[back] = identity
                                poller.register(back, zmq.POLLIN)
                            if self._keep("up"):
                                back.send_multipart(body)
                        elif self._keep("down"):
                            front.send_multipart([identity_of[sock], *frames])
        finally:
            for back in backs.values():
                back.close(linger=0)
            front.close(linger=0)
