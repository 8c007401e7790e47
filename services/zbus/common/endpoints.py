"""ZeroMQ TCP endpoints given in settings: ``tcp://host:port``, checked in one place."""

from __future__ import annotations

__all__ = ["MAX_PORT", "parse_tcp_endpoint"]

MAX_PORT = 65535


def parse_tcp_endpoint(text: str, *, room: int = 0) -> tuple[str, int]:
    """Split ``tcp://host:port`` into host and port.

    Args:
        text: the endpoint.
        room: how many ports above ``port`` the endpoint also names (the event bus's
            four sockets sit on P..P+3, so it passes 3).

    Raises:
        ValueError: naming what is wrong: scheme, host, or a port outside
            1..65535 - room.
    """
    scheme, sep, rest = text.partition("://")
    host, colon, port_text = rest.rpartition(":")
    if scheme != "tcp" or not sep or not colon or not host or not port_text.isdigit():
        raise ValueError(f"expected tcp://host:port, got {text!r}")
    port = int(port_text)
    highest = MAX_PORT - room
    if not 1 <= port <= highest:
        extra = f" (P+1..P+{room} must be ports too)" if room else ""
        raise ValueError(f"port {port} is outside 1..{highest}{extra}")
    return host, port
