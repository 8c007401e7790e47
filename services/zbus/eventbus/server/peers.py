"""Counting the peers connected to a bound socket through its monitor socket."""

from __future__ import annotations

from typing import Any

import zmq
from zmq.utils.monitor import parse_monitor_message

EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED


class PeerCounter:
    """Connected-peer count of one socket, updated from its monitor events."""

    def __init__(self, sock: zmq.Socket[Any]) -> None:
        self.monitor: zmq.Socket[Any] = sock.get_monitor_socket(EVENTS)
        self.count = 0

    def drain(self) -> int:
        """Apply every pending monitor event; returns the current count."""
        while True:
            try:
                frames = self.monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return self.count
            event = parse_monitor_message(frames)["event"]
            if event == zmq.EVENT_ACCEPTED:
                self.count += 1
            elif event == zmq.EVENT_DISCONNECTED:
                self.count = max(0, self.count - 1)

    def close(self) -> None:
        self.monitor.close(linger=0)
