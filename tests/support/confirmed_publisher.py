"""A thread that publishes confirmed batches until stopped, for kill tests: a batch that is
not confirmed is sent again with the same event ids until it is, and every confirmed
event is recorded with its sequence and data."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Sequence

from zbus import EventBusClient, PublishError
from zbus.eventbus.client import BusEndpoints


class ConfirmedPublisher(threading.Thread):
    """Args:
    endpoints: the bus, or the replicas of a group.
    producer: the producer name of the events.
    topics: their topic prefix (seven topics under it).
    """

    def __init__(
        self, endpoints: BusEndpoints | Sequence[BusEndpoints], producer: str, topics: str
    ) -> None:
        super().__init__(daemon=True)
        self.endpoints = endpoints
        self.producer = producer
        self.topics = topics
        self.confirmed: dict[str, tuple[int, bytes]] = {}
        self.retries = 0  # batches sent again: not confirmed in time, or refused
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with EventBusClient(self.endpoints, producer=self.producer) as bus:
                batch_no = 0
                while not self.stop.is_set():
                    items = [
                        (f"{self.topics}{batch_no % 7}", os.urandom(12), str(uuid.uuid4()))
                        for _ in range(25)
                    ]
                    while not self.stop.is_set():
                        try:
                            seqs = bus.publish_many(items, confirm=True, timeout=2.0)
                        except (TimeoutError, PublishError):
                            self.retries += 1
                            continue
                        assert seqs is not None
                        for (_, data, event_id), seq in zip(items, seqs, strict=True):
                            self.confirmed[event_id] = (seq, data)
                        break
                    batch_no += 1
        except BaseException as exc:
            self.error = exc
