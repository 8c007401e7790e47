"""The PPPP door (seed 003) on port 5560: a thread of its own with a blocking poller.

Sockets and files (ADR 0006):

- a ROUTER on ``ZBUS_PPPP_PORT`` (CURVE with the bus's keys and its ZAP allow-list when
  configured; ``ROUTER_HANDOVER``, so that a returning subscriber takes its identity
  over), where subscribers talk to :class:`~zbus.eventbus.core.pppp.PpppCore`, the door's
  sans-I/O core: this thread feeds it what arrives and the time, and does what it hands
  back (:meth:`~zbus.eventbus.core.pppp.PpppCore.take`): sends, reads of the log, CUSTOMs
  to publish;
- the door's :class:`~zbus.eventbus.doors.link.LogLink`: the stream, every event the bus
  committed, from any door, after the group commit, and its heartbeats (the log's last
  sequence). A gap in the stream's global sequence (or a bus restart) is repaired by
  reading the log from where the door stands. A CUSTOM is published as an event, as any
  zbus publisher publishes (``ZB-PUB`` with a confirm);
- a reader of the log (:attr:`~zbus.eventbus.doors.wiring.DoorWiring.open_reader`), for
  the reads the core asks for: messages older than the cache, SYNC pages and catching up;
- ``pppp.sqlite`` beside the log: checkpoints and ACK positions, in small group commits
  (:class:`~zbus.eventbus.doors.pppp.positions.PpppPositions`);
- a PULL on an inproc endpoint that wakes the thread for an admin call
  (:meth:`PpppDoor.submit`): the admin API and the metrics read the core's state through
  this thread, which owns it, never from their own.

What one subscriber can make the bus hold is bounded: the core counts the bytes of every
message sent to it and not ACKed (or, for a SYNC, not yet passed by the queue), and sends
nothing past ``ZBUS_PPPP_PEER_BYTES``; ZeroMQ's queue towards it holds at most what is
counted, and in messages a window and a margin (its send HWM), which bounds its
HEARTBEATs. A message the queue cannot take now is handed back to the core
(:meth:`~zbus.eventbus.core.pppp.PpppCore.unsent`): it stays a position and is sent
later; nothing is dropped. What a subscriber sends is read up to the same bound. When a
subscriber's connection goes (a send finds it unreachable, or the identity speaks on
another connection: ``ROUTER_HANDOVER``), its queue went with it, and the core stops
counting it (:meth:`~zbus.eventbus.core.pppp.PpppCore.gone`). A connection is the file
descriptor a message came on and how many times that descriptor was closed before (a
monitor of the ROUTER's disconnections), so that a descriptor used again is a new one.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import msgpack
import zmq
from zmq.utils.monitor import recv_monitor_message

from zbus.common.protocols.eventbus_limits import MAX_PRODUCER_BYTES
from zbus.common.rejects import LogLimiter, log_refusals
from zbus.common.sqlite import StoreError
from zbus.common.threads import SocketThread
from zbus.eventbus.core.flow import hwm_for
from zbus.eventbus.core.link import Outgoing
from zbus.eventbus.core.log import Event, EventLogReader
from zbus.eventbus.core.pppp import (
    STATE_TOPIC,
    Batch,
    CatchUpRead,
    Limits,
    MessagesRead,
    Payload,
    PpppCore,
    Read,
    Times,
    identity_text,
    payload_frames,
)
from zbus.eventbus.doors.link import LogLink
from zbus.eventbus.doors.pppp.group import GroupState
from zbus.eventbus.doors.pppp.positions import PpppPositions
from zbus.eventbus.doors.wiring import DoorWiring

log = logging.getLogger(__name__)

POLL_MS = 100  # how often the thread looks at its stop flag when idle
RETRY_MS = 1  # while a subscriber's queue is full, how soon the door tries again
READS_PER_WAKE = 1000  # messages taken from one socket before the others get a turn
SYNC_PAGE_BYTES = 8 * 1024 * 1024  # a SYNC page read from the log holds this at most
PERSIST_EVERY = 0.05  # seconds between group commits of positions
MAX_CUSTOMS_IN_FLIGHT = 1000  # ZB-PUB batches of CUSTOMs sent and not answered
CONFIRM_TIMEOUT = 30.0  # seconds the collector has to answer a batch of CUSTOMs
CUSTOM_TOPIC = "/zbus/pppp/custom/"
_SEND = zmq.backend.Socket.send  # the compiled send, as zbus.common.wire uses it
_MORE = int(zmq.SNDMORE | zmq.NOBLOCK)
_LAST = int(zmq.NOBLOCK)
_RECV = zmq.backend.Socket.recv
_GET = zmq.backend.Socket.get
_RCVMORE = int(zmq.RCVMORE)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
_SRCFD = int(zmq.SRCFD)


def payload_of(event: Event) -> Payload:
    """The PUBLISH payload frames of a logged event."""
    return payload_frames(
        event.seq, event.topic.encode("utf-8"), event.uuid, event.ts, event.producer, event.data
    )


T = TypeVar("T")


class PpppDoor(SocketThread):
    """Serves PPPP on one ROUTER over the bus's events."""

    def __init__(self, wiring: DoorWiring) -> None:
        super().__init__("eventbus-pppp", wiring.ctx, wiring.clock)
        s = self.settings = wiring.settings
        self.wiring = wiring
        self.log_path = wiring.log_path
        self.secure = wiring.secure
        self.hold = wiring.hold
        # The door follows the stream's heartbeats too: a heartbeat past what came says
        # the stream dropped events, and the log is read from where the door stands.
        self.link: LogLink[Outgoing] = LogLink(
            wiring,
            name="pppp",
            max_batches=MAX_CUSTOMS_IN_FLIGHT,
            timeout=CONFIRM_TIMEOUT,
            heartbeats=True,
        )
        self.times = Times(s.pppp_first_idle, s.pppp_idle, s.pppp_misses, s.pppp_grace)
        self.limits = Limits(
            window=s.pppp_window,
            peer_bytes=s.pppp_peer_bytes,
            cache_bytes=s.pppp_cache_bytes,
            max_channels=s.pppp_max_channels,
            max_subscribers=s.pppp_max_subscribers,
            max_custom_bytes=s.max_event_bytes,
        )
        self.tick_every = max(0.001, min(0.05, s.pppp_first_idle / 4))
        self.endpoint = ""
        self.blocked_sends = 0
        self.sends = 0
        self._waiting_out = True
        self.unreachable = 0
        self.read_failures = 0
        self._closed: dict[int, int] = {}  # file descriptor -> times it was closed
        self.customs_published = 0
        self.customs_failed = 0
        self._limiter = LogLimiter()
        self._pack = msgpack.Packer(use_bin_type=True).pack
        self._next_tick = 0.0
        self._next_persist = 0.0
        self.wake_endpoint = f"inproc://zbus-pppp-wake-{id(self):x}"
        self._calls: queue.SimpleQueue[
            tuple[Callable[[PpppDoor], Any], concurrent.futures.Future[Any]]
        ] = queue.SimpleQueue()
        # The other end of the wake, used by the threads that submit calls, one at a time.
        self._waker: zmq.Socket[Any] | None = None
        self._waker_lock = threading.Lock()
        self._stopped = False
        #: A replica's part in its group's PPPP state (None: a bus of one, ADR 0010).
        self.group: GroupState | None = None

    @property
    def serving(self) -> bool:
        """Whether this door serves PPPP: always on a bus of one; on a replica, while
        its replica leads (ADR 0010)."""
        return self.group is None or self.group.serving != 0

    # ------------------------------------------------------------------ admin
    def submit(self, fn: Callable[[PpppDoor], T]) -> concurrent.futures.Future[T]:
        """Run ``fn(door)`` on the door's thread, which owns the core, and answer its
        result (or its exception) in the future; from any thread. A door that has stopped
        answers a RuntimeError; one that is stuck does not answer."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._waker_lock:
            if self._stopped:
                future.set_exception(RuntimeError("the PPPP door has stopped"))
                return future
            self._calls.put((fn, future))
            if self._waker is not None:
                with contextlib.suppress(zmq.Again):  # a wake is pending already
                    self._waker.send(b"", zmq.NOBLOCK)
        return future

    def _run_calls(self) -> None:
        calls = self._calls
        while not calls.empty():
            fn, future = calls.get_nowait()
            if not future.set_running_or_notify_cancel():
                continue  # the caller gave up
            try:
                future.set_result(fn(self))
            except Exception as exc:  # an admin error goes back to the admin caller
                future.set_exception(exc)

    def _stop_calls(self) -> None:
        with self._waker_lock:
            self._stopped = True
            if self._waker is not None:
                self._waker.close(linger=0)
                self._waker = None
        while not self._calls.empty():
            _, future = self._calls.get_nowait()
            if future.set_running_or_notify_cancel():
                future.set_exception(RuntimeError("the PPPP door has stopped"))

    # ------------------------------------------------------------------ sockets
    def open(self) -> None:
        s = self.settings
        self.reader: EventLogReader = self.wiring.open_reader()
        if self.wiring.leading is not None:
            self.group = GroupState(
                self.log_path.parent / "pppp-group.sqlite",
                fsync=s.fsync,
                leading=self.wiring.leading,
                max_event_bytes=s.max_event_bytes,
            )
            self.core = self._new_core()
            hold = self.group.new_hold(None)  # the first call always answers
            if hold is not None:
                self.hold(hold)
        else:
            self.positions = PpppPositions(self.log_path.parent / "pppp.sqlite", fsync=s.fsync)
            self.core = self._new_core()
            self._load(self.positions)
        largest_in = max(s.max_event_bytes + 64 * 1024, 16 * s.pppp_window + 8 * 1024)
        self.router = self.ctx.socket(zmq.ROUTER)
        self._sockets = [self.router]
        self.router.linger = 0
        self.secure(self.router)
        # The core bounds the queue in bytes; in messages it holds a window and a margin.
        self.router.sndhwm = self.limits.queue_messages
        self.router.rcvhwm = max(1, hwm_for(s.pppp_peer_bytes, largest_in))
        self.router.maxmsgsize = largest_in
        self.router.router_mandatory = True  # a full or gone peer raises: nothing lost
        self.router.router_handover = True  # a returning subscriber takes its identity over
        # The ROUTER's disconnections, read as they come: ZeroMQ's I/O thread waits
        # while the monitor's queue is full.
        self.monitor = self.router.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        self.monitor.linger = 0
        self._sockets.append(self.monitor)
        self.router.bind(f"tcp://{s.host}:{s.pppp_port or 0}")
        self.endpoint = self.router.getsockopt_string(zmq.LAST_ENDPOINT)
        self._sockets += self.link.open()
        self.wake = self.ctx.socket(zmq.PULL)
        self.wake.linger = 0
        self._sockets.append(self.wake)
        self.wake.bind(self.wake_endpoint)
        waker = self.ctx.socket(zmq.PUSH)
        waker.linger = 0
        waker.connect(self.wake_endpoint)
        with self._waker_lock:
            self._waker = waker

    def _new_core(self) -> PpppCore:
        core = PpppCore(self.times, self.limits)
        core.replicated = self.group is not None
        return core

    def _load(self, store: PpppPositions) -> None:
        """The core takes back what ``store`` holds, as after a restart."""
        channels = store.channels()
        now = self.clock.monotonic()
        taken = min((seq for _, _, seq in channels), default=0)
        self.core.load(taken, channels, store.positions(), now)
        self._persist(now)  # what load dropped, and the hold from the checkpoints

    def close(self) -> None:
        self._stop_calls()
        if getattr(self, "monitor", None) is not None:
            # ZeroMQ's I/O thread blocks on a full monitor: empty it, then stop it.
            self._read_monitor()
            self.router.close(linger=0)
            self._read_monitor()
        self.link.close()
        for sock in getattr(self, "_sockets", []):
            sock.close(linger=0)
        for name in ("reader", "positions", "group"):
            thing = getattr(self, name, None)
            if thing is not None:
                thing.close()

    # --------------------------------------------------------------------- loop
    def loop(self) -> None:
        poller = zmq.Poller()
        for sock in self._sockets:
            poller.register(sock, zmq.POLLIN)
        clock, core, router, stream = self.clock, self.core, self.router, self.link.stream
        watching_out = False
        while not self.halted:
            # Every ready subscriber's queue is full: wake when the ROUTER can take a
            # message again (POLLOUT, with ROUTER_MANDATORY: some peer's queue has room),
            # unless that did not help last time (another peer had the room), then retry
            # after RETRY_MS.
            want_out = self._waiting_out and bool(core.ready) and not core.has_work
            if want_out != watching_out:
                poller.modify(router, zmq.POLLIN | (zmq.POLLOUT if want_out else 0))
                watching_out = want_out
            for sock, events in poller.poll(self._timeout_ms(clock.monotonic(), want_out)):
                if sock is router:
                    if events & zmq.POLLIN:
                        self._read_subscribers()
                elif sock is stream:
                    self._read_stream()
                elif sock is self.monitor:
                    self._read_monitor()
                elif sock is self.wake:
                    self._drain_wake()
                else:
                    self._read_confirms()
            self._run_calls()
            now = clock.monotonic()
            if self.group is not None and now >= self._next_tick:
                core = self._group_turn(now)
            if now >= self._next_tick:
                deadline = core.next_deadline()
                if deadline is None or now >= deadline:
                    core.tick(now)
                self._next_tick = now + self.tick_every
            sent = self.sends
            core.pump(now)
            sends, reads, customs = core.take()
            if sends:
                self._send(sends)
            for read in reads:
                self._read(read)
            self._waiting_out = self.sends != sent or not watching_out
            if customs:
                self._publish_customs(customs, now)
            expired = self._state_answered(self.link.expired(now), True)
            if expired:
                self.customs_failed += len(expired)
            if now >= self._next_persist:
                self._persist(now)
            self._log_refusals(now)
        self._persist(clock.monotonic())

    def _timeout_ms(self, now: float, waiting_out: bool = False) -> int:
        core = self.core
        if core.behind or core.has_work:
            return 0
        longest = (POLL_MS if waiting_out else RETRY_MS) if core.ready else POLL_MS
        deadline = core.next_deadline()
        if deadline is not None:
            longest = min(longest, max(0, int((max(deadline, self._next_tick) - now) * 1000) + 1))
        return longest

    def _send(self, batches: list[Batch]) -> None:
        """Each batch's messages in order, up to the first ZeroMQ refuses; the rest go
        back to the core. send_frames' work inlined: this runs once per delivery."""
        router, core = self.router, self.core
        for batch in batches:
            identity, messages = batch.identity, batch.messages
            taken = 0
            try:
                for taken, frames in enumerate(messages):  # noqa: B007 (read after a refusal)
                    _SEND(router, identity, _MORE)
                    for frame in frames[:-1]:
                        _SEND(router, frame, _MORE)
                    _SEND(router, frames[-1], _LAST)
                taken = len(messages)
            except zmq.Again:
                self.blocked_sends += 1
                core.unsent(batch, taken)
            except zmq.ZMQError as exc:
                if exc.errno != zmq.EHOSTUNREACH:
                    raise
                self.unreachable += 1  # gone: its silence will disconnect it
                core.unsent(batch, taken)
                core.gone(identity)
            self.sends += taken

    def _drain_wake(self) -> None:
        while True:
            try:
                self.wake.recv(zmq.NOBLOCK)
            except zmq.Again:
                return

    def _read_subscribers(self) -> None:
        if not self.serving:
            self._drop_subscribers()
            return
        router, receive, clock, closed = self.router, self.core.receive, self.clock, self._closed
        for _ in range(READS_PER_WAKE):
            try:
                first = _RECV(router, _LAST, copy=False)
            except zmq.Again:
                return
            frames = []
            while _GET(router, _RCVMORE):
                frames.append(_RECV(router, _LAST))
            fd = first.get(_SRCFD)
            if int(_GET(self.monitor, _EVENTS)) & _POLLIN:
                self._read_monitor()  # a close of this descriptor comes before its reuse
            receive(first.bytes, frames, clock.monotonic(), (fd, closed.get(fd, 0)))

    def _read_monitor(self) -> None:
        while True:
            try:
                event = recv_monitor_message(self.monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            if event["event"] == zmq.EVENT_DISCONNECTED:
                fd = int(event["value"])
                self._closed[fd] = self._closed.get(fd, 0) + 1

    # ------------------------------------------------------------------ events
    def _read_stream(self) -> None:
        if self.group is not None:
            self.group.stream(self.link.raw(READS_PER_WAKE), self.core if self.serving else None)
            return
        # The core finds the gaps itself, from the global sequences: ``missed`` is the
        # link's count of the same.
        core = self.core
        for first, rows, _ in self.link.batches(READS_PER_WAKE, _always):
            if rows:
                core.add_events(first, rows)  # past a gap, or while catching up: the log's
            else:  # a heartbeat: the log's last sequence is the one before
                core.log_at(first - 1)

    # ------------------------------------------------------------------ reads
    def _read(self, read: Read) -> None:
        """Make a read of the log the core asked for, and hand it the answer."""
        core = self.core
        if isinstance(read, MessagesRead):
            try:
                events = self._numbered(read.channel, read.after_seq, read.skip + read.count)
            except StoreError as exc:
                self._read_failed(exc)
                events = []  # as if the log no longer had them
            core.on_messages(read, [(e.seq, payload_of(e)) for e in events[read.skip :]])
        elif isinstance(read, CatchUpRead):
            try:
                page = self.reader.log_page(
                    read.channels, read.after_seq, read.limit, read.max_bytes
                )
            except StoreError as exc:
                log.error("pppp door: catching up from the log failed", extra={"error": str(exc)})
                core.read_failed(read)
                return
            rows = ((e.seq, (e.topic, e.producer, e.ts, e.uuid, e.data)) for e in page.events)
            last = page.sequence if page.next is None or not read.channels else None
            core.on_log_page(read, rows, last)
        else:
            try:
                snapshot = self.reader.snapshot_page(
                    (read.channel,), 0, read.after, read.limit, SYNC_PAGE_BYTES
                )
            except StoreError as exc:
                self._read_failed(exc)
                core.on_sync_page(read, [], read.after)  # read again
                return
            items = [
                payload_of(e)
                for e in snapshot.events
                if e.seq <= read.through and not e.topic.startswith(STATE_TOPIC)
            ]
            core.on_sync_page(read, items, snapshot.next)

    def _read_failed(self, exc: StoreError) -> None:
        self.read_failures += 1
        log.error("pppp door: log read failed", extra={"error": str(exc)})

    # ------------------------------------------------------------------ customs
    def _publish_customs(self, customs: list[tuple[bytes, tuple[bytes, ...]]], now: float) -> None:
        pack, items = self._pack, []
        for identity, payload in customs:
            name = identity_text(identity)
            producer = ("pppp:" + name).encode()[:MAX_PRODUCER_BYTES].decode("utf-8", "ignore")
            items.append(Outgoing(CUSTOM_TOPIC + name, producer, pack(list(payload))))
        for chunk, _ in self.link.publish(items, now):
            self.customs_failed += len(chunk)  # too many in flight, or the collector is full

    def _read_confirms(self) -> None:
        for answered, refusal in self.link.answers():
            items = self._state_answered(answered, refusal is not None)
            if not items:
                continue
            if refusal is None:
                self.customs_published += len(items)
            else:
                self.customs_failed += len(items)
                log.warning("pppp door: a CUSTOM was not stored", extra={"error": refusal})

    # ------------------------------------------------------------------ storing
    def _persist(self, now: float) -> None:
        """One group commit of what the core hands out, and the retention hold moved:
        down before the write (a new channel's checkpoint needs it), up after it."""
        self._next_persist = now + PERSIST_EVERY
        if self.group is not None:
            self._persist_group(self.group, now)
            return
        changes = self.core.take_changes()
        if changes.hold_first:
            self.hold(changes.hold)
        if changes:
            try:
                self.positions.write(changes.positions, changes.checkpoints)
            except StoreError as exc:
                log.error("pppp door: storing positions failed", extra={"error": str(exc)})
                self.core.restore(changes)
                return
        if changes.hold_moves and not changes.hold_first:
            self.hold(changes.hold)

    # ------------------------------------------------------------------ group
    def _group_turn(self, now: float) -> PpppCore:
        """A replica's door: catch up with the log's state events, and start or stop
        serving as its replica becomes leader or stops leading (ADR 0010)."""
        group = self.group
        assert group is not None
        if group.behind:
            group.catch_up(self.reader)
        change = group.role_change()
        if change == "demote":
            log.warning("pppp door: this replica no longer leads; subscribers go elsewhere")
            self.core = self._new_core()
        elif change == "promote":
            group.write(None)  # everything folded in is in the file before the load
            self.core = self._new_core()
            self._load(group.store)
            log.info("pppp door: serving as the group's leader", extra={"epoch": group.serving})
        return self.core

    def _drop_subscribers(self) -> None:
        """A door that does not serve reads what subscribers send and answers nothing:
        they move on to another door when it stays silent."""
        group = self.group
        assert group is not None
        for _ in range(READS_PER_WAKE):
            try:
                self.router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            group.not_leader += 1

    def _numbered(self, channel: str, after_seq: int, count: int) -> list[Event]:
        """The first ``count`` events of ``channel`` above ``after_seq`` that it numbers:
        not those under the doors' reserved :data:`STATE_TOPIC`, which no channel
        numbers (read past, for a channel whose prefix takes them in)."""
        if not (STATE_TOPIC.startswith(channel) or channel.startswith(STATE_TOPIC)):
            return self.reader.replay((channel,), after_seq, count)
        out: list[Event] = []
        while len(out) < count:
            page = self.reader.replay((channel,), after_seq, count - len(out))
            if not page:
                break
            out += [e for e in page if not e.topic.startswith(STATE_TOPIC)]
            after_seq = page[-1].seq
        return out

    def _state_answered(self, items: Sequence[Outgoing], refused: bool) -> list[Outgoing]:
        """Hand the answers to state events to the group; the rest (CUSTOMs) back."""
        group = self.group
        if group is None or not items:
            return list(items)
        state = sum(1 for i in items if i.topic == STATE_TOPIC)
        if state:
            group.answered(state, refused, self.core)
        return [i for i in items if i.topic != STATE_TOPIC]

    def _persist_group(self, group: GroupState, now: float) -> None:
        """Fold what came into the file (settling the core's channels it names), then
        send the core's changes into the log, and move the retention hold."""
        group.write(self.core if self.serving else None)
        if self.serving:
            taken = group.state_events(self.core)
            if taken is not None:
                changes, events = taken
                refused = self.link.publish(events, now)
                group.sent(changes, len(events))
                if refused:
                    group.answered(sum(len(chunk) for chunk, _ in refused), True, self.core)
        hold = group.new_hold(self.core if self.serving else None)
        if hold is not None:
            self.hold(hold)

    def _log_refusals(self, now: float) -> None:
        log_refusals(self.core.refusals, self._limiter, log, "pppp message dropped", now)


def _always() -> bool:
    return True


__all__ = ["PpppDoor", "payload_of"]
