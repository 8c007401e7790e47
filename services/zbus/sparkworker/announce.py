"""Announcing results (and progress) on the event bus, from one thread of its own.

Jobs hand their announcements over without waiting; the :class:`Announcer` thread
publishes them with the bus client: results with a confirm (they must not vanish
silently), progress fire-and-forget and droppable when the queue is long. A publish
that fails is logged and counted, never raised into a job.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable
from typing import Any, Final, Literal, TypeAlias

from zbus.common.security import KeyPair
from zbus.common.threads import EssentialThread
from zbus.eventbus.client import BusEndpoints, EventBusClient

__all__ = ["Announcer", "Kind"]

log = logging.getLogger(__name__)

Kind: TypeAlias = Literal["result", "progress"]
Outcome: TypeAlias = Literal["sent", "failed", "dropped"]
_PROGRESS_BACKLOG: Final = 100  # progress waiting beyond this is dropped
_STOP: Final = None


class Announcer:
    """Publishes ``(topic, data)`` on the bus at ``endpoint`` as producer ``producer``.

    Args:
        endpoint: the bus's base endpoint ``tcp://host:port``, or its four endpoints.
        producer: the producer id of the events.
        timeout: seconds a result's confirm may take.
        counted: called with each announcement's kind and outcome (metrics).
        curve: ``(key pair, the bus's public key)`` for a bus that runs CURVE.
    """

    def __init__(
        self,
        endpoint: BusEndpoints | str,
        producer: str,
        *,
        timeout: float = 5.0,
        counted: Callable[[Kind, Outcome], object] | None = None,
        curve: tuple[KeyPair, bytes] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.curve = curve
        self.producer = producer
        self.timeout = timeout
        self.counted = counted
        self._queue: queue.SimpleQueue[tuple[Kind, str, Any] | None] = queue.SimpleQueue()
        #: Essential to the service: results it cannot announce would pile up here.
        self.thread = EssentialThread("zbus-spark-announce", self._run)
        self._thread = self.thread
        self._started = False

    def start(self) -> None:
        self._thread.start()
        self._started = True

    def announce(self, kind: Kind, topic: str, data: Any) -> None:
        """Queue an announcement (any thread; never blocks)."""
        if kind == "progress" and self._queue.qsize() > _PROGRESS_BACKLOG:
            self._count(kind, "dropped")
            return
        self._queue.put((kind, topic, data))

    def close(self, timeout: float = 5.0) -> None:
        """Publish what is queued (within ``timeout`` more or less), then stop."""
        if self._started:
            self._thread.stop()
            self._queue.put(_STOP)
            self._thread.join(timeout)

    def _count(self, kind: Kind, outcome: Outcome) -> None:
        if self.counted is not None:
            self.counted(kind, outcome)

    def _run(self) -> None:
        client = EventBusClient(self.endpoint, producer=self.producer, curve=self.curve)
        try:
            while (item := self._queue.get()) is not _STOP:
                kind, topic, data = item
                try:
                    client.publish(topic, data, confirm=kind == "result", timeout=self.timeout)
                except Exception as exc:  # the bus away or refusing: say so, go on
                    self._count(kind, "failed")
                    log.warning(
                        "cannot announce on the bus",
                        extra={"topic": topic, "kind": kind, "error": str(exc) or repr(exc)},
                    )
                else:
                    self._count(kind, "sent")
        finally:
            client.close()
