"""The log's unit of storage and of shipping: a batch of events as one record.

A group commit is stored as one :class:`StoredBatch`: its sequences, its receive time,
the events' uuids as 16 bytes each, and the rest of the events as one msgpack blob of
four columns (topics, producers, timestamps, data), with a CRC-32 over both blobs. The
same record is what a follower fetches and appends as it is (replication ships stored
batches, never re-encoded events).

Sequences are contiguous from ``first_seq`` unless retention thinned the batch out: then
``seqs`` holds them (8 bytes each, little-endian), and ``first_seq`` is still the
smallest. Pure code: no I/O; the SQLite side is :mod:`zbus.eventbus.server.store`.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from zbus.eventbus.core.log import Event, event_from_row


class BatchError(Exception):
    """A stored batch that does not decode: a CRC mismatch or a malformed blob."""


@dataclass(frozen=True, slots=True)
class StoredBatch:
    """One stored batch, as the log holds it and as replication ships it.

    Attributes:
        first_seq: the smallest sequence in the batch.
        last_seq: the largest.
        count: the number of events.
        received: the time the leader received the batch (retention by age uses it).
        crc: CRC-32 of ``seqs``, ``uuids`` and ``rows``.
        seqs: None when the sequences are ``first_seq..last_seq``; else 8 bytes each.
        uuids: the events' uuids, 16 bytes each, in sequence order.
        rows: msgpack ``[topics, producers, timestamps, data]``, one list per column.
    """

    first_seq: int
    last_seq: int
    count: int
    received: float
    crc: int
    seqs: bytes | None
    uuids: bytes
    rows: bytes

    def sequences(self) -> Sequence[int]:
        if self.seqs is None:
            return range(self.first_seq, self.last_seq + 1)
        return [int.from_bytes(self.seqs[i : i + 8], "little") for i in range(0, len(self.seqs), 8)]

    def check(self) -> None:
        """Raises:
        BatchError: the CRC does not match."""
        if checksum(self.seqs, self.uuids, self.rows) != self.crc:
            raise BatchError(f"the batch at sequence {self.first_seq} fails its CRC check")

    def columns(self) -> tuple[list[str], list[str], list[str], list[bytes]]:
        """The four row columns, after the CRC is checked.

        Raises:
            BatchError: the CRC does not match or the blob is not four equal columns.
        """
        self.check()
        try:
            cols: Any = msgpack.unpackb(self.rows, use_list=True)
            topics, producers, stamps, data = cols
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise BatchError(f"the batch at sequence {self.first_seq} is malformed: {exc}") from exc
        if not len(topics) == len(producers) == len(stamps) == len(data) == self.count:
            raise BatchError(f"the batch at sequence {self.first_seq} has columns of other lengths")
        return topics, producers, stamps, data

    def events(self) -> list[Event]:
        """The batch's events, uuids as lower-case canonical text."""
        topics, producers, stamps, data = self.columns()
        uuids = uuid_texts(self.uuids)
        rows = zip(self.sequences(), topics, producers, stamps, uuids, data, strict=True)
        return list(map(event_from_row, rows))


def checksum(seqs: bytes | None, uuids: bytes, rows: bytes) -> int:
    return zlib.crc32(rows, zlib.crc32(uuids, zlib.crc32(seqs or b"")))


def uuid_texts(raw: bytes) -> list[str]:
    """16-byte uuids (concatenated) as canonical text."""
    h = raw.hex()
    return [
        f"{h[i : i + 8]}-{h[i + 8 : i + 12]}-{h[i + 12 : i + 16]}-{h[i + 16 : i + 20]}-"
        f"{h[i + 20 : i + 32]}"
        for i in range(0, len(h), 32)
    ]


def encode(
    seqs: Sequence[int],
    received: float,
    uuids: bytes,
    columns: tuple[list[str], list[str], list[str], list[bytes]],
) -> StoredBatch:
    """A batch of the events in the columns, sequenced by ``seqs`` (ascending)."""
    first, last = seqs[0], seqs[-1]
    packed = None
    if last - first + 1 != len(seqs):
        packed = b"".join(s.to_bytes(8, "little") for s in seqs)
    rows = msgpack.packb(list(columns))
    return StoredBatch(
        first, last, len(seqs), received, checksum(packed, uuids, rows), packed, uuids, rows
    )


_MAX_SEQ = 2**63 - 1
_MAX_COUNT = 1_000_000


def pack(batch: StoredBatch) -> bytes:
    """A stored batch as one frame, the way replication ships it."""
    b = batch
    packed: bytes = msgpack.packb(
        [b.first_seq, b.last_seq, b.count, b.received, b.crc, b.seqs, b.uuids, b.rows]
    )
    return packed


def unpack(raw: bytes) -> StoredBatch:
    """A shipped batch, its fields in range and its CRC checked.

    Raises:
        BatchError: the frame is not a stored batch, or it fails its CRC.
    """
    try:
        fields: Any = msgpack.unpackb(raw, use_list=True)
        first, last, count, received, crc, seqs, uuids, rows = fields
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise BatchError(f"a shipped batch is not 8 msgpack fields: {exc}") from exc
    ints_ok = all(type(v) is int for v in (first, last, count, crc))
    if not (
        ints_ok
        and 1 <= first <= last <= _MAX_SEQ
        and 1 <= count <= min(_MAX_COUNT, last - first + 1)
        and 0 <= crc < 2**32
        and type(received) is float
        and isinstance(uuids, bytes)
        and isinstance(rows, bytes)
        and len(uuids) == 16 * count
        and (seqs is None or (isinstance(seqs, bytes) and len(seqs) == 8 * count))
        and (seqs is not None or count == last - first + 1)
    ):
        raise BatchError(f"a shipped batch's fields are out of range (first {first!r})")
    batch = StoredBatch(first, last, count, received, crc, seqs, uuids, rows)
    batch.check()
    if seqs is not None:
        listed = batch.sequences()
        if listed[0] != first or listed[-1] != last or list(listed) != sorted(set(listed)):
            raise BatchError(f"the batch at sequence {first} lists its sequences out of order")
    return batch
