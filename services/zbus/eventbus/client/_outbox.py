"""The publishing outbox of the event bus clients: no sockets, no clock.

:class:`Outbox` checks what is published, stamps it and gives it uuids
(:mod:`zbus.common.event_ids`), cuts it into the ``ZB-PUB`` batches the bus accepts (or
the plain protocol's PUBs), and reads the ``ZB-CONFIRM`` replies.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeAlias

import msgpack

from zbus.common.event_ids import StampCache, uuid4s
from zbus.common.protocols import eventbus as eb
from zbus.common.protocols import eventbus_ext as ext
from zbus.common.protocols.errors import ProtocolError
from zbus.common.protocols.eventbus_limits import (
    DEFAULT_MAX_DATA_BYTES,
    MAX_PRODUCER_BYTES,
    MAX_TOPIC_BYTES,
    utf8_len,
)
from zbus.eventbus.client._log import log
from zbus.eventbus.client.errors import PublishError, ReplicaUnavailable

__all__ = ["CHUNK_BYTES", "CHUNK_EVENTS", "Chunks", "Item", "Outbox"]

CHUNK_EVENTS = 1000  # events per ZB-PUB, at most
CHUNK_BYTES = 4 * 1024 * 1024  # and about this much data: the bus refuses huge messages
_UUID_TABLE = str.maketrans("123456789abcdefABCDEF", "0" * 21)
_UUID_SHAPE = "00000000-0000-0000-0000-000000000000"

Item: TypeAlias = tuple[str, Any] | tuple[str, Any, str]
#: Rows ``[topic, producer, ts, uuid, data]`` in batches, one ``ZB-PUB`` each.
Chunks: TypeAlias = list[list[list[Any]]]


class Outbox:
    """ZB-PUB frames and the matching of confirmations: everything but the I/O.

    Raises:
        TypeError, ValueError: a producer that is not text, or over 255 bytes.
    """

    def __init__(self, producer: str) -> None:
        if not isinstance(producer, str):
            raise TypeError("producer must be a string")
        if utf8_len(producer) > MAX_PRODUCER_BYTES:
            raise ValueError(f"a producer id has at most {MAX_PRODUCER_BYTES} bytes: {producer!r}")
        self.producer = producer
        self.malformed = 0
        self._pack = msgpack.Packer(use_bin_type=True).pack
        self._stamps = StampCache()

    def chunks(self, items: Iterable[Item], wall: float) -> Chunks:
        """Rows ``[topic, producer, ts, uuid, data]`` in chunks the bus accepts, stamped
        ``wall`` (seconds since the epoch).

        Raises:
            ValueError: a topic that is empty, starts with NUL or is over 1024 bytes (the
                bus's range), or a malformed uuid.
        """
        rows = self.rows(items, wall)
        out: Chunks = []
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

    def rows(self, items: Iterable[Item], wall: float) -> list[list[Any]]:
        """Rows ``[topic, producer, ts, uuid, data]``, checked, stamped, uuids made."""
        stamp, producer, pack = self._stamps.stamp(wall), self.producer, self._pack
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
        for i, uuid in zip(no_uuid, uuid4s(len(no_uuid)), strict=True):
            rows[i][3] = uuid
        return rows

    def frames(self, rows: list[list[Any]], confirm: bool) -> list[bytes]:
        """The ``ZB-PUB`` of one chunk."""
        return [ext.PUB_BATCH, b"\x01" if confirm else b"\x00", self._pack(rows)]

    def pub_frames(
        self, items: Iterable[Item], dialect: eb.Dialect, wall: float
    ) -> list[list[bytes]]:
        """One spec PUB per item, as ``dialect`` writes it (the sequence unassigned)."""
        return [
            eb.encode(eb.Pub(t, None, p, ts, u, d), dialect)
            for t, p, ts, u, d in self.rows(items, wall)
        ]

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
            if reply.reason.startswith(ext.UNAVAILABLE + ":"):
                raise ReplicaUnavailable(reply.reason)
            raise PublishError(reply.reason)
        seqs.update(reply.sequences)
