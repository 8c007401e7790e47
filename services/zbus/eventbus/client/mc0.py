"""A blocking mc0 client (seed 001) of the event bus's mc0 door, or of any mc0 broker.

It speaks as the MCollective 0MQ connector does (a DEALER, an empty delimiter frame
before each verb, VERSION 0.2, an ID on every command it waits for) unless asked for the
spec's shape, and keeps its session alive by the TTL it sent
(:class:`~zbus.eventbus.core.mc0.Liveness`): a NOOP after ``0.95 x TTL`` of its own
silence, and after ``1.05 x TTL`` without a word from the bus a new CONNECT and SUB of
every topic it holds (counted in ``reconnects``), since the bus then has dropped its
session or restarted. Given several doors (the replicas of a group), it talks to one at
a time and makes that new session at the next one, in turn.

A client belongs to one thread at a time. It reads only while one of its methods runs:
MESSAGEs that arrive while it waits for an OK are kept, in order, for :meth:`next`.
"""

from __future__ import annotations

import contextlib
import uuid as uuidlib
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import zmq

from zbus.common.clock import Clock, SystemClock
from zbus.common.protocols import mc0
from zbus.common.protocols.errors import ProtocolError
from zbus.common.security import KeyPair, check_client, make_client
from zbus.errors import ZbusError
from zbus.eventbus.client.endpoints import door_list
from zbus.eventbus.core.mc0 import Liveness

__all__ = ["Mc0Client", "Mc0Error", "Mc0Message"]

VERSION = "0.2"  # what the MCollective connector sends


class Mc0Error(ZbusError):
    """The bus answered ERROR.

    Attributes:
        message: the ERROR's MESSAGE header (what went wrong), if any.
        id: the ID of the command it answers, if any.
    """

    def __init__(self, message: str | None, id: str | None = None) -> None:
        super().__init__(message or "ERROR without a MESSAGE")
        self.message = message
        self.id = id


@dataclass(frozen=True, slots=True)
class Mc0Message:
    """An event delivered on a topic the client subscribed to."""

    topic: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


class Mc0Client:
    """A blocking mc0 client.

    Args:
        endpoint: the mc0 door, e.g. ``tcp://127.0.0.1:61616``; or the doors of a
            replicated bus's replicas, as a list or comma-separated
            (``"tcp://h1:61616,tcp://h2:61626"``). The client talks to one at a time:
            a CONNECT that gets no answer within ``timeout`` is tried at the next one
            (each once), and when the door goes silent (``1.05 x TTL``) the new
            session is made at the next one (:attr:`endpoint` is the door now,
            ``failovers`` counts the moves). Topics are subscribed again there;
            messages published meanwhile are not sent again (mc0 has no positions).
        ttl: the TTL sent with CONNECT, in seconds (the bus's range: 0.1 s to a day).
        timeout: seconds to wait for each OK.
        curve: ``(this client's key pair, the bus's public key)`` when the bus runs
            CURVE. A key the bus's allow-list does not hold gets no answer: the first
            command times out.
        delimiter: send the connector's empty frame before each verb (default), or the
            spec's frames without it.
        context: the ZeroMQ context (default: a new one, terminated by :meth:`close`).

    Raises:
        ValueError: a TTL outside 0.1 s to a day, or a timeout that is not positive.
        ConfigError: a ``curve`` key pair without its secret key.
    """

    def __init__(
        self,
        endpoint: str | Sequence[str],
        *,
        ttl: float = 30.0,
        timeout: float = 10.0,
        curve: tuple[KeyPair, bytes] | None = None,
        delimiter: bool = True,
        context: zmq.Context[Any] | None = None,
    ) -> None:
        if not 0.1 <= ttl <= 86_400:
            raise ValueError(f"ttl must be 0.1 to 86400 seconds, got {ttl}")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.endpoints = door_list(endpoint)
        self.endpoint = self.endpoints[0]
        self._door = 0
        self.failovers = 0
        self.ttl = ttl
        self.timeout = timeout
        self.curve = check_client(curve)
        self.dialect = mc0.CONNECTOR if delimiter else mc0.SPEC
        self.topics: set[str] = set()
        self.reconnects = 0
        #: The clock the client measures time with (the system's).
        self.clock: Clock = SystemClock()
        #: ERRORs the bus sent unasked (e.g. for a PUT without confirm), newest last.
        self.errors: deque[Mc0Error] = deque(maxlen=100)
        self._own_ctx = context is None
        self._ctx: zmq.Context[Any] = context if context is not None else zmq.Context()
        self._sock = self._open()
        self._inbox: deque[Mc0Message] = deque()
        self._live = Liveness(ttl)
        self._closed = False

    def __enter__(self) -> Self:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> zmq.Socket[Any]:
        sock: zmq.Socket[Any] = self._ctx.socket(zmq.DEALER)
        sock.linger = 0
        if self.curve is not None:
            make_client(sock, *self.curve)
        sock.connect(self.endpoint)
        return sock

    # --------------------------------------------------------------- commands
    def connect(self) -> None:
        """CONNECT with the TTL and VERSION 0.2; returns once the bus said OK.

        Raises:
            TimeoutError: no answer within ``timeout``.
            Mc0Error: the bus refused it.
        """
        params = (("TTL", str(round(self.ttl * 1000))), ("VERSION", VERSION))
        for left in range(len(self.endpoints) - 1, -1, -1):
            try:
                self._request(lambda ident: mc0.Connect(params, ident))
                break
            except TimeoutError:
                if not left:
                    raise
                self._next_door()
        self._live.reset(self.clock.monotonic())

    def subscribe(self, *topics: str) -> None:
        """SUB: events on these topics come as messages. A topic that is empty or ends
        with ``/`` is a subtree (every topic under it); any other is one exact topic."""
        self._request(lambda ident: mc0.Sub(topics, ident))
        self.topics.update(topics)

    def unsubscribe(self, *topics: str) -> None:
        """UNSUB."""
        self._request(lambda ident: mc0.Unsub(topics, ident))
        self.topics.difference_update(topics)

    def put(
        self,
        topic: str,
        body: bytes,
        headers: Mapping[str, str] | None = None,
        *,
        confirm: bool = True,
    ) -> None:
        """PUT ``body`` on ``topic`` with ``X-`` ``headers``; with ``confirm``, returns once
        the event is in the bus's log.

        Raises:
            ValueError: a header not starting with ``X-``, or text that is not UTF-8.
            TimeoutError: ``confirm`` and no answer within ``timeout``.
            Mc0Error: the bus refused the event (``confirm``; without it the ERROR lands
                in :attr:`errors`).
        """
        pairs = tuple((headers or {}).items())
        if confirm:
            self._request(lambda ident: mc0.Put(topic, body, pairs, ident))
        else:
            self._send(mc0.Put(topic, body, pairs))

    def heartbeat(self) -> None:
        """NOOP with an ID: returns once the bus answered (a round trip)."""
        self._request(mc0.Noop)

    def next(self, timeout: float | None = None) -> Mc0Message | None:
        """The next message; None when ``timeout`` seconds pass first. Heartbeats and
        the renewal of a lost session happen while it waits."""
        deadline = None if timeout is None else self.clock.monotonic() + timeout
        while not self._inbox:
            now = self.clock.monotonic()
            if deadline is not None and now >= deadline:
                return None
            self._keep_alive(now)
            wait = self._live.next_deadline() - now
            if deadline is not None:
                wait = min(wait, deadline - now)
            self._read(max(0.0, wait))
        return self._inbox.popleft()

    def __iter__(self) -> Iterator[Mc0Message]:
        """Messages, as they come, for ever (heartbeating meanwhile)."""
        while True:
            message = self.next()
            if message is not None:
                yield message

    def close(self) -> None:
        """DISCONNECT (not waited for) and close the socket."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(zmq.ZMQError):
            self._sock.send_multipart(mc0.encode(mc0.Disconnect(), self.dialect), zmq.NOBLOCK)
        self._sock.close(linger=0)
        if self._own_ctx:
            self._ctx.term()

    # ---------------------------------------------------------------- plumbing
    def _keep_alive(self, now: float) -> None:
        if self._live.lost(now):
            # The bus has not spoken for 1.05 x TTL: it dropped the session or restarted.
            self.reconnects += 1
            self._live.reset(now)
            if len(self.endpoints) > 1:
                self._next_door()
            try:
                self.connect()
                if self.topics:
                    self.subscribe(*sorted(self.topics))
            except TimeoutError:
                pass  # tried again after another TTL
        elif self._live.noop_due(now):
            self._send(mc0.Noop())

    def _next_door(self) -> None:
        """A new socket to the next door (the bus's session is made there anew)."""
        old = self._sock
        self._door = (self._door + 1) % len(self.endpoints)
        self.endpoint = self.endpoints[self._door]
        self._sock = self._open()
        old.close(linger=0)
        self.failovers += 1

    def _send(self, cmd: mc0.Mc0Command) -> None:
        try:
            self._sock.send_multipart(mc0.encode(cmd, self.dialect), zmq.NOBLOCK)
        except zmq.Again:
            raise TimeoutError("the bus takes nothing from this client now") from None
        self._live.sent(self.clock.monotonic())

    def _request(self, make: Any) -> None:
        """Send ``make(id)`` with a new ID and wait for its OK (or ERROR)."""
        ident = str(uuidlib.uuid4())
        self._send(make(ident))
        deadline = self.clock.monotonic() + self.timeout
        while True:
            left = deadline - self.clock.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer from the mc0 bus within {self.timeout:g} s")
            answer = self._read(left, ident)
            if isinstance(answer, mc0.Ok):
                return
            if isinstance(answer, mc0.Error):
                raise Mc0Error(answer.message, answer.id)

    def _read(self, wait: float, ident: str | None = None) -> mc0.Ok | mc0.Error | None:
        """Take what arrives within ``wait`` s; the answer to ``ident`` once it comes."""
        if not self._sock.poll(int(wait * 1000) + 1, zmq.POLLIN):
            return None
        while True:
            try:
                frames = self._sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return None
            self._live.heard(self.clock.monotonic())
            try:
                cmd = mc0.decode(frames, self.dialect)
            except ProtocolError as exc:
                self.errors.append(Mc0Error(f"unreadable message from the bus: {exc}"))
                continue
            if isinstance(cmd, mc0.Message):
                self._inbox.append(Mc0Message(cmd.topic, cmd.body, dict(cmd.headers)))
            elif isinstance(cmd, mc0.Ok | mc0.Error) and ident is not None and cmd.id == ident:
                return cmd
            elif isinstance(cmd, mc0.Error):
                self.errors.append(Mc0Error(cmd.message, cmd.id))
