"""What the blocking and the asyncio PPPP subscribers share: options, the socket, the
ready queue, and the bridge to the sans-I/O core
(:class:`~zbus.eventbus.core.pppp_subscriber.SubscriberCore`).

The I/O loops themselves (blocking or awaited) are in :mod:`zbus.eventbus.client.pppp`
and :mod:`zbus.eventbus.client.pppp_asyncio`.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from collections import deque
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

import zmq

from zbus.common.positions import PositionStore
from zbus.common.rejects import LogLimiter
from zbus.common.security import KeyPair, check_client, make_client
from zbus.errors import ZbusError
from zbus.eventbus.client.common import log
from zbus.eventbus.core.pppp_channel import PPPPMessage
from zbus.eventbus.core.pppp_subscriber import (
    NOTHING,
    Actions,
    SubscriberCore,
    SubscriberSettings,
    check_channels,
)

_S = TypeVar("_S", bound="zmq.Socket[Any]")
_READS_PER_WAKE = 256  # messages taken from the socket per turn
_MAX_NAME_BYTES = 255  # a ZeroMQ routing id


class PPPPError(ZbusError):
    """The subscription cannot go on (a SYNC larger than its bound, say)."""


def check_name(name: str | None) -> bytes:
    """The socket identity for ``name`` (a random one for None: a new subscriber each
    time, which the bus syncs afresh).

    Raises:
        ValueError: an empty name, one over 255 bytes of UTF-8, or one starting with NUL
            (ZeroMQ keeps those identities for itself).
    """
    if name is None:
        return f"zbus-{uuidlib.uuid4().hex}".encode()
    raw = name.encode("utf-8")
    if not 0 < len(raw) <= _MAX_NAME_BYTES or raw[0] == 0:
        raise ValueError(f"name must be 1 to 255 bytes of UTF-8, not starting with NUL: {name!r}")
    return raw


class _PPPPBase(Generic[_S]):
    """A PPPP subscriber between its socket and the application.

    A message the application takes is *done* once it comes back for the next one
    (or closes the subscriber): only then may an ACK name it. The ready queue holds what
    the core delivered and the application has not taken yet; with what is held out of
    order it is bounded by ``max_held`` / ``max_held_bytes``.
    """

    def __init__(
        self,
        endpoint: str,
        channels: Iterable[str] | str,
        *,
        name: str | None,
        settings: SubscriberSettings,
        store: PositionStore | None,
        curve: tuple[KeyPair, bytes] | None,
        ctx: zmq.Context[_S],
        own_ctx: bool,
    ) -> None:
        self.endpoint = endpoint
        self.identity = check_name(name)
        self.name = name
        self.curve = check_client(curve)
        self.store = store
        positions = dict(store.load()) if store is not None else {}
        self._core = SubscriberCore(check_channels(channels), settings, positions)
        self._ctx = ctx
        self._own_ctx = own_ctx
        self._ready: deque[PPPPMessage] = deque()
        self._taken: PPPPMessage | None = None
        self._closed = False
        self._limiter = LogLimiter(per_second=5)
        self._sock = self._open()

    # Counters and state, from the core.
    @property
    def channels(self) -> tuple[str, ...]:
        return self._core.channels

    @property
    def delivered(self) -> int:
        """Messages handed to the application (SYNC items included)."""
        return self._core.delivered - len(self._ready)

    @property
    def duplicates(self) -> int:
        return self._core.duplicates

    @property
    def acks(self) -> int:
        """ACK/NACK commands sent."""
        return self._core.acks

    @property
    def nacks(self) -> int:
        """ACK/NACK commands that named missing ranges."""
        return self._core.nacks

    @property
    def syncs(self) -> int:
        return self._core.syncs

    @property
    def resubscribes(self) -> int:
        """SUBSCRIBEs sent again (a silent bus, an unanswered SUBSCRIBE, a short SYNC)."""
        return self._core.resubscribes + self._core.sync_retries

    @property
    def overflows(self) -> int:
        """Messages dropped because ``max_held`` or ``max_held_bytes`` was reached."""
        return self._core.overflows

    @property
    def malformed(self) -> int:
        """Messages from the bus that did not parse, or named a channel not subscribed."""
        return self._core.malformed + self._core.unexpected

    def positions(self) -> dict[str, int]:
        """Per channel, the position the application is done with (0: none yet). The
        message it took last counts once it comes back for the next one."""
        return self._core.positions()

    # Plumbing.
    def _open(self) -> _S:
        sock = self._ctx.socket(zmq.DEALER)
        sock.linger = 0
        sock.setsockopt(zmq.ROUTING_ID, self.identity)
        # What the bus may send before an ACK is bounded by its window; a queue that
        # holds it keeps the bus from dropping at its end.
        sock.rcvhwm = max(1000, 2 * self._core.settings.max_held)
        if self.curve is not None:
            make_client(sock, *self.curve)
        sock.connect(self.endpoint)
        return sock

    def _now(self) -> float:
        return time.monotonic()

    def _finish_taken(self, now: float) -> Actions:
        """The message the application took last is done: it comes back for more."""
        taken = self._taken
        if taken is None:
            return NOTHING
        self._taken = None
        return self._core.done(taken, now)

    def _take(self) -> PPPPMessage:
        msg = self._ready.popleft()
        self._taken = msg
        return msg

    def _check_failure(self) -> None:
        if self._core.failure is not None:
            raise PPPPError(self._core.failure)

    def _queue(self, actions: Actions) -> tuple[list[bytes], ...]:
        """Keep the deliveries, log a problem; the frames to send."""
        if actions.deliver:
            self._ready.extend(actions.deliver)
        if actions.problem is not None and self._limiter.allow(self._now()):
            log.warning(
                "pppp subscriber: %s",
                actions.problem,
                extra={"endpoint": self.endpoint, "suppressed": self._limiter.suppressed},
            )
        return actions.send

    def _wait_ms(self, deadline: float | None, now: float) -> int:
        end = self._core.wake if deadline is None else min(deadline, self._core.wake)
        return max(0, int((end - now) * 1000) + 1)
