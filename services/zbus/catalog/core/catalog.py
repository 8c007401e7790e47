"""The catalog's sans-I/O core: DBP registration, updates, info requests and liveness.

The wiring feeds it the commands ``dbp.decode`` read from the ROUTER on port 5246 with
the identity they came from (:meth:`CatalogCore.tcp_message`), the heartbeats
``dbp.decode_datagram`` read from UDP (:meth:`CatalogCore.udp_heartbeat`), and calls
:meth:`CatalogCore.tick` once :meth:`CatalogCore.next_deadline` passes. After each call
it writes :meth:`CatalogCore.take_changes` to the registry store and only then sends
:meth:`CatalogCore.take_outbox`. The core never reads a clock, a socket or the store.

Every input takes two times. ``now`` is monotonic: liveness, expiry and the HEARTBEAT
schedule are judged on it alone, so a step of the machine's wall clock (an hour either
way, by an operator or NTP) changes no node's state. ``wall`` is wall time (epoch
seconds): the time frame of what the core sends and the ``registered_at`` and
``last_heartbeat`` of its records, which people and peers read.

Decisions (seed 004 is the spec; ``docs/protocols/dbp.md`` the codec):

- Each reply is written in the time encoding of the command it answers, and in the
  HERMES dialect (``OmO`` DENIED, empty body frames) when that encoding is float32.
- A REGISTRATION needs the spec's minimum fields ("name, ip address, port, function,
  and heartbeat timing"), unless it is Hermes-shaped: a name and an ``interfaces``
  object instead of the address fields. The names a spec reader would use are
  accepted, every number must be in its range, and one form is stored
  (:mod:`~zbus.catalog.core.registration`); an UPDATE is held to the same rules.
- APPROVED carries the catalog's instructions: ``heartbeat_interval``,
  ``heartbeat_misses`` and ``udp_heartbeat`` (the UDP port, on the catalog's host). The
  node's liveness is judged by that interval.
- UPDATE is acknowledged with AWK in both dialects (Hermes's "Acknowledged" is ``u.u``).
  It belongs on the node's connection, except from a node registered in float32
  (Hermes): a Hermes service sends UPDATE on a new socket and names itself in the body,
  so for those nodes an UPDATE from any connection is matched by that ``name``, and,
  when the node registered with a CURVE key, only from that key.
- An info REQUEST in float32 time (Hermes) is answered in Hermes's shape
  (:mod:`~zbus.catalog.core.info`), any other in zbus's.
- Nodes registered in float32 (Hermes) get no catalog HEARTBEATs and do not expire by
  silence: Hermes implements neither ``<3`` nor ``</3`` and answers them with an error.
- A DISCONNECT from a node, an expiry, or a DISCONNECT the catalog sends removes the
  node: :meth:`take_changes` returns its record once more with state ``"gone"``.
- Changes are emitted on registration, update and a change of durable state (active,
  inactive, gone; ``liveness.DURABLE``), not on every heartbeat nor between active and
  late, so a steady heartbeat costs no store write; ``last_heartbeat`` in the store is
  the time of the last such change.
- After a restart (``nodes`` given) every node is unconfirmed: its old ROUTER identity
  is forgotten and it has ``I * M + grace`` seconds from the restart to register again
  (the stored times are wall times and are not used for expiry: each rebuilt node is
  heard at the restart, on the monotonic clock).
  Until then it answers info requests (with ``"confirmed": false``) but gets no
  HEARTBEATs; a TCP command from an unknown identity other than REGISTRATION or REQUEST
  gets DISCONNECT, which makes the node reconnect and register (seed 004, "Opening and
  Closing a Connection"). Unconfirmed Hermes nodes expire like any other.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from zbus.catalog.core import liveness, registration
from zbus.catalog.core.info import hermes_error, hermes_view
from zbus.catalog.core.model import (
    COUNTERS,
    CatalogConfig,
    NodeRecord,
    NodeState,
    Outgoing,
)
from zbus.common.protocols import dbp
from zbus.common.protocols.dbp import HERMES, SPEC, DBPCommand, Dialect, JSONObject, TimeEncoding

__all__ = ["COUNTERS", "CatalogConfig", "CatalogCore", "NodeRecord", "Outgoing"]

#: Denial reasons, one DENIED frame each (seed 004: "Frame 3+: Reasons for denial").
NAME_TAKEN = "name taken: {name!r} is registered by another live node"
NOT_ALLOWED_NAME = "not allowed: {name!r} may not register"
NOT_ALLOWED_KEY = "not allowed: this peer's key may not register"
NOT_ALLOWED_UPDATE = "not allowed: this peer's key may not update {name!r}"


def dialect_for(encoding: TimeEncoding | None) -> Dialect:
    """HERMES for a peer that writes float32 times (only Hermes does), else SPEC."""
    return HERMES if encoding is TimeEncoding.FLOAT32 else SPEC


def _enc(cmd: DBPCommand) -> TimeEncoding:
    """The time encoding the peer used (decoded commands always say; ASCII otherwise)."""
    return cmd.time_encoding or TimeEncoding.ASCII


def malformed(info: Mapping[str, Any]) -> list[str]:
    """Why ``info`` is not a usable REGISTRATION body; empty when it is."""
    return registration.check(info)[1]


@dataclass(slots=True)
class _Node:
    record: NodeRecord
    confirmed: bool  # registered with this catalog run (not rebuilt from the store)
    heard_at: float  # monotonic time of its last command: what its liveness is judged by
    since: float  # monotonic time of its registration (for its uptime)
    next_beat: float = math.inf  # when the catalog's next HEARTBEAT to it is due
    scheduled_at: float = math.inf  # the time of its live entry in the core's timer heap
    key: bytes | None = None  # the CURVE key it registered with, when the wiring knows it

    @property
    def hermes(self) -> bool:
        return self.record.time_encoding is TimeEncoding.FLOAT32


class CatalogCore:
    """Who is registered, who is alive, and the DBP dialog with them.

    Args:
        config: tunables and policy.
        nodes: the store's records, to rebuild from after a restart (gone ones are
            skipped); every rebuilt node is unconfirmed (see the module docstring).
        now: monotonic time of the start.
        wall: wall time of the start.
    """

    def __init__(
        self,
        config: CatalogConfig,
        nodes: Sequence[NodeRecord] = (),
        *,
        now: float,
        wall: float,
    ) -> None:
        self.config = config
        #: Event counts for metrics; every key of COUNTERS is present from the start.
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self._by_name: dict[str, _Node] = {}
        self._by_identity: dict[bytes, _Node] = {}
        # Names by the UDP address their heartbeats come from (a UDP DISCONNECT names no
        # node: it is found by its address without a scan of the whole registry).
        self._by_address: dict[str, set[str]] = {}
        self._outbox: list[Outgoing] = []
        self._changes: list[NodeRecord] = []
        # One live entry per node: its next state change or HEARTBEAT, whichever is first,
        # so a tick costs what is due, not the size of the cluster.
        self._timers: list[tuple[float, int, _Node]] = []
        self._seq = itertools.count()
        for record in nodes:
            if record.state != "gone":
                fresh = replace(record, last_heartbeat=wall)
                # Its uptime goes on from the stored wall time of its registration,
                # carried over to this run's monotonic clock once, here.
                since = now - max(0.0, wall - record.registered_at)
                node = _Node(fresh, confirmed=False, heard_at=now, since=since)
                self._by_name[record.name] = node
                self._schedule(node)

    # ------------------------------------------------------------------ outputs

    def take_outbox(self) -> list[Outgoing]:
        """Commands to send, in order; the list is emptied."""
        out, self._outbox = self._outbox, []
        return out

    def has_changes(self) -> bool:
        """Whether records wait to be written (replies then wait for that write)."""
        return bool(self._changes)

    def take_changes(self) -> list[NodeRecord]:
        """Records to upsert into the store, in order (a later one for the same name
        wins); a removed node appears with state ``"gone"``. The list is emptied."""
        out, self._changes = self._changes, []
        return out

    def next_deadline(self) -> float:
        """When :meth:`tick` next has something to do (a state change or HEARTBEATs)."""
        timers = self._timers
        while timers and timers[0][2].scheduled_at != timers[0][0]:
            heapq.heappop(timers)  # an entry superseded by an earlier one
        return timers[0][0] if timers else math.inf

    def nodes(self) -> list[NodeRecord]:
        """Every known node, by name."""
        return [self._by_name[name].record for name in sorted(self._by_name)]

    def uptime(self, name: str, now: float) -> float | None:
        """Seconds since ``name`` registered, at monotonic time ``now``; None for an
        unknown name."""
        node = self._by_name.get(name)
        return None if node is None else max(0.0, now - node.since)

    def confirmed(self, name: str) -> bool | None:
        """Whether ``name`` registered with this run; None for an unknown name."""
        node = self._by_name.get(name)
        return None if node is None else node.confirmed

    # ------------------------------------------------------------------ inputs

    def tcp_message(
        self,
        identity: bytes,
        cmd: DBPCommand,
        now: float,
        *,
        wall: float,
        peer_key: bytes | None = None,
    ) -> None:
        """One command from the ROUTER. ``peer_key`` is the peer's CURVE public key when
        the socket is a CURVE server (checked against ``config.allowed_keys``)."""
        node = self._by_identity.get(identity)
        if type(cmd) is dbp.Heartbeat:
            if node is None:
                # Unknown identity: a node from before a restart, or never registered.
                self.counters["heartbeats_unknown"] += 1
                self._disconnect(identity, _enc(cmd), wall)
                return
            self.counters["heartbeats_tcp"] += 1
            self._heard(node, now, wall)
        elif type(cmd) is dbp.Registration:
            self._register(identity, cmd, now, wall, peer_key)
        elif type(cmd) is dbp.InfoRequest:
            self.counters["info_requests"] += 1
            if node is not None:
                self._heard(node, now, wall)
            reply = dbp.InfoReply(self._info(cmd), wall, _enc(cmd))
            self._send(identity, reply)
        elif type(cmd) is dbp.Update and node is not None:
            self._update(identity, node, cmd, now, wall)
        elif type(cmd) is dbp.Update and (target := self._hermes_node(cmd)) is not None:
            # Hermes sends UPDATE on a new socket and names the node in the body.
            if target.key is not None and peer_key != target.key:
                self.counters["updates_denied_policy"] += 1
                reason = NOT_ALLOWED_UPDATE.format(name=target.record.name)
                self._send(identity, dbp.Denied((reason,), wall, _enc(cmd)))
            else:
                self._update(identity, target, cmd, now, wall)
        elif type(cmd) is dbp.Disconnect:
            self.counters["disconnects_received"] += 1
            if node is not None:
                # "it MUST send no further commands to that service node"
                self._remove(node)
        else:
            # UPDATE before REGISTRATION, or a command only the catalog sends: "The
            # broker MUST respond to any valid but unexpected command by sending
            # DISCONNECT and then no further commands to that service node."
            self.counters["unexpected_commands"] += 1
            self._disconnect(identity, _enc(cmd), wall)
            if node is not None:
                self._remove(node)

    def udp_heartbeat(
        self,
        address: tuple[str, int],
        cmd: dbp.Heartbeat | dbp.Disconnect,
        now: float,
        *,
        wall: float,
    ) -> None:
        """One datagram from the UDP heartbeat socket. A HEARTBEAT names its node; a
        DISCONNECT has no name and applies to the node whose heartbeats come from
        ``address``. UDP cannot be answered here; unknown names are counted."""
        where = f"{address[0]}:{address[1]}"
        if type(cmd) is dbp.Disconnect:
            for name in list(self._by_address.get(where, ())):
                peer = self._by_name.get(name)
                if peer is not None and peer.confirmed and peer.record.address == where:
                    self.counters["disconnects_received"] += 1
                    self._remove(peer)
            return
        assert type(cmd) is dbp.Heartbeat
        node = self._by_name.get(cmd.service)
        if node is None or not node.confirmed:
            self.counters["heartbeats_unknown"] += 1
            return
        self.counters["heartbeats_udp"] += 1
        moved = node.record.address != where
        if moved:
            self._unindex(node.record)
            node.record = replace(node.record, address=where)
            self._by_address.setdefault(where, set()).add(node.record.name)
        self._heard(node, now, wall, changed=moved)

    def invalid_message(self) -> None:
        """The wiring read frames that did not decode: seed 004 says to drop them."""
        self.counters["invalid_messages"] += 1

    def tick(self, now: float, limit: int | None = None, *, wall: float) -> bool:
        """Apply the time events due at monotonic time ``now`` and send HEARTBEATs when
        due (stamped with ``wall``).

        Args:
            limit: handle at most this many nodes' timers, so that a caller sharing its
                thread with other work can take a turn in between.

        Returns:
            True when timers due at ``now`` remain (only possible with ``limit``).
        """
        cfg = self.config
        timers = self._timers
        budget = math.inf if limit is None else limit
        while timers and timers[0][0] <= now:
            if budget <= 0:
                return True
            budget -= 1
            at, _, node = heapq.heappop(timers)
            if node.scheduled_at != at or self._by_name.get(node.record.name) is not node:
                continue  # superseded, or the node is gone
            node.scheduled_at = math.inf
            if not (node.hermes and node.confirmed):
                rec = node.record
                state = liveness.advance(
                    rec.state, node.heard_at, rec.heartbeat_interval,
                    cfg.heartbeat_misses, cfg.grace, now,
                )  # fmt: skip
                if state == "gone":
                    self.counters["expiries"] += 1
                    self._remove(node, event="expired")
                    continue
                if state != rec.state:
                    self._set_state(node, state)
            # "Both broker and worker MUST send heartbeats at regular and agreed-upon
            # intervals"; "it SHOULD stop sending it messages" once it is disconnected.
            if node.next_beat <= now:
                node.next_beat += cfg.heartbeat_interval
                if node.next_beat <= now:  # a long pause: skip the missed ones
                    node.next_beat = now + cfg.heartbeat_interval
                if node.confirmed and not node.hermes and node.record.state != "inactive":
                    rec = node.record
                    self.counters["heartbeats_sent"] += 1
                    self._send(rec.identity, dbp.Heartbeat(cfg.name, wall, rec.time_encoding))
            self._schedule(node)
        return False

    def state_counts(self) -> dict[str, int]:
        """Known nodes by state (every state present, zero or not)."""
        counts = {"active": 0, "late": 0, "inactive": 0}
        for node in self._by_name.values():
            counts[node.record.state] += 1
        return counts

    def _schedule(self, node: _Node) -> None:
        """Make sure the timer heap holds the node's next event (state change or beat)."""
        change = self._next_change(node)
        at = min(math.inf if change is None else change, node.next_beat)
        if at < node.scheduled_at:
            node.scheduled_at = at
            heapq.heappush(self._timers, (at, next(self._seq), node))

    # ------------------------------------------------------------------ dialog

    def _register(
        self,
        identity: bytes,
        cmd: dbp.Registration,
        now: float,
        wall: float,
        peer_key: bytes | None,
    ) -> None:
        cfg = self.config
        info, reasons = registration.check(cmd.info)
        reason_key = "malformed"
        name: str = info.get("name", "")
        if not reasons:
            if cfg.allowed_names is not None and name not in cfg.allowed_names:
                reasons.append(NOT_ALLOWED_NAME.format(name=name))
            if cfg.allowed_keys is not None and peer_key not in cfg.allowed_keys:
                reasons.append(NOT_ALLOWED_KEY)
            reason_key = "policy"
        if not reasons:
            holder = self._by_name.get(name)
            if (
                holder is not None
                and holder.confirmed
                and holder.record.identity != identity
                and holder.record.state in ("active", "late")
            ):
                reasons.append(NAME_TAKEN.format(name=name))
                reason_key = "name_taken"
        if reasons:
            self.counters[f"registrations_denied_{reason_key}"] += 1
            self._send(identity, dbp.Denied(tuple(reasons), wall, _enc(cmd)))
            return
        previous = self._by_identity.get(identity)
        if previous is not None and previous.record.name != name:
            self._remove(previous)  # one node per connection: it renamed itself
        holder = self._by_name.get(name)
        if holder is not None and holder.confirmed and holder.record.identity != identity:
            # An inactive node's name, taken over: the old connection gets nothing more.
            del self._by_identity[holder.record.identity]
        record = NodeRecord(
            name=name,
            identity=identity,
            info=info,
            state="active",
            registered_at=wall,
            last_heartbeat=wall,
            heartbeat_interval=cfg.heartbeat_interval,
            address=holder.record.address if holder is not None else None,
            time_encoding=_enc(cmd),
        )
        # Each node has its own heartbeat phase, from its registration: 10,000 nodes get
        # their HEARTBEATs spread over the interval, not in one burst.
        node = _Node(
            record,
            confirmed=True,
            heard_at=now,
            since=now,
            next_beat=now + cfg.heartbeat_interval,
            key=peer_key,
        )
        self._by_name[name] = self._by_identity[identity] = node
        if record.address is not None:
            self._by_address.setdefault(record.address, set()).add(name)
        self._schedule(node)
        self._changes.append(record)
        self.counters["registrations_approved"] += 1
        instructions: JSONObject = {
            "heartbeat_interval": cfg.heartbeat_interval,
            "heartbeat_misses": cfg.heartbeat_misses,
            "udp_heartbeat": cfg.udp_port,
        }
        self._send(identity, dbp.Approved(instructions, wall, _enc(cmd)))

    def _hermes_node(self, cmd: dbp.Update) -> _Node | None:
        """The node a Hermes UPDATE from an unknown connection names, if it registered
        in float32 with this run."""
        name = cmd.changes.get("name")
        node = self._by_name.get(name) if isinstance(name, str) else None
        return node if node is not None and node.hermes and node.confirmed else None

    def _update(
        self, identity: bytes, node: _Node, cmd: dbp.Update, now: float, wall: float
    ) -> None:
        rec = node.record
        if cmd.changes.get("name", rec.name) != rec.name:
            reasons = ["malformed: an UPDATE cannot change the name; register again"]
        else:
            info, reasons = registration.merge(rec.info, cmd.changes)
        if reasons:
            # Nothing of a refused UPDATE is kept; the node stays as it was.
            self.counters["updates_denied"] += 1
            self._send(identity, dbp.Denied(tuple(reasons), wall, _enc(cmd)))
            self._heard(node, now, wall)
            return
        self.counters["updates"] += 1
        node.record = replace(rec, info=info)
        self._heard(node, now, wall, changed=True)
        self._send(identity, dbp.Awk(wall, _enc(cmd)))

    def _info(self, cmd: dbp.InfoRequest) -> JSONObject:
        """The REPLY body. Seed 004: "The information request is either a specified
        services name or a list of currently active services available. Information
        that is not available should be responded with by an inactive warning.\"

        A REQUEST in float32 time (Hermes) gets Hermes's shape: ``{name: info}``, the
        list as ``{name: info, ...}``, ``{"Error": text}`` for an inactive name.
        """
        if cmd.time_encoding is TimeEncoding.FLOAT32:
            if cmd.wants_list:
                return {
                    name: hermes_view(node.record)
                    for name, node in sorted(self._by_name.items())
                    if node.record.state in ("active", "late")
                }
            node = self._by_name.get(cmd.query)
            if node is None or node.record.state not in ("active", "late"):
                return hermes_error(cmd.query)
            return {cmd.query: hermes_view(node.record)}
        if cmd.wants_list:
            return {
                "services": {
                    name: self._view(node)
                    for name, node in sorted(self._by_name.items())
                    if node.record.state in ("active", "late")
                }
            }
        node = self._by_name.get(cmd.query)
        if node is None or node.record.state not in ("active", "late"):
            state: NodeState = "gone" if node is None else node.record.state
            return {
                "service": cmd.query,
                "state": state,
                "warning": f"inactive: {cmd.query!r} is not an active service",
            }
        return {"service": cmd.query, **self._view(node)}

    @staticmethod
    def _view(node: _Node) -> JSONObject:
        rec = node.record
        return {
            "state": rec.state,
            "confirmed": node.confirmed,
            "info": rec.info,
            "registered_at": rec.registered_at,
            "last_heartbeat": rec.last_heartbeat,
            "heartbeat_interval": rec.heartbeat_interval,
        }

    # ------------------------------------------------------------------ helpers

    def deregister(self, name: str, *, wall: float) -> bool:
        """Remove a node by name (admin API): it is sent DISCONNECT (stamped ``wall``),
        which per the spec makes a node close its socket and register again on a new one.

        Returns:
            False when no node of that name is registered.
        """
        node = self._by_name.get(name)
        if node is None:
            return False
        if node.confirmed:
            self._disconnect(node.record.identity, node.record.time_encoding, wall)
        self._remove(node)
        return True

    def _send(self, identity: bytes, cmd: DBPCommand) -> None:
        self._outbox.append(Outgoing(identity, cmd, dialect_for(cmd.time_encoding)))

    def _disconnect(self, identity: bytes, encoding: TimeEncoding | None, wall: float) -> None:
        self.counters["disconnects_sent"] += 1
        self._send(identity, dbp.Disconnect(wall, encoding))

    def _heard(self, node: _Node, now: float, wall: float, *, changed: bool = False) -> None:
        """Any command but DISCONNECT acts as a heartbeat (seed 004, "Heartbeating")."""
        before = node.record.state
        state = liveness.step(before, "heard")
        node.heard_at = now
        node.record = replace(node.record, state=state, last_heartbeat=wall)
        if changed or liveness.DURABLE[state] != liveness.DURABLE[before]:
            self._changes.append(node.record)
        if state != before:
            self._schedule(node)  # back from inactive: its next change may come sooner

    def _set_state(self, node: _Node, state: NodeState) -> None:
        before = node.record.state
        node.record = replace(node.record, state=state)
        if liveness.DURABLE[state] != liveness.DURABLE[before]:
            self._changes.append(node.record)

    def _remove(self, node: _Node, event: liveness.Event = "disconnected") -> None:
        rec = node.record
        gone = replace(rec, state=liveness.step(rec.state, event))
        if self._by_name.get(rec.name) is node:
            del self._by_name[rec.name]
            self._unindex(rec)
        if node.confirmed and self._by_identity.get(rec.identity) is node:
            del self._by_identity[rec.identity]
        self._changes.append(gone)

    def _unindex(self, record: NodeRecord) -> None:
        names = self._by_address.get(record.address or "")
        if names is not None:
            names.discard(record.name)
            if not names:
                del self._by_address[record.address or ""]

    def _next_change(self, node: _Node) -> float | None:
        if node.hermes and node.confirmed:
            return None
        rec = node.record
        return liveness.next_change(
            rec.state, node.heard_at, rec.heartbeat_interval,
            self.config.heartbeat_misses, self.config.grace,
        )  # fmt: skip
