"""The COLLECTOR door of the Event BUS, apart from its socket: what a message to the
collector adds to the group commit, what is refused and why, and the confirms.

The pipeline (:mod:`zbus.eventbus.server.pipeline`) hands :meth:`SpecCollector.take`
each message its ROUTER reads, with the group commit's lists to extend, appends the
batch to the log, and sends what :meth:`SpecCollector.confirmations` makes of the
result. The hot path: no object per event beyond the one the log stores (``new_event``
builds it), and nothing per message but the decode.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

import msgpack

from zbus.common.protocols import eventbus as eb
from zbus.common.protocols import eventbus_ext as ext
from zbus.common.protocols.errors import ProtocolError
from zbus.common.protocols.eventbus_limits import EventFieldError
from zbus.common.rejects import reject_reason
from zbus.eventbus.core.log import Event
from zbus.eventbus.core.spec._actions import Refusal

E = TypeVar("E")

_RESERVED = "the topic is reserved for the bus's own doors"

#: A confirm a zbus publisher asked for: who, and the uuids of its events in order.
Confirm = tuple[bytes, list[str]]


class SpecCollector(Generic[E]):
    """Turns collector messages into events for the log: spec PUBs and ZB-PUB batches."""

    def __init__(
        self,
        dialect: eb.Dialect,
        new_event: Callable[[str, str, str, str, bytes], E],
        *,
        max_event_bytes: int,
        max_batch_events: int,
    ) -> None:
        """``new_event(topic, producer, timestamp, uuid, data)`` builds what the log
        appends; ``max_event_bytes`` bounds an event's data, ``max_batch_events`` the
        events of one ZB-PUB."""
        self.dialect = dialect
        self.new_event = new_event
        self.max_event_bytes = max_event_bytes
        self.max_batch_events = max_batch_events
        #: Messages refused since the shell last looked (it counts, logs and answers).
        self.refusals: list[Refusal] = []
        self._pack = msgpack.Packer(use_bin_type=True).pack
        self._reserved: tuple[str, bytes, bytes] | None = None

    def reserve(self, prefix: str, trusted: bytes) -> None:
        """Refuse topics under ``prefix`` from every peer whose identity does not start
        with ``trusted`` (the bus's own doors)."""
        self._reserved = (prefix, prefix.encode("utf-8"), trusted)

    def _suspect(self, identity: bytes, body: Sequence[bytes]) -> str | None:
        """The reserved prefix when ``body``, from a peer that is not a door, holds its
        bytes anywhere (then its topics are looked at), else None: one search of the
        frames, no topic read."""
        reserved = self._reserved
        if reserved is None or identity.startswith(reserved[2]):
            return None
        if not any(reserved[1] in frame for frame in body):
            return None
        return reserved[0]

    def take(
        self, identity: bytes, body: Sequence[bytes], batch: list[E], confirms: list[Confirm]
    ) -> int:
        """Add the events of one message from ``identity`` to ``batch`` (and its confirm
        to ``confirms``); returns how many. A message refused adds none and is in
        :attr:`refusals`, with the ERROR to send back when it was a zbus message."""
        extension = bool(body) and ext.is_extension(body[0])
        try:
            if extension:
                confirm, rows = ext.decode_collector_rows(body, max_data=self.max_event_bytes)
                if len(rows) > self.max_batch_events:
                    detail = f"at most {self.max_batch_events} events per ZB-PUB"
                    self._refuse(identity, "too_large", detail, extension)
                    return 0
                prefix = self._suspect(identity, body) if self._reserved is not None else None
                if prefix is not None and any(row[0].startswith(prefix) for row in rows):
                    self._refuse(identity, "reserved_topic", _RESERVED, extension)
                    return 0
                new = self.new_event
                batch.extend(new(*row) for row in rows)
                if confirm:
                    confirms.append((identity, [row[3] for row in rows]))
                return len(rows)
            pub = eb.decode_collector(body, self.dialect, max_data=self.max_event_bytes)
            prefix = self._suspect(identity, body) if self._reserved is not None else None
            if prefix is not None and pub.topic.startswith(prefix):
                self._refuse(identity, "reserved_topic", _RESERVED, extension)
                return 0
            batch.append(self.new_event(pub.topic, pub.producer, pub.timestamp, pub.uuid, pub.data))
            return 1
        except ProtocolError as exc:
            # A bad event field is counted by field (bad_topic, bad_data...): bounded labels.
            reason = f"bad_{exc.field}" if isinstance(exc, EventFieldError) else reject_reason(exc)
            self._refuse(identity, reason, str(exc), extension)
            return 0

    def confirmations(
        self,
        stored: Sequence[Event],
        duplicates: list[tuple[str, int]],
        confirms: list[Confirm],
    ) -> list[tuple[bytes, list[bytes]]]:
        """The CONFIRM for each publisher that asked: ``[uuid, sequence]`` of each of its
        events in the log, stored now or before (``duplicates``: uuid, its sequence)."""
        if not confirms:
            return []
        seqs = {e.uuid: e.seq for e in stored}
        seqs.update(duplicates)
        pack = self._pack
        return [
            (identity, [ext.CONFIRM, pack([[u, seqs[u]] for u in uuids if u in seqs])])
            for identity, uuids in confirms
        ]

    @staticmethod
    def failures(
        detail: str, confirms: list[Confirm], *, what: str = "storage failed"
    ) -> list[tuple[bytes, list[bytes]]]:
        """The ERROR for each publisher that asked for a confirm of a batch the log did
        not store (or, ``what`` says, not confirm)."""
        error = ext.encode(ext.Error(f"{what}: {detail}"))
        return [(identity, error) for identity, _ in confirms]

    def _refuse(self, identity: bytes, reason: str, detail: str, extension: bool) -> None:
        reply = ext.encode(ext.Error(detail)) if extension else None
        self.refusals.append(Refusal(identity, reason, detail, reply=reply))
