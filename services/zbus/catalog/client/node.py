"""A service node's side of DBP: register with the catalog, keep heartbeating, re-register.

:class:`CatalogNode` follows the DBP spec (seed 004) for a service node:

- "Opening and Closing a Connection": one DEALER socket to the catalog's ROUTER (port
  5246); the node sends REGISTRATION and waits for APPROVED (DENIED raises
  :class:`RegistrationDenied`). When no answer comes within ``reply_timeout`` the
  catalog is taken to be unreachable: the socket is closed and a new one retries after
  an exponential backoff.
- "DBP/Heartbeats": HEARTBEAT every ``heartbeat_interval`` as a UDP datagram
  (``encode_datagram``) to the catalog's heartbeat address, given as ``udp_address`` or
  in APPROVED's ``udp_heartbeat`` key, else as a TCP HEARTBEAT on the DEALER. "In the
  event of a missing beat, heartbeats will switch over to reliable TCP": when nothing
  has been heard from the catalog for 1.5 intervals (one beat missed, with slack for
  jitter) the node also sends TCP heartbeats. It keeps sending UDP beats as a probe and
  goes back to UDP alone once a catalog heartbeat datagram arrives again.
- "Heartbeating": any received command except DISCONNECT is a heartbeat. After
  ``heartbeat_interval * misses`` of silence the catalog is "disconnected" and the node
  "SHOULD restart a new conversation".
- In Hermes's dialect (``dialect=HERMES``) the catalog's silence means nothing: Hermes's
  broker never sends a heartbeat and answers ``<3`` with an error. The node sends no
  TCP heartbeats, only UDP ones where APPROVED names a UDP port (a zbus catalog does),
  and its session ends only by DISCONNECT or DENIED.
- "When the service node receives DISCONNECT ... it MUST close its socket, and
  reconnect to the broker on a new socket": the node does that (over TCP or UDP) and
  registers again, counting ``reregistrations``.
- :meth:`CatalogNode.update` sends UPDATE, with the node's ``name`` in the body (a
  Hermes broker finds the node by it), and waits for AWK or APPROVED.
- :meth:`CatalogNode.service` and :meth:`CatalogNode.services` send info REQUESTs, in
  the node's dialect (:mod:`zbus.catalog.client.info`).
- :meth:`CatalogNode.deregister` sends DISCONNECT ("The service node MAY send
  DISCONNECT at any time") and closes the socket.

Whatever arrives that is not a well-formed DBP command is counted in ``counters``
(``malformed``; ``unexpected`` for commands a node has no use for) and dropped, never
raised to the caller.

What the node decides (registration attempts and their backoff, APPROVED's
instructions, the heartbeat schedule, the catalog's silence, the fall-back to TCP and
the return to UDP, re-registration) is :class:`~zbus.catalog.client._node_core.NodeCore`,
which takes the time as an argument and does no I/O; this module owns the sockets, the
tasks and the futures, and reads the time from a :class:`~zbus.common.clock.Clock`. The
errors, :class:`NodeState` and the counters are in :mod:`zbus.catalog.client.base`;
this module re-exports their names.

Example::

    async with CatalogNode("tcp://catalog:5246", {"name": "resizer", ...}) as node:
        await node.update({"port": 47292})
        ...
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final

import zmq
import zmq.asyncio

from zbus.catalog.client._node_core import Answer, NodeCore, SessionEnd
from zbus.catalog.client.base import UDP_HEARTBEAT_KEY as UDP_HEARTBEAT_KEY  # re-exported
from zbus.catalog.client.base import (
    CatalogError,
    CatalogReplyError,
    CatalogUnavailable,
    NodeState,
    RegistrationDenied,
    StartStop,
)
from zbus.catalog.client.info import InfoRequests, ServiceInfo
from zbus.common.clock import SYSTEM_CLOCK, Clock
from zbus.common.protocols.dbp import (
    SPEC,
    Approved,
    DBPCommand,
    Denied,
    Dialect,
    Disconnect,
    JSONObject,
    decode,
    decode_datagram,
    encode,
    encode_datagram,
)
from zbus.common.protocols.errors import ProtocolError
from zbus.common.security import KeyPair, make_client

__all__ = [
    "DEFAULT_ENDPOINT",
    "CatalogError",
    "CatalogNode",
    "CatalogReplyError",
    "CatalogUnavailable",
    "NodeState",
    "RegistrationDenied",
    "ServiceInfo",
]

log = logging.getLogger(__name__)

#: The catalog's DBP ROUTER (seed 004: "The broker MUST use a ROUTER socket on port 5246").
DEFAULT_ENDPOINT: Final = "tcp://127.0.0.1:5246"


class _Udp(asyncio.DatagramProtocol):
    """Hands every datagram from the node's UDP socket to the node."""

    def __init__(self, node: CatalogNode) -> None:
        self._node = node

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self._node._on_datagram(data)

    def error_received(self, exc: Exception) -> None:
        # ICMP port unreachable and the like: the heartbeat is lost, which the silence
        # rules handle; nothing to raise.
        log.debug("catalog udp error: %s", exc)


class CatalogNode(InfoRequests, StartStop):
    """One service node registered with the DBP catalog (see the module docstring).

    Args:
        endpoint: the catalog's ROUTER, e.g. ``"tcp://catalog:5246"``.
        info: the REGISTRATION body; ``heartbeat_interval`` is added when missing (the
            spec asks for "heartbeat timing at a minimum").
        heartbeat_interval: seconds between heartbeats, both ways (0.01 to 3600).
        misses: silent intervals after which the catalog counts as gone (1 to 100).
        udp_address: the catalog's UDP heartbeat address; overrides APPROVED's
            ``udp_heartbeat``. Without either, heartbeats go over TCP.
        context: the ``zmq.asyncio`` context (default: the shared instance).
        dialect: how commands are written (``SPEC`` or ``HERMES``), and so the shape of
            info replies.
        reply_timeout: seconds to wait for APPROVED, DENIED, AWK or an info REPLY
            (default: one silence period, ``heartbeat_interval * misses``).
        backoff: first and largest pause between registration attempts.
        register_timeout: total seconds :meth:`start` keeps trying to register before
            it raises :class:`CatalogUnavailable`; None tries for ever.
        on_state: called with each new :class:`NodeState`.
        curve: ``(this node's key pair, the catalog's public key)`` to talk to a catalog
            that runs CURVE (its policy may then refuse the node's key with DENIED).
        clock: where the time comes from: monotonic for the heartbeat schedule, the
            catalog's silence and the registration deadline, wall time for the time
            frame of what the node sends (default: the machine's clocks).
    """

    def __init__(
        self,
        endpoint: str,
        info: Mapping[str, Any],
        *,
        heartbeat_interval: float = 1.0,
        misses: int = 3,
        udp_address: tuple[str, int] | None = None,
        context: zmq.asyncio.Context | None = None,
        dialect: Dialect = SPEC,
        reply_timeout: float | None = None,
        backoff: tuple[float, float] = (0.1, 5.0),
        register_timeout: float | None = None,
        on_state: Callable[[NodeState], None] | None = None,
        curve: tuple[KeyPair, bytes] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.core = NodeCore(
            endpoint,
            info,
            heartbeat_interval=heartbeat_interval,
            misses=misses,
            udp_address=udp_address,
            dialect=dialect,
            backoff=backoff,
        )
        # The core's own objects, which it changes in place.
        #: Configuration from the last APPROVED.
        self.config: JSONObject = self.core.config
        self.counters: dict[str, int] = self.core.counters
        self.endpoint = endpoint
        self.dialect = dialect
        self.backoff = backoff
        self.reply_timeout = (
            reply_timeout if reply_timeout is not None else (heartbeat_interval * misses)
        )
        self.register_timeout = register_timeout
        self.curve = curve
        self.on_state = on_state
        self.clock = clock
        self._ctx = context or zmq.asyncio.Context.instance()
        self._sock: zmq.asyncio.Socket | None = None
        self._identity = b""
        self._udp: asyncio.DatagramTransport | None = None
        self._reported = NodeState.IDLE  # the last state on_state was told
        self._task: asyncio.Task[None] | None = None
        self._session_end: asyncio.Future[SessionEnd] | None = None
        self._pending: asyncio.Future[JSONObject] | None = None

    # ------------------------------------------------------------------ public API

    @property
    def info(self) -> JSONObject:
        """The REGISTRATION body, every acknowledged UPDATE merged in; a new one set here
        goes with the next registration."""
        return self.core.info

    @info.setter
    def info(self, value: JSONObject) -> None:
        self.core.info = value

    @property
    def heartbeat_interval(self) -> float:
        """Seconds between heartbeats: the node's own until APPROVED says otherwise."""
        return self.core.heartbeat_interval

    @property
    def misses(self) -> int:
        """Silent intervals after which the catalog counts as gone."""
        return self.core.misses

    @property
    def state(self) -> NodeState:
        return self.core.state

    @property
    def registered(self) -> bool:
        return self.core.state is NodeState.REGISTERED

    @property
    def identity(self) -> bytes:
        """The current DEALER socket identity (a new one for every socket)."""
        return self._identity

    @property
    def heartbeat_mode(self) -> str:
        """``"udp"`` or ``"tcp"``: how heartbeats currently travel."""
        return self.core.mode

    @property
    def udp_target(self) -> tuple[str, int] | None:
        """Where UDP heartbeats go, or None when heartbeats use TCP only."""
        return self.core.udp_target

    async def start(self) -> None:
        """Register (retrying while the catalog is unreachable), then keep heartbeating.

        Raises:
            RegistrationDenied: the catalog answered DENIED.
            CatalogUnavailable: ``register_timeout`` passed without an answer.
        """
        if self._task is not None:
            return
        try:
            await self._register(self.register_timeout)
        except BaseException:
            await self._shutdown(send_disconnect=False)
            raise
        self._task = asyncio.create_task(self._maintain(), name="catalog-node")

    async def run(self) -> None:
        """:meth:`start`, then run until :meth:`stop` (or a re-registration is denied)."""
        await self.start()
        task = self._task
        assert task is not None
        # wait() rather than await: stop() cancelling the task is a normal end of run().
        await asyncio.wait({task})
        if not task.cancelled() and (exc := task.exception()) is not None:
            raise exc

    async def stop(self) -> None:
        """Deregister: send DISCONNECT, close the sockets. Safe to call twice."""
        await self._shutdown(send_disconnect=True)

    deregister = stop

    async def update(
        self,
        changes: Mapping[str, Any],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> JSONObject:
        """Send UPDATE and wait for AWK or APPROVED; returns APPROVED's config (or ``{}``).

        The body carries the node's ``name`` with the changes (Hermes's broker finds the
        node by it). The changes are merged into :attr:`info`, so a later
        re-registration carries them.

        Raises:
            RegistrationDenied: the catalog answered DENIED.
            CatalogUnavailable: no answer within ``timeout`` (default ``reply_timeout``),
                or the node is not registered.
        """
        if not self.registered or self._sock is None:
            raise CatalogUnavailable("not registered with the catalog")
        if self._pending is not None and not self._pending.done():
            raise RuntimeError("another update is waiting for its answer")
        pending: asyncio.Future[JSONObject] = asyncio.get_running_loop().create_future()
        self._pending = pending
        try:
            async with asyncio.timeout(self.reply_timeout if timeout is None else timeout):
                command = self.core.update(changes, self.clock.time())
                await self._send(command)
                config = await pending
        except TimeoutError:
            raise CatalogUnavailable("no answer to UPDATE") from None
        finally:
            self._pending = None
            self.core.update_done()
        self.info.update(command.changes)
        return config

    # ------------------------------------------------------------------ registration

    def _report_state(self) -> None:
        """Tell ``on_state`` when the core's state changed since it was last told."""
        state = self.core.state
        if state is self._reported:
            return
        self._reported = state
        if self.on_state is not None:
            try:
                self.on_state(state)
            except Exception:
                log.exception("catalog node state callback failed")

    def _open_socket(self) -> zmq.asyncio.Socket:
        self._close_socket()
        sock = self._ctx.socket(zmq.DEALER)
        if self.curve is not None:
            make_client(sock, *self.curve)
        self._identity = uuid.uuid4().bytes
        sock.identity = self._identity
        sock.linger = 0
        sock.connect(self.endpoint)
        self._sock = sock
        return sock

    def _close_socket(self, linger_ms: int = 0) -> None:
        if self._sock is not None:
            self._sock.close(linger=linger_ms)
            self._sock = None

    async def _send(self, cmd: DBPCommand, *, block: bool = True) -> bool:
        """Send ``cmd`` on the DEALER; without ``block``, drop it if it cannot be queued."""
        if self._sock is None:
            return False
        try:
            await self._sock.send_multipart(encode(cmd, self.dialect), 0 if block else zmq.NOBLOCK)
        except zmq.Again:
            return False
        self.core.sent(self.clock.monotonic())
        return True

    async def _register(self, total: float | None) -> None:
        """REGISTRATION on a new socket until APPROVED; back off while unanswered."""
        core, clock = self.core, self.clock
        core.begin_registration(clock.monotonic(), total)
        self._report_state()
        while True:
            sock = self._open_socket()
            await self._send(core.registration(clock.time()))
            try:
                reply = await self._await_registration_reply(sock)
            except TimeoutError:
                reply = None
            if isinstance(reply, Approved):
                core.approved(reply, clock.monotonic())
                if core.udp_target is not None and self._udp is None:
                    loop = asyncio.get_running_loop()
                    self._udp, _ = await loop.create_datagram_endpoint(
                        lambda: _Udp(self), local_addr=("0.0.0.0", 0)
                    )
                self._report_state()
                return
            self._close_socket()
            if isinstance(reply, Denied):
                error = core.denied(reply)
                self._report_state()
                raise error
            # No answer, or DISCONNECT: the catalog is unreachable or restarting.
            delay = core.attempt_failed(clock.monotonic())
            # Backoff between attempts (a retry policy, not a synchronisation point).
            await asyncio.sleep(delay)

    async def _await_registration_reply(
        self, sock: zmq.asyncio.Socket
    ) -> Approved | Denied | Disconnect:
        async with asyncio.timeout(self.reply_timeout):
            while True:
                cmd = self._decode(await sock.recv_multipart())
                if self.core.registration_reply(cmd):
                    assert isinstance(cmd, Approved | Denied | Disconnect)
                    return cmd

    # ------------------------------------------------------------------ the session

    async def _maintain(self) -> None:
        """Run sessions; after each one ends, register again on a new socket."""
        while True:
            reason = await self._session()
            log.info("catalog session ended (%s); registering again", reason)
            goodbye = self.core.session_ended(reason, self.clock.time())
            if goodbye is not None and self._sock is not None:
                with contextlib.suppress(zmq.ZMQError):
                    await self._send(goodbye, block=False)
                self._close_socket(linger_ms=int(min(self.heartbeat_interval, 1.0) * 1000))
            self._close_socket()
            try:
                await self._register(None)
            except RegistrationDenied:
                self._close_socket()
                raise
            self.core.registered_again()

    async def _session(self) -> SessionEnd:
        loop = asyncio.get_running_loop()
        end: asyncio.Future[SessionEnd] = loop.create_future()
        self._session_end = end
        tasks = [
            asyncio.create_task(self._read_loop(), name="catalog-node-read"),
            asyncio.create_task(self._beat_loop(), name="catalog-node-beat"),
        ]

        def crashed(task: asyncio.Task[None]) -> None:
            if task.cancelled() or end.done():
                return
            exc = task.exception()
            if exc is not None:
                end.set_exception(exc)

        for task in tasks:
            task.add_done_callback(crashed)
        try:
            return await end
        finally:
            self._session_end = None
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self._pending is not None and not self._pending.done():
                self._pending.set_exception(CatalogUnavailable("catalog session ended"))

    def _outcome(self, outcome: SessionEnd | Answer | None) -> None:
        """Carry out what the core made of a command: end the session, or answer the
        waiting UPDATE."""
        if isinstance(outcome, Answer):
            pending = self._pending
            if pending is not None and not pending.done():
                if outcome.denied is not None:
                    pending.set_exception(outcome.denied)
                else:
                    pending.set_result(outcome.config or {})
        elif outcome is not None:
            self._end_session(outcome)

    def _end_session(self, reason: SessionEnd) -> None:
        if self._session_end is not None and not self._session_end.done():
            self._session_end.set_result(reason)

    async def _read_loop(self) -> None:
        sock = self._sock
        assert sock is not None
        while True:
            cmd = self._decode(await sock.recv_multipart())
            if cmd is not None:
                self._outcome(self.core.command(cmd, self.clock.monotonic()))

    def _decode(self, frames: list[bytes]) -> DBPCommand | None:
        try:
            return decode(frames, self.dialect)
        except ProtocolError as exc:
            self.counters["malformed"] += 1
            log.debug("dropped malformed catalog message: %s", exc)
            return None

    def _on_datagram(self, data: bytes) -> None:
        """A datagram on the node's UDP socket (from the catalog, or anyone)."""
        try:
            cmd = decode_datagram(data, self.dialect)
        except ProtocolError:
            self.counters["malformed"] += 1
            return
        self._outcome(self.core.datagram(cmd, self.clock.monotonic()))

    async def _beat_loop(self) -> None:
        core, clock = self.core, self.clock
        while True:
            now = clock.monotonic()
            beat = core.beat(now, clock.time())
            if beat.end is not None:
                self._end_session(beat.end)
                return
            if beat.udp is not None and self._udp is not None and core.udp_target is not None:
                self._udp.sendto(encode_datagram(beat.udp, self.dialect), core.udp_target)
            # A full queue skips this beat.
            if beat.tcp is not None and await self._send(beat.tcp, block=False):
                core.sent(clock.monotonic(), beat=True)
            if beat.next_at is None:
                return
            await asyncio.sleep(beat.next_at - now)

    # ------------------------------------------------------------------ shutdown

    async def _shutdown(self, *, send_disconnect: bool) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, CatalogError):
                await task
        goodbye = self.core.goodbye(self.clock.time())
        if send_disconnect and self._sock is not None and goodbye is not None:
            with contextlib.suppress(zmq.ZMQError):
                await self._send(goodbye, block=False)
            # Linger long enough for the DISCONNECT to leave.
            self._close_socket(linger_ms=int(min(self.heartbeat_interval, 1.0) * 1000))
        self._close_socket()
        if self._udp is not None:
            self._udp.close()
            self._udp = None
        self.core.closed()
        self._report_state()
