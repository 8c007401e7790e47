"""Log shipping: a service's log records as events on the bus, ``/zbus/logs/<service>``.

:class:`LogShipper` is a :class:`logging.Handler` that never blocks or raises into the
code that logs. A record becomes a dict (the fields of the JSON log line of
:class:`~zbus.common.logs.JsonFormatter`: ts, level, service, logger, msg, extra
fields, exc) on a bounded queue; when the queue is full the oldest record is dropped and
counted. A daemon thread publishes the queue in batches with a blocking
:class:`~zbus.eventbus.client.EventBusClient` (no confirm: fire-and-forget).

The publishing socket only queues on a live connection (``ZMQ_IMMEDIATE``), so while the
bus is down a batch times out and is counted in :attr:`LogShipper.failed` instead of
piling up in ZeroMQ's buffers; records keep arriving on the bounded queue meanwhile.
:meth:`LogShipper.close` publishes what is left, the last batch with a confirm so what
went before it reached the bus too, within a deadline.

With ``curve`` (the service's key pair and the bus's public key) the shipper's socket is
a CURVE client, for a bus that runs CURVE; the bus's ZAP allow-list must then hold the
service's public key, or every batch times out and is counted in :attr:`LogShipper.failed`.

Records of the event bus client and of this module are not shipped, nor any record
logged by the shipper's own thread: shipping them would feed on itself.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from typing import Any

import zmq

from zbus.common.clock import SYSTEM_CLOCK, Clock
from zbus.common.logs import STANDARD_ATTRIBUTES
from zbus.common.security import KeyPair, check_client
from zbus.eventbus.client import EndpointsArg, EventBusClient

log = logging.getLogger(__name__)

__all__ = ["LOG_TOPIC_PREFIX", "LogShipper", "install_log_shipping", "record_fields"]

LOG_TOPIC_PREFIX = "/zbus/logs/"
_UNSHIPPED = ("zbus.eventbus.client", __name__)
_SCALARS = (str, int, float, bool, type(None))
_EXC_FORMATTER = logging.Formatter()


def _plain(value: Any) -> Any:
    """``value`` as msgpack can pack it, the way the JSON log line shows it."""
    if isinstance(value, _SCALARS):
        return value
    try:
        return json.loads(json.dumps(value, default=str, ensure_ascii=False))
    except (TypeError, ValueError, RecursionError):
        return str(value)


def record_fields(record: logging.LogRecord, service: str) -> dict[str, Any]:
    """The fields of the JSON log line of ``record``, as a dict of plain values."""
    entry: dict[str, Any] = {
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        + f".{int(record.msecs):03d}Z",
        "level": record.levelname.lower(),
        "service": service,
        "logger": record.name,
        "msg": record.getMessage(),
    }
    for key, value in vars(record).items():
        if key not in STANDARD_ATTRIBUTES and not key.startswith("_"):
            entry[key] = _plain(value)
    if record.exc_info:
        entry["exc"] = _EXC_FORMATTER.formatException(record.exc_info)
    return entry


class LogShipper(logging.Handler):
    """Publishes log records to ``/zbus/logs/<service>`` from a daemon thread.

    Counters: :attr:`shipped` (handed to the bus), :attr:`dropped` (the queue was full),
    :attr:`failed` (the bus took nothing within ``send_timeout``), :attr:`errors`
    (records that could not be formatted).

    Args:
        service: the service name, the last part of the topic.
        endpoints: the bus (its base endpoint ``tcp://host:P``), or several in order.
        capacity: records queued at most; beyond it the oldest is dropped.
        batch_size: records per publish, at most.
        send_timeout: seconds a batch may wait for the bus before it counts as failed.
        level: the handler's level.
        curve: ``(the service's key pair, the bus's public key)`` for a bus that runs
            CURVE (:meth:`Service.curve_client
            <zbus.runtime.service.Service.curve_client>` gives it).
        clock: its monotonic time bounds :meth:`close` (default: the machine's).

    Raises:
        ValueError: a bad service name or option.
        ConfigError: a ``curve`` key pair without its secret key.
    """

    def __init__(
        self,
        service: str,
        endpoints: EndpointsArg,
        *,
        capacity: int = 10_000,
        batch_size: int = 500,
        send_timeout: float = 1.0,
        level: int = logging.NOTSET,
        curve: tuple[KeyPair, bytes] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if not service or "/" in service:
            raise ValueError(f"a service name is non-empty and has no '/': {service!r}")
        if capacity < 1 or batch_size < 1 or send_timeout <= 0:
            raise ValueError("capacity and batch_size must be positive, send_timeout too")
        # Here, not in the thread, where the client would only disable shipping.
        check_client(curve)
        super().__init__(level)
        self.service = service
        self.topic = LOG_TOPIC_PREFIX + service
        self.endpoints = endpoints
        self.curve = curve
        self.clock = clock
        self.capacity = capacity
        self.batch_size = batch_size
        self.send_timeout = send_timeout
        self.shipped = 0
        self.dropped = 0
        self.failed = 0
        self.errors = 0
        self._queue: deque[dict[str, Any]] = deque()
        self._wake = threading.Event()
        self._closing = False
        self._deadline = 0.0
        self._thread = threading.Thread(target=self._run, name=f"logship-{service}", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        """Records queued and not yet handed to the bus."""
        return len(self._queue)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.thread == self._thread.ident:
            return False
        name = record.name
        for prefix in _UNSHIPPED:
            if name == prefix or name.startswith(prefix + "."):
                return False
        return bool(super().filter(record))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            entry = record_fields(record, self.service)
        except Exception:
            self.errors += 1
            return
        if self._closing:
            self.dropped += 1
            return
        queue = self._queue
        # emit runs under the handler's lock: one producer at a time.
        while len(queue) >= self.capacity:
            try:
                queue.popleft()
            except IndexError:
                break
            self.dropped += 1
        queue.append(entry)
        if not self._wake.is_set():
            self._wake.set()

    def close(self, timeout: float = 2.0) -> None:
        """Stop taking records and publish what is queued, for at most ``timeout`` s."""
        logging.getLogger().removeHandler(self)
        if not self._closing:
            self._deadline = self.clock.monotonic() + timeout
            self._closing = True
            self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(max(0.0, self._deadline - self.clock.monotonic()) + 0.1)
        super().close()

    # ------------------------------------------------------------------ the thread
    def _take(self) -> list[dict[str, Any]]:
        queue = self._queue
        batch: list[dict[str, Any]] = []
        while queue and len(batch) < self.batch_size:
            try:
                batch.append(queue.popleft())
            except IndexError:
                break
        return batch

    def _run(self) -> None:
        ctx: zmq.Context[Any] = zmq.Context()
        ctx.setsockopt(zmq.IMMEDIATE, 1)  # no connection: a send times out, nothing piles up
        ctx.setsockopt(zmq.SNDHWM, 100)
        try:
            client = EventBusClient(
                self.endpoints, producer=self.service, context=ctx, curve=self.curve
            )
        except Exception:
            log.exception("log shipping disabled: bad bus endpoints")
            ctx.term()
            return
        failing = False
        try:
            while not self._closing:
                self._wake.wait()
                self._wake.clear()
                while self._queue and not self._closing:
                    failing = self._send(client, self._take(), False, failing)
            while self._queue and self.clock.monotonic() < self._deadline:
                batch = self._take()
                last = not self._queue
                failing = self._send(client, batch, last, failing)
        finally:
            self.dropped += len(self._queue)
            self._queue.clear()
            client.close()
            ctx.term()

    def _send(
        self, client: EventBusClient, batch: list[dict[str, Any]], confirm: bool, failing: bool
    ) -> bool:
        """Publish ``batch``; the new "failing" state (a warning when it begins)."""
        timeout = self.send_timeout
        if self._closing:
            timeout = max(0.001, min(timeout, self._deadline - self.clock.monotonic()))
        topic = self.topic
        try:
            client.publish_many(
                [(topic, entry) for entry in batch], confirm=confirm, timeout=timeout
            )
        except Exception as exc:
            self.failed += len(batch)
            if not failing:
                log.warning(
                    "log shipping to the bus is failing; records are dropped",
                    extra={"error": str(exc) or type(exc).__name__},
                )
            return True
        self.shipped += len(batch)
        if failing:
            log.info("log shipping to the bus works again")
        return False


def install_log_shipping(
    service: str,
    bus_endpoint: str,
    *,
    curve: tuple[KeyPair, bytes] | None = None,
    **options: Any,
) -> LogShipper:
    """Ship every record of the root logger to the bus at ``bus_endpoint`` (base port P),
    over CURVE with ``curve``; ``options`` are :class:`LogShipper`'s."""
    shipper = LogShipper(service, bus_endpoint, curve=curve, **options)
    logging.getLogger().addHandler(shipper)
    return shipper
