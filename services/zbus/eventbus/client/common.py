"""Endpoints, errors and the publishing outbox of the event bus clients: no sockets here.

:class:`BusEndpoints` names the four sockets of one bus; :class:`_Outbox` builds the
``ZB-PUB`` frames (rows, uuids, chunks the bus accepts) and matches the ``ZB-CONFIRM``
replies, for both the blocking and the asyncio client.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, TypeAlias

import msgpack

from zbus.common.endpoints import parse_tcp_endpoint
from zbus.common.protocols import eventbus as eb
from zbus.common.protocols import eventbus_ext as ext
from zbus.common.protocols.errors import ProtocolError
from zbus.common.protocols.eventbus_limits import (
    DEFAULT_MAX_DATA_BYTES,
    MAX_PRODUCER_BYTES,
    MAX_TOPIC_BYTES,
    utf8_len,
)
from zbus.errors import ZbusError

# The client's records keep the name of the public module, zbus.eventbus.client:
# log shipping skips that logger's tree (services/zbus/runtime/logship.py), since shipping the
# client's own warnings through the client would feed on itself.
log = logging.getLogger("zbus.eventbus.client")

__all__ = [
    "CHUNK_BYTES",
    "CHUNK_EVENTS",
    "BusEndpoints",
    "Compat",
    "DialectError",
    "EndpointsArg",
    "Item",
    "PublishError",
]

CHUNK_EVENTS = 1000  # events per ZB-PUB, at most
CHUNK_BYTES = 4 * 1024 * 1024  # and about this much data: the bus refuses huge messages
_UUID_TABLE = str.maketrans("123456789abcdefABCDEF", "0" * 21)
_UUID_SHAPE = "00000000-0000-0000-0000-000000000000"
_VARIANT = {c: "89ab"[int(c, 16) & 3] for c in "0123456789abcdef"}


class PublishError(ZbusError):
    """The bus refused a confirmed publish (``ZB-ERROR``): the reason is its text."""


class DialectError(ZbusError, ValueError):
    """What was asked needs zbus's extensions, which the client's ``compat`` dialect
    (the plain Event BUS protocol) does not have: a confirmed publish, say."""


Compat: TypeAlias = Literal["zbus", "spec", "node"]
#: The wire dialect of each ``compat`` that keeps to the plain protocol.
PLAIN_DIALECTS: dict[str, eb.Dialect] = {"spec": eb.SPEC, "node": eb.NODE_REFERENCE}


@dataclass(frozen=True, slots=True)
class BusEndpoints:
    """The four sockets of one bus server."""

    snapshot: str
    publisher: str
    collector: str
    stream: str

    @classmethod
    def from_base(cls, base: str) -> BusEndpoints:
        """``tcp://host:P`` -> SNAPSHOT P, PUBLISHER P+1, COLLECTOR P+2, STREAM P+3."""
        host, port = parse_tcp_endpoint(base, room=3)
        return cls(*(f"tcp://{host}:{port + i}" for i in range(4)))

    @classmethod
    def from_info(cls, info: Mapping[str, Any]) -> BusEndpoints:
        """From ``GET /api/v1/info``: the whole answer or its ``endpoints`` map."""
        endpoints = info.get("endpoints", info)
        if not isinstance(endpoints, Mapping):
            raise ValueError("info has no endpoints map")
        names = ("snapshot", "publisher", "collector", "stream")
        missing = [n for n in names if not isinstance(endpoints.get(n), str)]
        if missing:
            raise ValueError(f"info endpoints lack {', '.join(missing)}")
        return cls(*(endpoints[n] for n in names))


EndpointsArg: TypeAlias = BusEndpoints | str | Sequence[BusEndpoints | str]
Item: TypeAlias = tuple[str, Any] | tuple[str, Any, str]


def _uuid4s(n: int) -> list[str]:
    """n random (version 4) uuids: one urandom call, a fraction of uuid.uuid4()'s cost."""
    h = os.urandom(16 * n).hex()
    return [
        f"{h[i : i + 8]}-{h[i + 8 : i + 12]}-4{h[i + 13 : i + 16]}-"
        f"{_VARIANT[h[i + 16]]}{h[i + 17 : i + 20]}-{h[i + 20 : i + 32]}"
        for i in range(0, 32 * n, 32)
    ]


class _Outbox:
    """ZB-PUB frames and the matching of confirmations: everything but the I/O."""

    def __init__(self, producer: str) -> None:
        if not isinstance(producer, str):
            raise TypeError("producer must be a string")
        if utf8_len(producer) > MAX_PRODUCER_BYTES:
            raise ValueError(f"a producer id has at most {MAX_PRODUCER_BYTES} bytes: {producer!r}")
        self.producer = producer
        self.malformed = 0
        self._pack = msgpack.Packer(use_bin_type=True).pack
        self._ms = -1
        self._stamp = ""

    def stamp(self) -> str:
        """The current time in ISO-8601, UTC, milliseconds (cached per millisecond)."""
        ms = time.time_ns() // 1_000_000
        if ms != self._ms:
            when = datetime.fromtimestamp(ms / 1000, UTC)
            self._stamp = when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
            self._ms = ms
        return self._stamp

    def chunks(self, items: Iterable[Item]) -> list[list[list[Any]]]:
        """Rows ``[topic, producer, ts, uuid, data]`` in chunks the bus accepts.

        Raises:
            ValueError: a topic that is empty, starts with NUL or is over 1024 bytes (the
                bus's range), or a malformed uuid.
        """
        rows = self.rows(items)
        out: list[list[list[Any]]] = []
        chunk: list[list[Any]] = []
        size = 0
        extra = 4 * len(self.producer) + 128  # producer, timestamp, uuid and headers
        for row in rows:
            data = len(row[4])
            cost = 4 * len(row[0]) + data + extra
            # An event over the bus's default size goes alone: if the bus refuses it, it
            # takes no other event with it.
            alone = data > DEFAULT_MAX_DATA_BYTES
            if chunk and (alone or len(chunk) >= CHUNK_EVENTS or size + cost > CHUNK_BYTES):
                out.append(chunk)
                chunk, size = [], 0
            chunk.append(row)
            size += CHUNK_BYTES if alone else cost
        if chunk:
            out.append(chunk)
        return out

    def rows(self, items: Iterable[Item]) -> list[list[Any]]:
        """Rows ``[topic, producer, ts, uuid, data]``, checked, stamped, uuids made."""
        stamp, producer, pack = self.stamp(), self.producer, self._pack
        rows: list[list[Any]] = []
        no_uuid: list[int] = []
        for item in items:
            topic, data = item[0], item[1]
            if type(topic) is not str or not topic or topic[0] == "\0":
                raise ValueError(f"a topic is non-empty text not starting with NUL: {topic!r}")
            if len(topic) * 4 > MAX_TOPIC_BYTES and utf8_len(topic) > MAX_TOPIC_BYTES:
                raise ValueError(f"a topic has at most {MAX_TOPIC_BYTES} bytes: {topic[:40]!r}...")
            uuid = item[2] if len(item) > 2 else None
            if uuid is None:
                no_uuid.append(len(rows))
            elif not isinstance(uuid, str) or uuid.translate(_UUID_TABLE) != _UUID_SHAPE:
                raise ValueError(f"a uuid has the 36-character canonical form: {uuid!r}")
            rows.append([topic, producer, stamp, uuid, data if type(data) is bytes else pack(data)])
        for i, uuid in zip(no_uuid, _uuid4s(len(no_uuid)), strict=True):
            rows[i][3] = uuid
        return rows

    def frames(self, rows: list[list[Any]], confirm: bool) -> list[bytes]:
        return [ext.PUB_BATCH, b"\x01" if confirm else b"\x00", self._pack(rows)]

    def pub_frames(self, items: Iterable[Item], dialect: eb.Dialect) -> list[list[bytes]]:
        """One spec PUB per item, as ``dialect`` writes it (the sequence unassigned)."""
        return [
            eb.encode(eb.Pub(t, None, p, ts, u, d), dialect) for t, p, ts, u, d in self.rows(items)
        ]

    @staticmethod
    def unconfirmed(chunks: list[list[list[Any]]], seqs: dict[str, int]) -> list[list[list[Any]]]:
        return [rows for rows in chunks if any(r[3] not in seqs for r in rows)]

    @staticmethod
    def sequences(chunks: list[list[list[Any]]], seqs: dict[str, int]) -> list[int]:
        return [seqs[r[3]] for rows in chunks for r in rows]

    def take_reply(self, frames: list[bytes], seqs: dict[str, int]) -> None:
        """Record the sequences a ZB-CONFIRM gives; raise PublishError for a ZB-ERROR.

        Only confirmed publishes are answered (the client checks every event, so the
        bus refuses nothing else), and one peer's batches are answered in order, so a
        ZB-ERROR is the answer to what is being waited for.
        """
        try:
            reply = ext.decode_collector_reply(frames)
        except ProtocolError as exc:
            self.malformed += 1
            log.warning("malformed reply from the bus dropped", extra={"error": str(exc)})
            return
        if isinstance(reply, ext.Error):
            raise PublishError(reply.reason)
        seqs.update(reply.sequences)
