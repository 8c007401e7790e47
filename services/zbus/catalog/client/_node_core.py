"""The catalog node's decisions, without I/O: registration, backoff, heartbeats, silence.

:class:`NodeCore` is what :class:`~zbus.catalog.client.node.CatalogNode` decides; the
node itself only owns the sockets, the tasks and the futures. The core is told what
arrived and when, and answers with what to send and when to come back. ``now`` is always
monotonic (intervals, deadlines, silence, backoff); ``wall`` is the wall time that goes
into a command's time frame, and nothing else. It never reads a clock or a socket.

The shell's loop around it, for one session::

    core.begin_registration(now, total)
    while True:                          # one attempt per new DEALER
        send(core.registration(wall))
        reply = <APPROVED, DENIED, DISCONNECT, or None after reply_timeout>
        if Approved: core.approved(reply, now); break
        if Denied: raise core.denied(reply)
        sleep(core.attempt_failed(now))  # raises CatalogUnavailable past the deadline
    while session:                       # the reader and the heartbeat timer
        end = core.command(cmd, now)     # or core.datagram(cmd, now)
        beat = core.beat(now, wall)      # what to send, and when to come back
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from zbus.catalog.client.base import (
    COUNTERS,
    UDP_HEARTBEAT_KEY,
    CatalogUnavailable,
    NodeState,
    RegistrationDenied,
    catalog_silence,
    is_hermes,
    log,
    read_instructions,
    udp_target,
)
from zbus.common.protocols import dbp
from zbus.common.protocols.dbp import (
    HEARTBEAT_INTERVAL_RANGE,
    HEARTBEAT_MISSES_RANGE,
    DBPCommand,
    Dialect,
    JSONObject,
)

__all__ = ["Answer", "Beat", "NodeCore", "SessionEnd"]

#: Why a session ended: the catalog said DISCONNECT, DENIED an unregistered node, or was
#: silent for ``interval * misses``.
SessionEnd = Literal["disconnect", "denied", "silence"]


@dataclass(frozen=True, slots=True)
class Answer:
    """The catalog's answer to the UPDATE that waits for one: its config, or DENIED."""

    config: JSONObject | None
    denied: RegistrationDenied | None = None


@dataclass(frozen=True, slots=True)
class Beat:
    """What one heartbeat round asks of the shell.

    Attributes:
        udp: a HEARTBEAT to send as a datagram to :attr:`NodeCore.udp_target`.
        tcp: a HEARTBEAT to send on the DEALER without blocking (a full queue skips
            it); when it went, the shell calls :meth:`NodeCore.sent` with ``beat=True``.
        end: the session is over (the catalog was silent too long).
        next_at: monotonic time of the next round; None for no more rounds.
    """

    udp: dbp.Heartbeat | None = None
    tcp: dbp.Heartbeat | None = None
    end: SessionEnd | None = None
    next_at: float | None = None


class NodeCore:
    """One node's side of DBP as a state machine (see the module docstring).

    Args:
        endpoint: the catalog's ROUTER (the host of APPROVED's bare UDP port).
        info: the REGISTRATION body; ``heartbeat_interval`` is added when missing.
        heartbeat_interval: seconds between heartbeats, both ways (0.01 to 3600).
        misses: silent intervals after which the catalog counts as gone (1 to 100).
        udp_address: the catalog's UDP heartbeat address; overrides APPROVED's.
        dialect: how commands are written (``SPEC`` or ``HERMES``).
        backoff: first and largest pause between registration attempts.

    Raises:
        ValueError: ``heartbeat_interval`` or ``misses`` out of range.
    """

    def __init__(
        self,
        endpoint: str,
        info: Mapping[str, Any],
        *,
        heartbeat_interval: float,
        misses: int,
        udp_address: tuple[str, int] | None,
        dialect: Dialect,
        backoff: tuple[float, float],
    ) -> None:
        lo, hi = HEARTBEAT_INTERVAL_RANGE
        if not lo <= heartbeat_interval <= hi:
            raise ValueError(
                f"heartbeat_interval must be {lo:g}-{hi:g} s, got {heartbeat_interval!r}"
            )
        low, high = HEARTBEAT_MISSES_RANGE
        if type(misses) is not int or not low <= misses <= high:
            raise ValueError(f"misses must be an integer {low}-{high}, got {misses!r}")
        self.endpoint = endpoint
        self.info: JSONObject = dict(info)
        self.info.setdefault("heartbeat_interval", heartbeat_interval)
        self.heartbeat_interval = heartbeat_interval
        self.misses = misses
        self.dialect = dialect
        self.hermes = is_hermes(dialect)
        self.backoff = backoff
        #: Configuration from the last APPROVED (and what the catalog pushed since).
        self.config: JSONObject = {}
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.state = NodeState.IDLE
        #: ``"udp"`` or ``"tcp"``: how heartbeats currently travel.
        self.mode: Literal["udp", "tcp"] = "tcp"
        #: Where UDP heartbeats go, or None when heartbeats use TCP only.
        self.udp_target = udp_address
        self.awaiting_update = False
        self._explicit_udp = udp_address
        self._last_heard = 0.0
        self._last_tcp_sent = -float("inf")
        self._deadline: float | None = None
        self._delay = backoff[0]

    # ------------------------------------------------------------------ registration

    def begin_registration(self, now: float, total: float | None) -> None:
        """Start registering: attempts until APPROVED, for ``total`` seconds at most
        (None: for ever), the first pause between them ``backoff[0]``."""
        self.state = NodeState.REGISTERING
        self._deadline = None if total is None else now + total
        self._delay = self.backoff[0]

    def registration(self, wall: float) -> dbp.Registration:
        """The REGISTRATION for the next attempt (on a new socket)."""
        return dbp.Registration(self.info, wall)

    def attempt_failed(self, now: float) -> float:
        """No answer, or DISCONNECT: the pause before the next attempt (exponential).

        Raises:
            CatalogUnavailable: the next attempt would start past the deadline.
        """
        self.counters["registration_timeouts"] += 1
        delay = self._delay
        if self._deadline is not None and now + delay >= self._deadline:
            raise CatalogUnavailable(f"no answer from the catalog at {self.endpoint}")
        self._delay = min(delay * 2, self.backoff[1])
        return delay

    def denied(self, reply: dbp.Denied) -> RegistrationDenied:
        """DENIED to a REGISTRATION: the error to raise; the node is done."""
        self.state = NodeState.DENIED
        return RegistrationDenied(reply.reasons)

    def approved(self, reply: dbp.Approved, now: float) -> None:
        """APPROVED: take the catalog's instructions; the session starts at ``now``."""
        self.config.clear()  # in place: the node shows this very dict
        self.config.update(reply.config)
        # The catalog's instructions set the agreed heartbeat interval and misses (DBP:
        # "regular and agreed-upon intervals"); a node judging the catalog's silence by
        # a shorter interval of its own would drop a healthy session. A value out of
        # its range is not trusted: the node keeps its own.
        interval, misses, problems = read_instructions(reply.config)
        for problem in problems:
            self.counters["malformed"] += 1
            log.warning("ignoring an instruction in APPROVED: %s", problem)
        if interval is not None:
            self.heartbeat_interval = interval
        if misses is not None:
            self.misses = misses
        if self._explicit_udp is None:
            self.udp_target = udp_target(self.endpoint, reply.config.get(UDP_HEARTBEAT_KEY))
        self.mode = "udp" if self.udp_target is not None else "tcp"
        self._last_heard = now
        self.counters["registrations"] += 1
        self.state = NodeState.REGISTERED

    def registration_reply(self, cmd: DBPCommand | None) -> bool:
        """Whether ``cmd`` (None: not DBP) answers a REGISTRATION; anything else but a
        HEARTBEAT is counted as unexpected and waited past."""
        if isinstance(cmd, dbp.Approved | dbp.Denied | dbp.Disconnect):
            return True
        if cmd is not None and not isinstance(cmd, dbp.Heartbeat):
            self.counters["unexpected"] += 1
        return False

    # ------------------------------------------------------------------ the session

    def sent(self, now: float, *, beat: bool = False) -> None:
        """A command went out on the DEALER at ``now`` (``beat``: a HEARTBEAT)."""
        self._last_tcp_sent = now
        if beat:
            self.counters["heartbeats_tcp"] += 1

    def update(self, changes: Mapping[str, Any], wall: float) -> dbp.Update:
        """The UPDATE to send: the node's ``name`` with ``changes`` (Hermes's broker finds
        the node by it); :meth:`command` then hands back its :class:`Answer`."""
        self.awaiting_update = True
        self.counters["updates"] += 1
        return dbp.Update({"name": self.info.get("name"), **changes}, wall)

    def update_done(self) -> None:
        """The UPDATE's wait is over (answered, timed out or cancelled): a late answer
        is not for it."""
        self.awaiting_update = False

    def command(self, cmd: DBPCommand, now: float) -> SessionEnd | Answer | None:
        """A command from the catalog during the session: the session's end, the answer
        to the waiting UPDATE, or None."""
        if isinstance(cmd, dbp.Disconnect):
            # Seed 004: "it MUST close its socket, and reconnect ... on a new socket".
            self.counters["disconnects_received"] += 1
            return "disconnect"
        # "Any received command except DISCONNECT acts as a heartbeat."
        self._last_heard = now
        self.counters["heartbeats_received"] += 1
        waiting, self.awaiting_update = self.awaiting_update, False
        if isinstance(cmd, dbp.Awk | dbp.Approved) and waiting:
            return Answer(dict(cmd.config) if isinstance(cmd, dbp.Approved) else {})
        if isinstance(cmd, dbp.Denied) and waiting:
            return Answer(None, RegistrationDenied(cmd.reasons))
        self.awaiting_update = waiting
        if isinstance(cmd, dbp.Approved):
            self.config.update(cmd.config)  # configuration pushed by the catalog
        elif isinstance(cmd, dbp.Denied):
            # DENIED is for "unregistered services": the catalog forgot this node.
            return "denied"
        elif not isinstance(cmd, dbp.Heartbeat):
            self.counters["unexpected"] += 1
        return None

    def datagram(self, cmd: DBPCommand, now: float) -> SessionEnd | Answer | None:
        """A command that came as a datagram on the node's UDP socket."""
        if self.state is not NodeState.REGISTERED:
            return None
        if isinstance(cmd, dbp.Heartbeat) and self.mode == "tcp" and self.udp_target is not None:
            # The UDP path works again: back to UDP heartbeats alone.
            self.mode = "udp"
            self.counters["returns_to_udp"] += 1
        return self.command(cmd, now)

    def beat(self, now: float, wall: float) -> Beat:
        """One heartbeat round at ``now``: what to send, or the end of the session."""
        interval = self.heartbeat_interval
        if self.hermes and self.udp_target is None:
            return Beat()  # Hermes's broker takes no heartbeats: nothing to send or judge
        silent = now - self._last_heard
        verdict = catalog_silence(silent, interval, self.misses, hermes=self.hermes)
        if verdict == "gone":
            # "A peer MUST consider the other peer disconnected if no heartbeat arrives
            # within some multiple of that interval."
            return Beat(end="silence")
        if self.mode == "udp" and verdict == "missed":
            # "In the event of a missing beat, heartbeats will switch over to reliable
            # TCP connections."
            self.mode = "tcp"
            self.counters["fallbacks_to_tcp"] += 1
        beat = dbp.Heartbeat(str(self.info.get("name", "")), wall)
        udp = None
        if self.udp_target is not None:
            # Over UDP in UDP mode, and as a probe of the UDP path in TCP mode.
            udp = beat
            self.counters["heartbeats_udp"] += 1
        # "Peers SHOULD NOT send HEARTBEAT commands while also sending other commands."
        tcp = None
        if not self.hermes and self.mode == "tcp" and now - self._last_tcp_sent >= interval / 2:
            tcp = beat
        if self.hermes:
            pause = interval
        else:  # come back in time to see the silence end the session
            pause = min(interval, max(interval * self.misses - silent, 0.0) + 0.001)
        return Beat(udp=udp, tcp=tcp, next_at=now + pause)

    def session_ended(self, reason: SessionEnd, wall: float) -> dbp.Disconnect | None:
        """The DISCONNECT to send on the old socket before registering again, if any:
        after silence the catalog may still hold the session as live, and a new
        REGISTRATION would find the name taken."""
        self.awaiting_update = False
        return dbp.Disconnect(wall) if reason == "silence" else None

    def registered_again(self) -> None:
        """A registration after a session's end was APPROVED."""
        self.counters["reregistrations"] += 1

    def goodbye(self, wall: float) -> dbp.Disconnect | None:
        """The DISCONNECT to send when the node stops, if it is registered."""
        return dbp.Disconnect(wall) if self.state is NodeState.REGISTERED else None

    def closed(self) -> None:
        """The node's sockets are closed (a denied node stays denied)."""
        if self.state is not NodeState.DENIED:
            self.state = NodeState.CLOSED
