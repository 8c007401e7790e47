"""The event bus's side of replication, run by the pipeline thread (ADR 0009).

The pipeline thread owns the log, so it also owns the dialog with the other replicas:

- As leader it binds the replication ROUTER, answers each follower's fetch with the
  stored batches after the follower's position (as they are stored, never re-encoded),
  and keeps the :class:`~zbus.replication.core.LeaderCore`. A fetch with nothing to send
  waits (up to ``PARK_SECONDS``) for the next commit, so a follower learns of a batch at
  once. Confirms wait until the high watermark passes what the log held when their
  batch was committed; a confirm still waiting after ``CONFIRM_TIMEOUT`` is refused, and
  the client sends again (the same uuids: the log stores them once).
- As follower it fetches from the leader through a DEALER, appends what comes as it is,
  truncates where the leader says the logs part, and keeps the epoch history.
- Either way, subscribers get events only up to the high watermark: the pipeline
  publishes by reading back from the log what the HWM has passed
  (:meth:`ReplicationLink.visible`).

The coordination with etcd runs in a thread of its own
(:class:`~zbus.replication.node.CoordinationThread`); the two share a
:class:`~zbus.replication.node.ReplicaState`.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from dataclasses import dataclass
from typing import Any

import zmq

from zbus.common.clock import Clock
from zbus.common.protocols import eventbus_ext as ext
from zbus.common.protocols import replication as rp
from zbus.common.rejects import LogLimiter
from zbus.common.security import KeyPair, make_client, make_server
from zbus.common.wire import send_frames
from zbus.eventbus.core import batchlog
from zbus.eventbus.core.batchlog import BatchError, StoredBatch
from zbus.eventbus.server.config import EventBusSettings
from zbus.eventbus.server.store import NewEvent, SqliteEventLog, SqliteEventLogReader, StoreError
from zbus.replication import core
from zbus.replication.core import EpochHistory, LeaderCore
from zbus.replication.etcd import LeaderInfo
from zbus.replication.metrics import ReplicationMetrics
from zbus.replication.node import ReplicaState

log = logging.getLogger(__name__)

FORWARD_HWM = 64  # ZB-PUBs on the way to the leader, at most
REPLICATION_DOMAIN = "zbus-replication"
PARK_SECONDS = 0.2  # a fetch with nothing to send waits this long at most
VIEW_SECONDS = 0.1  # how often the pipeline refreshes what /api/v1/replication shows
FETCH_TIMEOUT = 1.0  # a follower with no answer this long connects again
CONFIRM_TIMEOUT = 5.0  # a confirm the replicas have not passed by then is refused
FETCH_BYTES = 4 << 20  # what a follower asks for at once
SERVE_BATCHES = 256
FRESH_BYTES = 16 << 20  # a follower's appended batches kept for publishing, at most


@dataclass(slots=True)
class _Held:
    upto: int  # the log's end when the batch was committed
    at: float
    replies: list[tuple[bytes, list[bytes]]]
    failure: list[tuple[bytes, list[bytes]]]  # what to send instead on a refusal


class ReplicationLink:
    """Leader or follower, as etcd says; owned by the pipeline thread."""

    def __init__(
        self,
        ctx: zmq.Context[Any],
        settings: EventBusSettings,
        store: SqliteEventLog,
        state: ReplicaState,
        metrics: ReplicationMetrics,
        clock: Clock,
    ) -> None:
        self.ctx = ctx
        self.settings = settings
        self.store = store
        self.state = state
        self.metrics = metrics
        self.clock = clock
        self.name = state.name
        self.group = settings.replication_group
        self.peers = {p.name: p.endpoint for p in settings.peers()}
        self.history = EpochHistory(store.epochs())
        self.core: LeaderCore | None = None
        self.led_from = (0, 0)  # (epoch, log end when elected) while leading
        self.epoch = 0
        self.hwm = 0  # what this replica may serve: everything at or below it
        # What the pipeline has broadcast. What the log held at start was broadcast
        # before a restart, or is past a HWM no one knows yet; a subscriber that finds a
        # gap fills it from the log.
        self.published = store.last_sequence()
        self.following: str | None = None  # the leader fetched from
        self.dealer: zmq.Socket[Any] | None = None
        self.forwarder: zmq.Socket[Any] | None = None  # to the leader's COLLECTOR
        self._fetch_at: float | None = None  # a fetch in flight since
        self._parked: dict[bytes, tuple[core.Fetch, float]] = {}
        # A follower's batches just appended, kept for the pipeline to publish once the
        # HWM passes them without reading them back (up to FRESH_BYTES).
        self.fresh: deque[StoredBatch] = deque()
        self._fresh_bytes = 0
        self._held: deque[_Held] = deque()
        self.reader: SqliteEventLogReader = store.reader()
        self._failed: list[tuple[bytes, list[bytes]]] = []
        self._next_view = 0.0
        self._limiter = LogLimiter()
        # CURVE: the replicas of a group share one key pair; the replication port admits
        # only its public key (ZAP domain REPLICATION_DOMAIN), and a replica's own
        # sockets to its leader are CURVE clients with it.
        self.curve: KeyPair | None = None

    # ------------------------------------------------------------- sockets
    def open(self) -> None:
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.linger = 0
        self.router.router_mandatory = True
        self.router.maxmsgsize = 1 << 20
        if self.curve is not None:
            make_server(self.router, self.curve)
            self.router.zap_domain = REPLICATION_DOMAIN.encode()
        port = self.settings.own_replication_port()
        self.router.bind(f"tcp://{self.settings.host}:{port}")
        self.endpoint = self.router.getsockopt_string(zmq.LAST_ENDPOINT)

    def _secure(self, sock: zmq.Socket[Any]) -> None:
        """A socket of this replica to its leader: a CURVE client with the group's keys."""
        if self.curve is not None:
            make_client(sock, self.curve, self.curve.public)

    def close(self) -> None:
        for sock in (getattr(self, "router", None), self.dealer, self.forwarder):
            if sock is not None:
                sock.close(linger=0)
        self.reader.close()

    def sockets(self) -> list[zmq.Socket[Any]]:
        return [self.router] + ([self.dealer] if self.dealer is not None else [])

    # ------------------------------------------------------------- the role
    @property
    def role(self) -> str:
        if self.core is not None:
            return "leader"
        return "follower" if self.following is not None else "candidate"

    def step(self, now: float) -> bool:
        """Follow what etcd says; run the leader's timers. Returns True when the set of
        sockets to poll changed."""
        s = self.state
        with s.lock:
            leading, leader = s.leading, s.leader
            answer, s.isr_answer = s.isr_answer, None
            lease_ok = s.lease.valid(now)
        changed = False
        if self.core is not None and (
            leading is None or leading.epoch != self.epoch or not lease_ok
        ):
            self._stop_leading("the leadership lease ended" if lease_ok else "the lease lapsed")
            changed = True
        if self.core is None and leading is not None and lease_ok:
            changed = self._start_leading(leading.epoch, now) or changed
        if self.core is None:
            target = leader.name if leader is not None and leader.name != self.name else None
            if target != self.following or (leader is not None and leader.epoch != self.epoch):
                self._follow(target, leader.epoch if leader is not None else 0)
                self._forward_to(leader if target is not None else None)
                changed = True
            if self.dealer is not None and (
                self._fetch_at is None or now - self._fetch_at > FETCH_TIMEOUT
            ):
                if self._fetch_at is not None:  # no answer: connect again
                    self._follow(self.following, self.epoch)
                    changed = True
                self._send_fetch(now)
        else:
            if answer is not None:
                members = answer[0]
                if members is None:
                    self.core.isr_failed()
                else:
                    self.core.isr_stored(members)
            with s.lock:
                pending = s.isr_request
            if pending is None and self.core.pending is None:
                change = self.core.tick(now)
                if change is not None:
                    with s.lock:
                        s.isr_request = change.members
            self._answer_parked(now, only_expired=True)
            self._expire_held(now)
            self.hwm = self.core.hwm
        if changed or now >= self._next_view:  # the admin API's view, not every turn
            self._next_view = now + VIEW_SECONDS
            self._update_view()
        return changed

    def _start_leading(self, epoch: int, now: float) -> bool:
        log_end = self.store.last_sequence()
        self.history = self.history.begin(epoch, log_end + 1)
        self.store.set_epochs(self.history.entries)
        self._follow(None, epoch)
        with self.state.lock:
            in_sync, previous = self.state.in_sync, self.state.previous_leader
        self.core = LeaderCore(
            name=self.name,
            epoch=epoch,
            members=frozenset(self.peers),
            in_sync=in_sync | {self.name},
            min_insync=self.settings.min_insync,
            max_lag=self.settings.replica_max_lag,
            log_end=log_end,
            hwm=self.hwm,
            history=self.history,
            now=now,
            previous_leader=previous,
        )
        self.epoch = epoch
        self.led_from = (epoch, log_end)
        self.state.mark_eligible()
        self.metrics.elections.inc()
        log.info("leading", extra={"epoch": epoch, "log_end": log_end, "hwm": self.hwm})
        return True

    def _stop_leading(self, why: str) -> None:
        log.warning("no longer leader", extra={"epoch": self.epoch, "reason": why})
        self.core = None
        self.led_from = (0, 0)
        self._fail_held()
        self._parked.clear()
        with self.state.lock:
            self.state.isr_request = None

    def _follow(self, leader: str | None, epoch: int) -> None:
        if self.dealer is not None:
            self.dealer.close(linger=0)
            self.dealer = None
        self._fetch_at = None
        self.following = leader
        self.epoch = epoch
        endpoint = self.peers.get(leader) if leader is not None else None
        if endpoint is None:
            return
        self.dealer = self.ctx.socket(zmq.DEALER)
        self.dealer.linger = 0
        self.dealer.maxmsgsize = FETCH_BYTES + (16 << 20)
        self._secure(self.dealer)
        self.dealer.connect(endpoint)

    def _forward_to(self, leader: LeaderInfo | None) -> None:
        """Writes that ask no confirm go on to the leader's COLLECTOR (a plain spec
        publisher works against any replica); see :meth:`forward`."""
        if self.forwarder is not None:
            self.forwarder.close(linger=0)
            self.forwarder = None
        if leader is None:
            return
        try:
            endpoint = json.loads(leader.address)["collector"]
        except (ValueError, KeyError, TypeError):
            self._rejected("bad_leader_address", leader.address[:200])
            return
        if not isinstance(endpoint, str) or not endpoint.startswith("tcp://"):
            self._rejected("bad_leader_address", str(endpoint)[:200])
            return
        self.forwarder = self.ctx.socket(zmq.DEALER)
        self.forwarder.linger = 0
        self.forwarder.sndhwm = FORWARD_HWM
        self._secure(self.forwarder)
        self.forwarder.connect(endpoint)

    def forward(self, events: list[NewEvent], chunk: int) -> int:
        """Send events on to the leader, unconfirmed; returns how many went (the rest,
        with the leader unknown or its queue full, are dropped and counted)."""
        if self.forwarder is None:
            self.metrics.forward_dropped.inc(len(events))
            return 0
        sent = 0
        for i in range(0, len(events), chunk):
            part = events[i : i + chunk]
            batch = ext.PubBatch(
                tuple(ext.EventData(e.topic, e.producer, e.ts, e.uuid, e.data) for e in part),
                confirm=False,
            )
            try:
                send_frames(self.forwarder, ext.encode(batch), block=False)
                sent += len(part)
            except zmq.Again:
                self.metrics.forward_dropped.inc(len(part))
        self.metrics.forwarded.inc(sent)
        return sent

    # ------------------------------------------------------------ leading
    def refusal(self, now: float) -> str | None:
        """Why a write is refused here now (None: accepted)."""
        if self.core is None:
            leader = self.following or "not known"
            return f"not the leader: this replica is {self.role}; the leader is {leader}"
        with self.state.lock:
            return self.core.refusal(self.state.lease, now)

    def hold(
        self,
        replies: list[tuple[bytes, list[bytes]]],
        failure: list[tuple[bytes, list[bytes]]],
        now: float,
    ) -> None:
        """Keep a commit's confirms until the HWM passes the log's end."""
        if replies:
            self._held.append(_Held(self.store.last_sequence(), now, replies, failure))

    def committed(self, now: float) -> None:
        """The pipeline stored a batch: tell the core, answer the waiting fetches."""
        if self.core is not None:
            self.core.appended(self.store.last_sequence())
            self._answer_parked(now, only_expired=False)

    def releasable(self) -> list[tuple[bytes, list[bytes]]]:
        """The confirms the HWM has passed, in commit order."""
        if self.core is None:
            return []
        upto = self.core.confirmable()
        out: list[tuple[bytes, list[bytes]]] = []
        while self._held and self._held[0].upto <= upto:
            out.extend(self._held.popleft().replies)
        self.hwm = self.core.hwm
        return out

    def _expire_held(self, now: float) -> None:
        while self._held and now - self._held[0].at > CONFIRM_TIMEOUT:
            self._failed.extend(self._held.popleft().failure)
            self.metrics.unconfirmed.inc()

    def _fail_held(self) -> None:
        while self._held:
            self._failed.extend(self._held.popleft().failure)
            self.metrics.unconfirmed.inc()

    def failed(self) -> list[tuple[bytes, list[bytes]]]:
        """Refusals to send for confirms given up (the lease ended, or too late)."""
        out, self._failed = self._failed, []
        return out

    def on_router(self, now: float) -> None:
        while True:
            try:
                frames = self.router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            identity, body = frames[0], frames[1:]
            try:
                cmd = rp.decode(body)
            except rp.ProtocolError as exc:
                self._rejected("malformed", str(exc))
                continue
            if not isinstance(cmd, rp.Fetch):
                self._rejected("unexpected", f"a {type(cmd).__name__} on the leader's port")
                continue
            if cmd.group != self.group or cmd.name not in self.peers or cmd.name == self.name:
                self._reply(identity, rp.Refused(self.epoch, "unknown_peer", f"{cmd.name!r}"))
                self._rejected("unknown_peer", f"{cmd.group}/{cmd.name}")
                continue
            self._serve(identity, cmd, now)

    def _serve(self, identity: bytes, cmd: rp.Fetch, now: float) -> None:
        c = self.core
        if c is None:
            self._reply(identity, rp.Refused(self.epoch, "not_leader", f"{self.role}"))
            return
        fetch = core.Fetch(cmd.name, cmd.epoch, cmd.from_seq, cmd.last_epoch)
        before = c.hwm
        answer = c.on_fetch(fetch, now)
        if isinstance(answer, core.Refuse):
            self._reply(identity, rp.Refused(c.epoch, answer.reason, answer.detail))
            self._rejected(answer.reason, answer.detail)
            return
        if isinstance(answer, core.Diverging):
            self._reply(identity, rp.Diverging(c.epoch, answer.epoch, answer.end))
            return
        if c.hwm != before:
            self.hwm = c.hwm
        if cmd.from_seq > c.log_end and c.hwm == before:
            self._parked[identity] = (fetch, now)
            return
        self._send_batches(identity, cmd.from_seq, min(cmd.max_bytes, FETCH_BYTES))
        if c.hwm != before:
            self._answer_parked(now, only_expired=False)

    def _answer_parked(self, now: float, *, only_expired: bool) -> None:
        if self.core is None:
            return
        for identity, (fetch, at) in list(self._parked.items()):
            if only_expired and now - at < PARK_SECONDS:
                continue
            del self._parked[identity]
            self._send_batches(identity, fetch.from_seq, FETCH_BYTES)

    def _send_batches(self, identity: bytes, from_seq: int, max_bytes: int) -> None:
        assert self.core is not None
        frames: list[bytes] = []
        size = 0
        if from_seq <= self.core.log_end:
            try:
                batches = self.reader.batches(from_seq - 1, SERVE_BATCHES)
            except StoreError as exc:  # a damaged batch: say so, serve nothing
                self._rejected("store_error", str(exc))
                self._reply(identity, rp.Refused(self.core.epoch, "store_error", str(exc)[:1000]))
                return
            for batch in batches:
                raw = batchlog.pack(batch)
                frames.append(raw)
                size += len(raw)
                if size >= max_bytes:
                    break
        serve = rp.Serve(
            self.core.epoch,
            from_seq,
            self.core.hwm,
            self.core.log_end,
            self.history.entries,
            tuple(frames),
        )
        self._reply(identity, serve)
        self.metrics.served.inc(len(frames))

    def _reply(self, identity: bytes, cmd: rp.Command) -> None:
        try:
            send_frames(self.router, [identity, *rp.encode(cmd)], block=False)
        except zmq.ZMQError:
            self.metrics.rejected.labels("unreachable").inc()

    def _rejected(self, reason: str, detail: str) -> None:
        self.metrics.rejected.labels(reason).inc()
        if self._limiter.allow(self.clock.monotonic()):
            log.warning("replication frame refused", extra={"reason": reason, "error": detail})

    # ---------------------------------------------------------- following
    def _send_fetch(self, now: float) -> None:
        assert self.dealer is not None
        end = self.store.last_sequence()
        last_epoch = self.history.epoch_at(end) if end > 0 else 0
        fetch = rp.Fetch(self.group, self.name, self.epoch, end + 1, last_epoch, FETCH_BYTES)
        try:
            send_frames(self.dealer, rp.encode(fetch), block=False)
            self._fetch_at = now
        except zmq.Again:
            self._fetch_at = None

    def on_dealer(self, now: float) -> None:
        assert self.dealer is not None
        while self.dealer is not None:
            try:
                frames = self.dealer.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                cmd = rp.decode(frames)
            except rp.ProtocolError as exc:
                self._rejected("malformed", str(exc))
                continue
            if cmd.epoch != self.epoch or isinstance(cmd, rp.Fetch):
                self._rejected("stale_epoch", f"an answer of epoch {cmd.epoch}")
                continue
            self._fetch_at = None
            if isinstance(cmd, rp.Serve):
                self._apply(cmd)
            elif isinstance(cmd, rp.Diverging):
                self._truncate(cmd)
            else:
                self._rejected(cmd.reason, cmd.detail)
                self._fetch_at = now  # wait a fetch timeout before asking again
                continue
            self._send_fetch(now)

    def _apply(self, serve: rp.Serve) -> None:
        end = self.store.last_sequence()
        if serve.from_seq != end + 1:
            # Not the answer to the fetch in flight (one sent before a truncation):
            # appending it could leave a hole.
            self._rejected("stale_answer", f"from {serve.from_seq}, this log ends at {end}")
            return
        try:
            for raw in serve.batches:
                batch = batchlog.unpack(raw)
                if batch.last_seq <= end:
                    continue
                self.store.append_stored(batch)
                end = batch.last_seq
                self._keep_fresh(batch)
            leader_history = EpochHistory(serve.history)
            merged = self.history.merged(leader_history, end)
            if merged != self.history:
                self.store.set_epochs(merged.entries)
                self.history = merged
        except (BatchError, StoreError, core.ReplicationError) as exc:
            self._rejected("bad_batch", str(exc))
            return
        self.hwm = max(self.hwm, core.follower_hwm(end, serve.hwm))
        if end >= serve.log_end:
            self.state.mark_eligible()

    def _keep_fresh(self, batch: StoredBatch) -> None:
        self.fresh.append(batch)
        self._fresh_bytes += len(batch.rows) + len(batch.uuids)
        while self._fresh_bytes > FRESH_BYTES and self.fresh:
            old = self.fresh.popleft()  # read back from the log instead
            self._fresh_bytes -= len(old.rows) + len(old.uuids)

    def take_fresh(self, after: int, upto: int) -> StoredBatch | None:
        """The kept batch that starts right after ``after`` and ends by ``upto``, if any;
        older ones are dropped."""
        while self.fresh:
            batch = self.fresh[0]
            if batch.first_seq <= after:
                self.fresh.popleft()
                self._fresh_bytes -= len(batch.rows) + len(batch.uuids)
                continue
            if batch.first_seq == after + 1 and batch.last_seq <= upto:
                self.fresh.popleft()
                self._fresh_bytes -= len(batch.rows) + len(batch.uuids)
                return batch
            return None
        return None

    def _truncate(self, answer: rp.Diverging) -> None:
        end = self.store.last_sequence()
        to, history = core.follower_truncation(
            end, self.history, core.Diverging(answer.at_epoch, answer.end)
        )
        if to < self.hwm:
            # The leader lacks what this replica saw confirmed: keep it, and say so.
            self._rejected("truncation_below_hwm", f"asked to cut at {to}, HWM {self.hwm}")
            return
        try:
            gone = self.store.truncate_after(to)
            self.store.set_epochs(history.entries)
        except StoreError as exc:
            self._rejected("truncation_failed", str(exc))
            return
        self.history = history
        self.published = min(self.published, to)
        self.fresh.clear()
        self._fresh_bytes = 0
        self.metrics.truncated.inc(gone)
        log.warning("log truncated", extra={"after": to, "events": gone})

    # --------------------------------------------------------------- view
    def leading(self) -> tuple[int, int]:
        """``(epoch, log end when elected)`` while this replica leads, else ``(0, 0)``;
        from any thread (the doors')."""
        return self.led_from

    def visible(self) -> int:
        """The last sequence subscribers may see here."""
        return min(self.hwm, self.store.last_sequence())

    def _update_view(self) -> None:
        c = self.core
        with self.state.lock:
            v = self.state.view
            v.role, v.epoch = self.role, self.epoch
            v.leader = self.name if c is not None else self.following
            v.log_end, v.hwm = self.store.last_sequence(), self.visible()
            v.in_sync = (
                tuple(sorted(c.in_sync)) if c is not None else tuple(sorted(self.state.in_sync))
            )
            v.lag = c.lags() if c is not None else {}
