"""The sans-I/O core of a PPPP subscriber (seed 003, ADR 0006): exactly once, in order.

No sockets and no clock. The client feeds :class:`SubscriberCore` what the bus sends
(:meth:`~SubscriberCore.on_frames`), tells it what the application has finished with
(:meth:`~SubscriberCore.done`) and calls :meth:`~SubscriberCore.tick` at
:meth:`~SubscriberCore.deadline`; every call answers :class:`Actions`: frames to send and
messages to hand to the application.

The rules, per channel (a topic prefix; see :mod:`zbus.eventbus.core.pppp_channel` for
its positions):

- **In order, exactly once.** A message one above ``position`` is delivered, then every
  held one that follows it. One at or below ``position``, or already held, is a
  duplicate: dropped (counted) and answered with an ACK, since the spec wants every
  message ACKed, duplicates included. One further up is held (out of order) and leaves
  a hole.
- **Bounded.** What is held and not yet done (delivered or out of order) is bounded in
  messages and bytes (``max_held``, ``max_held_bytes``); a message beyond that is
  dropped, as if lost, and comes again: the ACK below it implicitly NACKs it, and a
  channel that has dropped one subscribes again once its holes are filled (the bus
  resends from its ACK).
- **ACK only what the application has done.** A message counts as done when the
  application has come back for the next one (or says so): then an ACK names it. An
  ACK goes out once ``ack_every`` more messages are done, or ``first_idle`` after the
  first message it owes arrived (the first-idle rule), whichever comes first; never
  above what the bus sent in this conversation.
- **NACK the holes.** Once the application has done everything before the first hole,
  an ACK/NACK names the highest message held and the holes below it, again every
  ``first_idle`` while holes remain. (That ACK also names the held messages after a
  hole; the bus's position for the subscriber stays below the first hole, so a
  subscriber that restarts is sent them again.)
- **SYNC** (a subscriber the bus does not know): PUBLISH with sequence 0. The items are
  held until the end marker ``(h, count)``; with every item they are delivered,
  flagged ``sync``, the channel's position becomes ``h`` and, once the application has
  done them, ``h`` is ACKed. A count that does not match sends SUBSCRIBE again (a
  fresh SYNC). A SYNC that brings nothing new (``h`` at or below the position, say a
  position loaded from a store) is dropped as a duplicate. Live messages that arrive
  after items and before the end marker are held.
- **Resumed** (a subscriber the bus knows, back within the grace period): no SYNC, its
  backlog from the bus's ACK position. A subscriber that has no position of its own
  (no store) holds what comes for ``first_idle`` and takes the lowest sequence - 1 as
  its position: the bus sends a SYNC before anything else to a subscriber it does not
  know, and the backlog from its ACK right after the SUBSCRIBE (a resend of the last
  message sent, which may come first, is higher).
- **Heartbeats**: after ``first_idle`` of our silence the first, then every ``idle``.
- **A silent bus** (nothing heard for ``misses x idle``): SUBSCRIBE again to every
  channel (the bus restarted, or forgot us); counted in ``silences``. A client given
  several doors (the replicas of a group) sends these SUBSCRIBEs to the next door, after
  :meth:`~SubscriberCore.other_door`; a door of several that it has not heard from yet
  is silent after ``misses x first_idle`` already (:meth:`~SubscriberCore.probe_door`:
  a door that serves speaks within first idle, a replica's that does not never does).
  A channel waiting for its SYNC that hears
  no item for ``misses x first_idle`` (doubling up to ``misses x idle``) subscribes
  again, and so does one that heard nothing at all since its SUBSCRIBE for
  ``misses x idle`` (its SUBSCRIBE may have been lost).
- **Another door.** A position is worth something on another door only where that
  door numbers the channel as the last one did. After :meth:`~SubscriberCore.other_door`
  each channel checks that with the bus sequences (the same on every replica): a
  duplicate newer than the message at its position, or a next message not newer than
  it, means the numbering differs, and the subscriber fails
  (:attr:`~SubscriberCore.failure`) rather than drop or repeat events. The first next
  message that is newer, or a SYNC taken (the channel then follows the new door's
  numbering), ends the check. A channel whose position came from a store or a SYNC
  (no live message since) cannot check.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from zbus.common.protocols import pppp
from zbus.common.protocols.errors import ProtocolError
from zbus.common.protocols.pppp_event import EventPayload, SyncEnd, decode_payload
from zbus.eventbus.core.pppp_channel import ChannelState, PPPPMessage, make_message

_RESERVED = frozenset(b"\x01\x02\x03\x04")


def _fast_event(frames: list[bytes]) -> PPPPMessage | None:
    """An event's PUBLISH read without the codecs' generality (the hot path), or None
    for anything else: the codecs then read it, and say what is wrong if it is."""
    if len(frames) != 8:
        return None
    channel, seq, topic, uuid, ts, producer, data, bus_seq = frames
    if (
        len(seq) != 8
        or len(bus_seq) != 8
        or len(uuid) != 36
        or (channel and channel[0] in _RESERVED)
    ):
        return None
    try:
        sequence = int.from_bytes(seq, "big")
        return make_message(
            channel.decode(), sequence, topic.decode(), uuid.decode("ascii"), ts.decode(),
            producer.decode(), data, int.from_bytes(bus_seq, "big"), False, sequence,
        )  # fmt: skip
    except UnicodeDecodeError:
        return None


__all__ = [
    "DEFAULTS",
    "NOTHING",
    "Actions",
    "SubscriberCore",
    "SubscriberSettings",
    "check_channels",
]

MAX_CHANNELS = 64  # the bus's default ZBUS_PPPP_MAX_CHANNELS per subscriber
_HEARTBEAT = pppp.encode(pppp.Heartbeat())
_U64 = (1 << 64) - 1


class Actions(NamedTuple):
    """What the client must do after feeding the core one input."""

    send: tuple[list[bytes], ...] = ()  # frame lists to send, in order
    deliver: tuple[PPPPMessage, ...] = ()  # messages for the application, in order
    problem: str | None = None  # something the bus sent that was wrong: log it


NOTHING = Actions()


class SubscriberSettings(NamedTuple):
    """The subscriber's agreed times and its bounds (ADR 0006 defaults)."""

    ack_every: int = 100
    first_idle: float = 0.1
    idle: float = 1.0
    misses: int = 4
    max_held: int = 10_000
    max_held_bytes: int = 64 * 1024 * 1024
    max_sync_bytes: int = 256 * 1024 * 1024

    def check(self) -> SubscriberSettings:
        """Raises ValueError for a value out of its range."""
        if not 1 <= self.ack_every <= 1_000_000:
            raise ValueError(f"ack_every must be 1 to 1,000,000, got {self.ack_every}")
        if not 0.001 <= self.first_idle <= self.idle <= 3600:
            raise ValueError(
                "first_idle and idle must satisfy 0.001 <= first_idle <= idle <= 3600 s, "
                f"got {self.first_idle} and {self.idle}"
            )
        if not 2 <= self.misses <= 10:
            raise ValueError(f"misses must be 2 to 10, got {self.misses}")
        if self.max_held < 1 or self.max_held_bytes < 1 or self.max_sync_bytes < 1:
            raise ValueError("max_held, max_held_bytes and max_sync_bytes must be positive")
        return self


DEFAULTS = SubscriberSettings()


def check_channels(channels: Iterable[str] | str) -> tuple[str, ...]:
    """Channels as a subscriber takes them: distinct, encodable, at most 64.

    Raises:
        TypeError: a channel that is not text.
        ValueError: none, too many, or one the wire cannot carry.
    """
    if isinstance(channels, str):
        channels = (channels,)
    out = tuple(dict.fromkeys(channels))
    if not out:
        raise ValueError("at least one channel is needed ('' is every topic)")
    if len(out) > MAX_CHANNELS:
        raise ValueError(f"at most {MAX_CHANNELS} channels, got {len(out)}")
    for channel in out:
        if not isinstance(channel, str):
            raise TypeError(f"a channel must be text, got {channel!r}")
        try:
            frame = pppp.encode(pppp.Subscribe(channel))[0]
        except ProtocolError as exc:
            raise ValueError(f"channel {channel!r}: {exc}") from None
        if len(frame) > 1025:
            raise ValueError(f"channel {channel[:40]!r}...: over 1,024 bytes")
    return out


class SubscriberCore:
    """A PPPP subscriber's state: see the module docstring for the rules.

    Args:
        channels: the channels (topic prefixes) to subscribe to.
        settings: the agreed times and the bounds.
        positions: where the application is, per channel (from a position store):
            messages at or below are duplicates, and a SYNC that brings nothing newer
            is dropped.
    """

    def __init__(
        self,
        channels: Iterable[str] | str,
        settings: SubscriberSettings = DEFAULTS,
        positions: Mapping[str, int] | None = None,
    ) -> None:
        self.settings = settings.check()
        positions = positions or {}
        for channel, pos in positions.items():
            if type(pos) is not int or not 0 <= pos <= _U64:
                raise ValueError(f"position of {channel!r} must be 0..2**64-1, got {pos!r}")
        self._channels = {
            ch: ChannelState(ch, positions.get(ch) or None) for ch in check_channels(channels)
        }
        self.held = 0  # messages delivered and not done, or held out of order
        self.held_bytes = 0
        self._sent_at = 0.0
        self._heartbeat_next = False  # the last thing sent was a heartbeat
        self._heard_at = 0.0
        # False on a door not heard from yet, among several: it must speak within
        # ``misses x first_idle`` (a door that serves sends within first idle).
        self._door_heard = True
        self._resubscribe_channels: set[str] = set()  # dropped one: subscribe when filled
        #: A time at or before which :meth:`tick` has something to do (a hint kept up to
        #: date as timers are set, so that the client need not ask :meth:`deadline`).
        self.wake = 0.0
        self.failure: str | None = None  # a condition the core cannot recover from
        # Counters.
        self.delivered = 0
        self.duplicates = 0
        self.out_of_order = 0
        self.overflows = 0
        self.acks = 0
        self.nacks = 0
        self.syncs = 0
        self.sync_retries = 0
        self.resubscribes = 0
        self.silences = 0  # SUBSCRIBEs of every channel because the bus went silent
        self.heartbeats = 0
        self.malformed = 0
        self.unexpected = 0

    @property
    def channels(self) -> tuple[str, ...]:
        return tuple(self._channels)

    def positions(self) -> dict[str, int]:
        """Per channel, the position the application is done with (0: none yet)."""
        return {ch: state.done for ch, state in self._channels.items()}

    def channel(self, name: str) -> ChannelState:
        return self._channels[name]

    # ------------------------------------------------------------------ inputs
    def start(self, now: float) -> Actions:
        """SUBSCRIBE to every channel."""
        self._heard_at = now
        send = tuple(self._subscribe(st, now) for st in self._channels.values())
        self.wake = self.deadline()
        return Actions(send=send)

    def on_frames(self, frames: list[bytes], now: float) -> Actions:
        """What the bus sent: a PUBLISH or a HEARTBEAT (any traffic counts as one)."""
        msg = _fast_event(frames)
        if msg is None:
            return self._on_frames_checked(frames, now)
        self._heard_at = now
        self._door_heard = True
        st = self._channels.get(msg[0])
        if st is None:
            self.unexpected += 1
            return Actions(problem=f"a PUBLISH of channel {msg[0]!r}, not subscribed")
        st.heard = True
        if msg[1] == 0:
            return self._sync_item(st, msg._replace(sync=True, position=0), now)
        return self._publish(st, msg, now)

    def _on_frames_checked(self, frames: list[bytes], now: float) -> Actions:
        """The codecs' path: every check, and the error that says what is wrong."""
        try:
            cmd = pppp.decode_from_publisher(frames)
            self._heard_at = now
            self._door_heard = True
            if type(cmd) is pppp.Heartbeat:
                return NOTHING
            assert isinstance(cmd, pppp.Publish)
            payload = decode_payload(cmd)
        except ProtocolError as exc:
            self.malformed += 1
            return Actions(problem=f"malformed message from the bus dropped: {exc}")
        st = self._channels.get(cmd.channel)
        if st is None:
            self.unexpected += 1
            return Actions(problem=f"a PUBLISH of channel {cmd.channel!r}, not subscribed")
        st.heard = True
        if cmd.sequence == 0 and type(payload) is SyncEnd:
            return self._sync_end(st, payload, now)
        if type(payload) is not EventPayload:
            self.malformed += 1
            return Actions(problem=f"a SYNC end with sequence {cmd.sequence} dropped")
        sync = cmd.sequence == 0
        msg = make_message(
            st.channel, cmd.sequence, payload.topic, payload.uuid, payload.timestamp,
            payload.producer, payload.data, payload.bus_sequence, sync, cmd.sequence,
        )  # fmt: skip
        if sync:
            return self._sync_item(st, msg, now)
        return self._publish(st, msg, now)

    def done(self, message: PPPPMessage, now: float) -> Actions:
        """The application has finished with ``message``: it may be ACKed."""
        self.held -= 1
        self.held_bytes -= message.size
        st = self._channels.get(message.channel)
        if st is None or message.position <= st.done:
            return NOTHING
        st.done = message.position
        first_idle = self.settings.first_idle
        if st.owed_at is None:
            st.owed_at = now  # due within first_idle: nothing was owed a moment ago
            self._wake_at(now + first_idle)
        if st.pending and st.done == st.position:
            # Caught up with the first hole: NACK it (at most every first_idle).
            if st.nack_at is None or now >= st.nack_at + first_idle:
                return Actions(send=(self._ack(st, now),))
            self._wake_at(st.nack_at + first_idle)
        if st.ack_target() - st.acked >= self.settings.ack_every:
            return Actions(send=(self._ack(st, now),))
        return NOTHING

    def flush(self, now: float) -> Actions:
        """ACK what is done and not ACKed yet, on every channel (before closing)."""
        send = tuple(
            self._ack(st, now) for st in self._channels.values() if st.ack_target() > st.acked
        )
        return Actions(send=send) if send else NOTHING

    def custom(self, payload: Iterable[bytes], now: float) -> list[bytes]:
        """The frames of a CUSTOM (traffic: it stands in for a heartbeat)."""
        frames = pppp.encode(pppp.Custom(tuple(payload)))
        self._sent(now)
        return frames

    def other_door(self) -> None:
        """The next SUBSCRIBEs go to another door (a replica): check, per channel, that its
        numbering agrees with the one the position was taken in (see the module's rules)."""
        for st in self._channels.values():
            st.guard = st.bus != 0 and st.position is not None
        self.probe_door()

    def probe_door(self) -> None:
        """The door talked to now is one of several and not heard from yet: silent for
        ``misses x first_idle`` (a door that serves speaks within first idle; a
        replica's door that does not serve never does), it counts as gone."""
        self._door_heard = False

    def _silent_after(self) -> float:
        s = self.settings
        return s.misses * (s.idle if self._door_heard else s.first_idle)

    def _numbering_differs(self, st: ChannelState, seq: int, bus_seq: int) -> Actions:
        st.guard = False
        self.failure = (
            f"channel {st.channel!r} is numbered differently on this door: at its "
            f"sequence {seq} it has the bus's event {bus_seq}, and position {st.position} "
            f"was the bus's event {st.bus}; the position does not carry over"
        )
        return Actions(problem=self.failure)

    def tick(self, now: float) -> Actions:
        """What the time calls for: ACKs and NACKs due, SUBSCRIBEs again, a heartbeat."""
        s = self.settings
        send: list[list[bytes]] = []
        if now >= self._heard_at + self._silent_after():
            # The bus is silent: it restarted, or dropped us. A new conversation each.
            self._heard_at = now
            self.resubscribes += 1
            self.silences += 1
            send.extend(self._subscribe(st, now) for st in self._channels.values())
        deliver: list[PPPPMessage] = []
        for st in self._channels.values():
            if st.adopt_at is not None and now >= st.adopt_at + s.first_idle:
                deliver.extend(self._adopt(st, now))
            frames = self._channel_due(st, now)
            if frames is not None:
                send.append(frames)
        if not send and now >= self._heartbeat_due():
            self.heartbeats += 1
            self._sent(now)
            self._heartbeat_next = True
            send.append(_HEARTBEAT)
        self.wake = self.deadline()
        if deliver:
            return Actions(send=tuple(send), deliver=tuple(deliver))
        return Actions(send=tuple(send)) if send else NOTHING

    def _adopt(self, st: ChannelState, now: float) -> list[PPPPMessage]:
        """Resumed without a SYNC: the position is just below the lowest message held."""
        st.adopt_at = None
        if st.position is not None or st.sync_items or not st.pending:
            return []
        st.position = min(st.pending) - 1
        st.done = max(st.done, st.position)
        return self._drain(st, now)

    def deadline(self) -> float:
        """When :meth:`tick` has something to do, at the latest."""
        s = self.settings
        out = min(self._heartbeat_due(), self._heard_at + self._silent_after())
        for st in self._channels.values():
            if st.owed_at is not None:
                out = min(out, st.owed_at + s.first_idle)
            if st.nack_at is not None and st.done == st.position:
                out = min(out, st.nack_at + s.first_idle)
            if st.position is None or not st.heard:
                out = min(out, st.sync_heard_at + st.retry_wait)
            if st.adopt_at is not None:
                out = min(out, st.adopt_at + s.first_idle)
        return out

    # ------------------------------------------------------------- the rules
    def _publish(self, st: ChannelState, msg: PPPPMessage, now: float) -> Actions:
        seq = msg[1]
        st.sent_max = max(st.sent_max, seq)
        st.received_max = max(st.received_max, seq)
        if st.owed_at is None:
            st.owed_at = now
            self._wake_at(now + self.settings.first_idle)
        position = st.position
        if position is None and not st.sync_items and st.adopt_at is None:
            # A PUBLISH before any SYNC item: the bus knows this subscriber (a SYNC would
            # come first) and resumes it from its ACK. The lowest message of the first
            # first_idle is the one after it (a resend of the last message sent before
            # the SUBSCRIBE was read may come first).
            st.adopt_at = st.sync_heard_at = now
            self._wake_at(now + self.settings.first_idle)
        if (position is not None and seq <= position) or seq in st.pending:
            if st.guard and msg[7] > st.bus:
                return self._numbering_differs(st, seq, msg[7])
            self.duplicates += 1
            st.dup_owed = True
            return NOTHING
        size = msg.size
        if (
            self.held >= self.settings.max_held
            or self.held_bytes + size > self.settings.max_held_bytes
        ):
            self.overflows += 1
            self._resubscribe_channels.add(st.channel)
            return NOTHING
        self.held += 1
        self.held_bytes += size
        if position is not None and seq == position + 1:
            if st.guard:
                if msg[7] <= st.bus:
                    self.held -= 1
                    self.held_bytes -= size
                    return self._numbering_differs(st, seq, msg[7])
                st.guard = False
            st.position = seq
            st.bus = msg[7]
            self.delivered += 1
            if not st.pending:
                return Actions(deliver=(msg,))
            return Actions(deliver=(msg, *self._drain(st, now)))
        self.out_of_order += 1
        st.pending[seq] = msg
        if st.nack_at is None and position is not None:
            self._new_hole(st, now)
        return NOTHING

    def _new_hole(self, st: ChannelState, now: float) -> None:
        """NACK the hole at once when the application has caught up with it."""
        st.nack_at = now - self.settings.first_idle
        if st.done == st.position:
            self._wake_at(now)

    def _wake_at(self, when: float) -> None:
        self.wake = min(self.wake, when)

    def _drain(self, st: ChannelState, now: float) -> list[PPPPMessage]:
        """The held messages that now follow ``position``, in order; drops those below."""
        out: list[PPPPMessage] = []
        pending = st.pending
        assert st.position is not None
        for seq in sorted(pending):
            if seq <= st.position:
                msg = pending.pop(seq)
                self.held -= 1
                self.held_bytes -= msg.size
                self.duplicates += 1
            elif seq == st.position + 1:
                msg = pending[seq]
                if st.guard:
                    if msg[7] <= st.bus:
                        self._numbering_differs(st, msg[1], msg[7])
                        break
                    st.guard = False
                out.append(pending.pop(seq))
                st.position = seq
                st.bus = msg[7]
            else:
                break
        self.delivered += len(out)
        if not pending:
            st.nack_at = None
        elif st.nack_at is None:
            self._new_hole(st, now)
        return out

    def _sync_item(self, st: ChannelState, msg: PPPPMessage, now: float) -> Actions:
        st.sync_heard_at = now
        st.adopt_at = None  # a SYNC after all
        st.sync_bytes += msg.size
        if st.sync_bytes > self.settings.max_sync_bytes:
            self.failure = (
                f"the SYNC of channel {st.channel!r} is over max_sync_bytes "
                f"({self.settings.max_sync_bytes:,} bytes)"
            )
            st.sync_items = []
            return Actions(problem=self.failure)
        st.sync_items.append(msg)
        return NOTHING

    def _sync_end(self, st: ChannelState, end: SyncEnd, now: float) -> Actions:
        items = st.sync_items
        st.sync_items = []
        st.sync_bytes = 0
        if st.owed_at is None:
            st.owed_at = now
            self._wake_at(now + self.settings.first_idle)
        position = st.position
        if len(items) != end.items:
            if not items and position is not None and end.head <= position:
                # The end of a SYNC already taken, resent: answer it.
                self.duplicates += 1
                st.dup_owed = True
                st.sent_max = max(st.sent_max, end.head)
                return NOTHING
            self.sync_retries += 1
            return Actions(
                send=(self._subscribe(st, now),),
                problem=(
                    f"SYNC of channel {st.channel!r}: {len(items)} items of {end.items}; "
                    "subscribing again"
                ),
            )
        st.sent_max = max(st.sent_max, end.head)
        st.retry_wait = self.settings.misses * self.settings.idle
        if position is not None and end.head <= position:
            newest = max((m.bus_sequence for m in items), default=0) if st.guard else 0
            if newest > st.bus:
                return self._numbering_differs(st, end.head, newest)
            self.duplicates += max(1, len(items))
            st.dup_owed = True
            return NOTHING
        self.syncs += 1
        st.position = end.head
        st.bus = 0  # the SYNC's head is no live message: its bus sequence is not known
        st.guard = False  # the SYNC brings the channel to this door's numbering
        delivered: list[PPPPMessage] = []
        if items:
            last = items[-1]
            items[-1] = last._replace(position=end.head)
            self.held += len(items)
            self.held_bytes += sum(m.size for m in items)
            delivered.extend(items)
            self.delivered += len(items)
        elif end.head >= st.done:
            st.done = end.head  # an empty SYNC: nothing for the application to do
            st.dup_owed = True  # ACK its head
        if st.pending:
            delivered.extend(self._drain(st, now))
        return Actions(deliver=tuple(delivered)) if delivered else NOTHING

    def _channel_due(self, st: ChannelState, now: float) -> list[bytes] | None:
        s = self.settings
        if (st.position is None or not st.heard) and now >= st.sync_heard_at + st.retry_wait:
            self.resubscribes += 1
            return self._subscribe(st, now)
        if st.channel in self._resubscribe_channels and not st.pending and st.done == st.position:
            # It dropped a message beyond the hole: the bus resends from our ACK.
            self._resubscribe_channels.discard(st.channel)
            self.resubscribes += 1
            return self._subscribe(st, now)
        nack = (
            st.nack_at is not None and now >= st.nack_at + s.first_idle and st.done == st.position
        )
        if nack:
            return self._ack(st, now)
        if st.owed_at is not None and now >= st.owed_at + s.first_idle:
            if st.ack_target() > st.acked or st.dup_owed:
                return self._ack(st, now)
            st.owed_at = None  # nothing to ACK until the application does more
        return None

    def _ack(self, st: ChannelState, now: float) -> list[bytes]:
        """An ACK of what is done; with holes and nothing done missing before them, the
        ACK/NACK of the highest message held."""
        highest = st.ack_target()
        missing: tuple[tuple[int, int], ...] = ()
        if st.pending and st.done == st.position:
            highest = max(st.pending)
            missing = tuple(st.holes())
            st.nack_at = now
            self.nacks += 1
        self.acks += 1
        # What the bus takes as ACKed: up to the first hole (it resends the holes).
        st.acked = max(st.acked, missing[0][0] - 1 if missing else highest)
        st.dup_owed = False
        everything = highest >= st.received_max and not st.pending
        st.owed_at = None if everything else now
        self._sent(now)
        return pppp.encode(pppp.AckNack(st.channel, highest, missing))

    def _subscribe(self, st: ChannelState, now: float) -> list[bytes]:
        s = self.settings
        # What is held out of order came in the old conversation; the bus resends it
        # from its position, and an ACK must not name more than the new one sent.
        for msg in st.pending.values():
            self.held -= 1
            self.held_bytes -= msg.size
        st.pending.clear()
        self._resubscribe_channels.discard(st.channel)
        if st.position is None:
            # Waiting for a SYNC: ask again soon, then less often.
            wait = st.retry_wait * 2 if st.retry_wait else s.misses * s.first_idle
            wait = min(wait, s.misses * s.idle)
        else:
            wait = s.misses * s.idle
        st.new_conversation(now, wait)
        self._wake_at(now + wait)
        self._sent(now)
        return pppp.encode(pppp.Subscribe(st.channel))

    def _sent(self, now: float) -> None:
        self._sent_at = now
        self._heartbeat_next = False

    def _heartbeat_due(self) -> float:
        s = self.settings
        return self._sent_at + (s.idle if self._heartbeat_next else s.first_idle)
