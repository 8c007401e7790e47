"""How an mc0 PUT's headers travel with the event it becomes (ADR 0005), sans-I/O.

An mc0 PUT carries ``X-`` headers and one body; an event carries one ``data`` field. The
event bus stores a PUT's data as:

- the body, byte for byte, when the PUT has no ``X-`` header (and the body does not
  itself begin like an envelope);
- otherwise an envelope: the msgpack map ``{"mc0-headers": {key: value, ...},
  "mc0-body": <bin body>}``, these two keys in this order, the headers in the PUT's
  order.

So an Event BUS subscriber sees a header-less PUT's body as it was put, and a PUT with
headers as a msgpack map that names them. An mc0 subscriber gets back exactly what was
PUT: :func:`unwrap` of an envelope gives its headers and body, and any other data (an
event from another door) is the body with no header. ``unwrap(wrap(h, b)) == (h, b)``
holds for every ``h`` and ``b``.
"""

from __future__ import annotations

from typing import Any

import msgpack

from zbus.common.protocols.mc0 import Headers

HEADERS_KEY = "mc0-headers"
BODY_KEY = "mc0-body"

# msgpack: a map of 2 (0x82), then the 11-byte string "mc0-headers" (0xab). Data that
# does not begin with these bytes is never an envelope, and costs no unpacking.
PREFIX = b"\x82\xab" + HEADERS_KEY.encode()

_packb = msgpack.Packer(use_bin_type=True).pack


def wrap(headers: Headers, body: bytes) -> bytes:
    """The event data of a PUT with ``headers`` (its ``X-`` headers) and ``body``."""
    if not headers and not body.startswith(PREFIX):
        return body
    packed: bytes = _packb({HEADERS_KEY: dict(headers), BODY_KEY: body})
    return packed


def unwrap(data: bytes) -> tuple[Headers, bytes]:
    """The ``X-`` headers and body of event data; never raises.

    Data that is not a well-formed envelope (wrong keys, a header key not starting with
    ``X-``, text that is not text) is a body without headers, as any event from another
    door is.
    """
    if not data.startswith(PREFIX):
        return (), data
    try:
        value: Any = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except (ValueError, TypeError, msgpack.UnpackException):
        return (), data
    if not isinstance(value, dict) or list(value) != [HEADERS_KEY, BODY_KEY]:
        return (), data
    headers, body = value[HEADERS_KEY], value[BODY_KEY]
    if not isinstance(headers, dict) or not isinstance(body, bytes):
        return (), data
    pairs = tuple(headers.items())
    for key, text in pairs:
        if not (isinstance(key, str) and key.startswith("X-") and isinstance(text, str)):
            return (), data
    return pairs, body


__all__ = ["BODY_KEY", "HEADERS_KEY", "PREFIX", "unwrap", "wrap"]
