"""What the blocking and the asyncio PPPP subscribers share: their arguments, the
socket, the ready queue, and every step between two waits, around the sans-I/O core
(:class:`~zbus.eventbus.core.pppp_subscriber.SubscriberCore`).

Both subscribers send their SUBSCRIBEs when they are made, and move frames without
blocking on a plain ``zmq.Socket``; :mod:`zbus.eventbus.client.pppp` blocks and
:mod:`zbus.eventbus.client.pppp_asyncio` awaits where :meth:`SubscriberShell._step`
says to wait.
"""

from __future__ import annotations

import contextlib
import uuid as uuidlib
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any, Generic, TypeVar

import zmq

from zbus.common.clock import Clock, SystemClock
from zbus.common.positions import PositionStore
from zbus.common.rejects import LogLimiter
from zbus.common.security import KeyPair, check_client, make_client
from zbus.eventbus.client._counters import Counter
from zbus.eventbus.client._log import log
from zbus.eventbus.client._shell import plain_context
from zbus.eventbus.client.endpoints import door_list
from zbus.eventbus.client.errors import PPPPError
from zbus.eventbus.core.pppp_channel import PPPPMessage
from zbus.eventbus.core.pppp_subscriber import (
    NOTHING,
    Actions,
    SubscriberCore,
    SubscriberSettings,
    check_channels,
)

__all__ = ["READS_PER_WAKE", "SubscriberShell", "check_name"]

READS_PER_WAKE = 256  # messages taken from the socket per turn
_MAX_NAME_BYTES = 255  # a ZeroMQ routing id
_NOBLOCK = int(zmq.NOBLOCK)
_RCVMORE = int(zmq.RCVMORE)
_C = TypeVar("_C", bound="zmq.Context[Any]")


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


class SubscriberShell(Generic[_C]):
    """A PPPP subscriber between its socket and the application; see
    :class:`~zbus.eventbus.client.pppp.PPPPSubscriber` for the arguments.

    A message the application takes is *done* once it comes back for the next one
    (or closes the subscriber): only then may an ACK name it. The ready queue holds what
    the core delivered and the application has not taken yet; with what is held out of
    order it is bounded by ``max_held`` / ``max_held_bytes``. Time is read from
    :attr:`clock` (the system's).

    Given several doors it talks to one at a time, the first first; when that one goes
    silent (the core's silence rule) it subscribes again on a new socket to the next
    one, in turn, keeping its positions.
    """

    def __init__(
        self,
        endpoint: str | Sequence[str],
        channels: Iterable[str] | str,
        *,
        name: str | None = None,
        ack_every: int = 100,
        first_idle: float = 0.1,
        idle: float = 1.0,
        misses: int = 4,
        store: PositionStore | None = None,
        max_held: int = 10_000,
        max_held_bytes: int = 64 * 1024 * 1024,
        max_sync_bytes: int = 256 * 1024 * 1024,
        curve: tuple[KeyPair, bytes] | None = None,
        context: _C | None = None,
    ) -> None:
        settings = SubscriberSettings(
            ack_every, first_idle, idle, misses, max_held, max_held_bytes, max_sync_bytes
        )
        #: The doors, tried in turn; :attr:`endpoint` is the one talked to now.
        self.endpoints = door_list(endpoint)
        self.endpoint = self.endpoints[0]
        self._door = 0
        #: Moves to the next door because the one talked to went silent.
        self.failovers = 0
        self.identity = check_name(name)
        self.name = name
        self.curve = check_client(curve)
        self.store = store
        positions = dict(store.load()) if store is not None else {}
        self._core = SubscriberCore(check_channels(channels), settings, positions)
        if len(self.endpoints) > 1:
            self._core.probe_door()  # the first door too may be a replica that does not serve
        #: The clock the subscriber measures time with.
        self.clock: Clock = SystemClock()
        self._ready: deque[PPPPMessage] = deque()
        self._taken: PPPPMessage | None = None
        self._closed = False
        self._limiter = LogLimiter(per_second=5)
        self._ctx: _C = context if context is not None else self._new_context()
        self._own_ctx = context is None
        try:
            self._sock = self._open()
        except BaseException:
            if self._own_ctx:
                self._ctx.term()
            raise
        self._act(self._core.start(self.clock.monotonic()))

    @classmethod
    def _new_context(cls) -> _C:
        """The context of a subscriber given none (terminated when it closes)."""
        raise NotImplementedError

    # Counters and state, from the core.
    @property
    def channels(self) -> tuple[str, ...]:
        return self._core.channels

    @property
    def delivered(self) -> int:
        """Messages handed to the application (SYNC items included)."""
        return self._core.delivered - len(self._ready)

    duplicates = Counter("_core.duplicates")
    acks = Counter("_core.acks", "ACK/NACK commands sent.")
    nacks = Counter("_core.nacks", "ACK/NACK commands that named missing ranges.")
    syncs = Counter("_core.syncs")
    overflows = Counter(
        "_core.overflows",
        "Messages dropped because ``max_held`` or ``max_held_bytes`` was reached.",
    )

    @property
    def resubscribes(self) -> int:
        """SUBSCRIBEs sent again (a silent bus, an unanswered SUBSCRIBE, a short SYNC)."""
        return self._core.resubscribes + self._core.sync_retries

    @property
    def malformed(self) -> int:
        """Messages from the bus that did not parse, or named a channel not subscribed."""
        return self._core.malformed + self._core.unexpected

    def positions(self) -> dict[str, int]:
        """Per channel, the position the application is done with (0: none yet). The
        message it took last counts once it comes back for the next one."""
        return self._core.positions()

    # Plumbing.
    def _open(self) -> zmq.Socket[Any]:
        sock: zmq.Socket[Any] = plain_context(self._ctx).socket(zmq.DEALER)
        sock.linger = 0
        sock.setsockopt(zmq.ROUTING_ID, self.identity)
        # What the bus may send before an ACK is bounded by its window; a queue that
        # holds it keeps the bus from dropping at its end.
        sock.rcvhwm = max(1000, 2 * self._core.settings.max_held)
        if self.curve is not None:
            make_client(sock, *self.curve)
        sock.connect(self.endpoint)
        return sock

    def _begin(self, timeout: float | None) -> float | None:
        """The application comes back for a message: the one it took last is done.
        The deadline of the wait, if any."""
        now = self.clock.monotonic()
        taken = self._taken
        if taken is not None:
            self._taken = None
            self._act(self._core.done(taken, now))
        return None if timeout is None else now + timeout

    def _step(self, deadline: float | None, waited: bool) -> PPPPMessage | int | None:
        """Everything ``next()`` does between two waits: the next message, None
        (closed, or ``deadline`` passed), or how long to wait for input, in ms.
        ``waited``: called again after such a wait.

        Raises:
            PPPPError: the subscription cannot go on.
        """
        if waited:
            self._read()
        core, clock = self._core, self.clock
        while True:
            now = clock.monotonic()
            if now >= core.wake:
                self._read()
                silences = core.silences
                actions = core.tick(now)
                if core.silences != silences and len(self.endpoints) > 1:
                    self._next_door()
                self._act(actions)
            if self._ready:
                msg = self._ready.popleft()
                self._taken = msg
                return msg
            if core.failure is not None:
                raise PPPPError(core.failure)
            if self._closed:
                return None
            if deadline is not None and now >= deadline:
                return None
            if not self._read():
                end = core.wake if deadline is None else min(deadline, core.wake)
                return max(0, int((end - now) * 1000) + 1)

    def _next_door(self) -> None:
        """The door went silent: a new socket to the next one (the SUBSCRIBEs the core
        has just made go there)."""
        old, old_sock = self.endpoint, self._sock
        self._door = (self._door + 1) % len(self.endpoints)
        self.endpoint = self.endpoints[self._door]
        self._sock = self._open()
        old_sock.close(linger=0)
        self.failovers += 1
        self._core.other_door()
        log.info(
            "pppp subscriber: %s went silent, subscribing at %s",
            old,
            self.endpoint,
            extra={"endpoint": self.endpoint},
        )

    def _custom(self, frames: tuple[bytes, ...]) -> None:
        if self._closed:
            raise RuntimeError("the subscriber is closed")
        payload = [bytes(f) for f in frames]
        try:
            self._sock.send_multipart(self._core.custom(payload, self.clock.monotonic()), _NOBLOCK)
        except zmq.Again:
            raise TimeoutError("the bus takes nothing from this subscriber now") from None

    def _shut(self) -> bool:
        """ACK what the application is done with (the last message taken included), then
        close the socket; False if already closed."""
        if self._closed:
            return False
        self._begin(None)
        self._act(self._core.flush(self.clock.monotonic()))
        self._closed = True
        self._sock.close(linger=200)  # the last ACK gets a moment to leave
        return True

    def _read(self) -> bool:
        """Take what has arrived, without waiting; True if anything did."""
        sock, core, monotonic = self._sock, self._core, self.clock.monotonic
        # recv and RCVMORE by hand, with plain int flags: a fifth less per message than
        # recv_multipart (PUBLISH has eight frames).
        recv, get = sock.recv, sock.get
        for n in range(READS_PER_WAKE):
            try:
                frames = [recv(_NOBLOCK)]
            except zmq.Again:
                return n > 0
            while get(_RCVMORE):
                frames.append(recv(_NOBLOCK))
            actions = core.on_frames(frames, monotonic())
            if actions is not NOTHING:
                self._act(actions)
        return True

    def _act(self, actions: Actions) -> None:
        """Keep the deliveries, log a problem, send the frames."""
        if actions is NOTHING:
            return
        if actions.deliver:
            self._ready.extend(actions.deliver)
        if actions.problem is not None and self._limiter.allow(self.clock.monotonic()):
            log.warning(
                "pppp subscriber: %s",
                actions.problem,
                extra={"endpoint": self.endpoint, "suppressed": self._limiter.suppressed},
            )
        for frames in actions.send:
            # A frame the bus does not take now is as good as lost: the protocol
            # repairs both (an ACK comes again, a SUBSCRIBE is sent again).
            with contextlib.suppress(zmq.Again):
                self._sock.send_multipart(frames, _NOBLOCK)
