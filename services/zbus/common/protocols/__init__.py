"""Sans-I/O codecs for the five seed protocols.

One module per protocol: frozen, slotted dataclasses for the commands, a union type of
them, and pure ``encode(cmd) -> list[bytes]`` / ``decode(frames) -> cmd`` functions.
Nothing here touches a socket; ROUTER identity frames belong to the transport.
Every malformed input raises a :class:`~zbus.common.protocols.errors.ProtocolError`.
"""

from zbus.common.protocols.errors import ProtocolError

__all__ = ["ProtocolError"]
