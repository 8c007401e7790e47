"""The log reads of spec snapshots (SYNC... SYNCEND): the I/O half of a transfer.

What a transfer does and when is the core's (:mod:`zbus.eventbus.core.spec`, its module
``_transfers`` has the states). Here is what it reads with: each transfer opens a read
connection of its own and reads in one read transaction (its read point is SYNCEND's
sequence, so SYNCs and SYNCEND agree whatever is published meanwhile), lazily, as far
as the core asks. Closing the connection ends the transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from zbus.eventbus.core.log import Event, EventLogReader
from zbus.eventbus.core.spec import OpenTransfer, ReadTransfer


class TransferReads:
    """The open read connections of the spec transfers under way, by transfer id."""

    def __init__(self, open_reader: Callable[[], EventLogReader]) -> None:
        self._open_reader = open_reader
        self._readers: dict[int, EventLogReader] = {}
        self._streams: dict[int, Iterator[Event]] = {}

    def open(self, action: OpenTransfer) -> int:
        """Open the transfer's connection and start its read; returns the read point's
        sequence. On an error the connection stays registered: :meth:`close` ends it."""
        reader = self._readers[action.transfer] = self._open_reader()
        read = reader.resume if action.resume else reader.snapshot
        sequence, self._streams[action.transfer] = read(action.subtrees, action.since)
        return sequence

    def read(self, action: ReadTransfer) -> tuple[list[Event], bool]:
        """The transfer's next events, ``action.limit`` at most and no more data than
        ``action.max_bytes`` past the first; True when the read reached the end."""
        events: list[Event] = []
        size, limit, max_bytes = 0, action.limit, action.max_bytes
        for e in self._streams[action.transfer]:
            events.append(e)
            size += len(e.data)
            if len(events) >= limit or size >= max_bytes:
                return events, False
        return events, True

    def close(self, transfer: int) -> None:
        """Close the transfer's connection, if it has one (which ends its read)."""
        self._streams.pop(transfer, None)
        reader = self._readers.pop(transfer, None)
        if reader is not None:
            reader.close()

    def close_all(self) -> None:
        for transfer in list(self._readers):
            self.close(transfer)
