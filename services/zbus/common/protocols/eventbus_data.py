"""Event data of the Event BUS Protocol: msgpack by convention (RFC frame tables), sans-I/O.

Apart from :mod:`zbus.common.protocols.eventbus` so that the frame codec stays one
module of a readable size; that module re-exports :func:`unpack_data`.
"""

from __future__ import annotations

from typing import Any

import msgpack

from zbus.common.protocols.errors import FrameValueError

PROTOCOL = "eventbus"


def unpack_data(data: bytes, *, lenient: bool = False) -> Any:
    """Unpack event data as msgpack.

    Args:
        data: the data frame of a SYNC, BROADCAST or PUB.
        lenient: also accept an empty frame, which the Node.js peer sends for an
            event without data (``None``), and text that is not valid UTF-8 (the whole
            object is then read again with ``raw=True``, so its strings come back as
            bytes). The Node.js peer's msgpack-c 1.1 writes the current format, str8 and
            bin included, which the strict path reads as it is.

    Raises:
        FrameValueError: ``data`` is not one complete msgpack object.
    """
    if lenient and not data:
        return None
    try:
        return msgpack.unpackb(data, raw=False)
    except UnicodeDecodeError:
        if lenient:
            try:
                return msgpack.unpackb(data, raw=True)
            except _UNPACK_ERRORS:
                pass
    except _UNPACK_ERRORS:
        pass
    raise FrameValueError(PROTOCOL, "one complete msgpack object", command="event data", got=data)


# msgpack signals bad input with ValueError subclasses (ExtraData, FormatError,
# StackError), OutOfData, and TypeError for unhashable map keys.
_UNPACK_ERRORS = (ValueError, TypeError, msgpack.UnpackException)


__all__ = ["unpack_data"]
