"""The event bus's mc0 door (seed 001), sans-I/O: sessions, verbs, heartbeats, fan-out.

The shell (:mod:`zbus.eventbus.doors.mc0`) feeds :meth:`Mc0Core.receive` every
message the ROUTER on port 61616 reads, with the identity it came from; feeds
:meth:`Mc0Core.deliver` every event the bus stores; calls :meth:`Mc0Core.tick` once
:meth:`Mc0Core.next_deadline` passes; and then sends the messages and publishes the
events that :meth:`Mc0Core.take` hands back. When the bus confirms a PUT it calls
:meth:`Mc0Core.stored`, when it refuses one :meth:`Mc0Core.failed`. The core never
reads a clock or a socket: ``now`` is monotonic seconds.

Decisions (ADR 0005; docs/protocols/mc0.md "As served"):

- **Shape**: a message whose first frame is empty is the connector's (the delimiter
  first, as the real connector and mc0d send it), any other the spec's. Each reply is
  written in the shape of the message it answers, and what the bus sends unasked
  (MESSAGE, NOOP) in the shape of the connection's last message.
- **Sessions**, keyed by ROUTER identity, as mc0d and the Ruby broker keep them: CONNECT
  opens one (or renews it: a new TTL, the subscriptions kept), and so does SUB from a
  connection that never sent CONNECT, with the default TTL. NOOP, UNSUB, PUT and
  DISCONNECT need none: NOOP and DISCONNECT of an unknown connection get OK when they
  carry an ID and open nothing, so that a client whose session the bus dropped hears
  no heartbeat and can tell.
- **TTL** is milliseconds in ``min_ttl_ms..max_ttl_ms``; a CONNECT outside it gets ERROR
  and opens nothing. The bus sends NOOP after ``0.95 x TTL`` of its own silence towards a
  session and drops the session, with its subscriptions, after ``1.05 x TTL`` of silence
  from it (any message counts, a malformed one too).
- **ID**: a command with an ID gets exactly one answer: OK, or ERROR with MESSAGE and the
  ID. A PUT's OK comes once the event is in the bus's log. A message that does not
  decode gets ERROR with MESSAGE, and its ID when one can be read. Nothing else changes:
  the connection keeps its session. OK and ERROR from a client are counted and not
  answered (answering an answer could loop); MESSAGE from a client gets ERROR.
- **PUT** becomes one event: the topic verbatim, the producer ``mc0:`` + the connection's
  CONNECT ID (or its ROUTER identity in hex), the data the body or an envelope of body
  and ``X-`` headers (:mod:`zbus.common.protocols.mc0_envelope`).
- **Fan-out**: an event reaches each session subscribed to its topic once
  (:class:`~zbus.eventbus.core.mc0.TopicIndex`), as MESSAGE with TOPIC, the PUT's ``X-``
  headers and the body.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from zbus.common.protocols.errors import ProtocolError
from zbus.common.protocols.eventbus_limits import MAX_PRODUCER_BYTES, MAX_TOPIC_BYTES
from zbus.common.protocols.mc0 import (
    CONNECTOR,
    SPEC,
    Connect,
    Disconnect,
    Error,
    Headers,
    Mc0Command,
    Message,
    Noop,
    Ok,
    Put,
    Sub,
    Unsub,
    decode,
    encode,
    request_id,
)
from zbus.common.protocols.mc0_envelope import unwrap, wrap
from zbus.common.rejects import reject_reason
from zbus.eventbus.core.link import Outgoing
from zbus.eventbus.core.mc0._topics import TopicIndex

#: Verbs counted on the way in ("invalid": a message that does not decode).
VERBS_IN = (
    "CONNECT",
    "DISCONNECT",
    "ERROR",
    "MESSAGE",
    "NOOP",
    "OK",
    "PUT",
    "SUB",
    "UNSUB",
    "invalid",
)
#: Verbs counted on the way out.
VERBS_OUT = ("ERROR", "MESSAGE", "NOOP", "OK")
#: Why a message was answered with ERROR (or, for a client's OK and ERROR, ignored).
ERROR_REASONS = (
    "bad_topic",
    "bad_ttl",
    "bad_value",
    "busy",
    "frame_count",
    "malformed",
    "storage",
    "too_large",
    "too_many_frames",
    "too_many_headers",
    "too_many_subscriptions",
    "unconfirmed",
    "unknown_command",
    "wrong_direction",
)

#: Why a message was not delivered: the connection's bound (slow_client), the connection
#: gone (gone), the door missed stream batches (stream_gap, in events), an event larger
#: than mc0 carries (too_large).
DROP_REASONS = ("gone", "slow_client", "stream_gap", "too_large")

NOOP_AFTER = 0.95  # x TTL of the bus's silence towards a session
DROP_AFTER = 1.05  # x TTL of a session's silence
PRODUCER_PREFIX = "mc0:"
# A longer CONNECT ID is not used as the producer, which has a range of its own.
MAX_PRODUCER_ID_BYTES = MAX_PRODUCER_BYTES - len(PRODUCER_PREFIX)


@dataclass(frozen=True, slots=True)
class Mc0Limits:
    """The ranges of what the door takes from the wire (docs/eventbus.md, "mc0").

    Attributes:
        max_data_bytes: the stored event's data (the body, or the envelope of body and
            headers), at most; a larger event from another door is not delivered as
            MESSAGE (counted, ``too_large``).
        default_ttl_ms: the TTL of a session whose CONNECT gave none, or that never
            sent CONNECT.
        min_ttl_ms, max_ttl_ms: the TTLs a CONNECT may ask for.
        max_topic_bytes: a topic's UTF-8 length, at most (PUT, SUB and UNSUB).
        max_subscriptions: topics one connection may hold.
        max_topics_per_message: topics in one SUB or UNSUB.
        max_headers: ``X-`` headers on one PUT.
    """

    max_data_bytes: int
    default_ttl_ms: int = 30_000
    min_ttl_ms: int = 100
    max_ttl_ms: int = 86_400_000
    max_topic_bytes: int = MAX_TOPIC_BYTES
    max_subscriptions: int = 10_000
    max_topics_per_message: int = 256
    max_headers: int = 64

    @property
    def max_frames(self) -> int:
        """Frames in one message, at most: the largest SUB or PUT there can be."""
        return 4 + 2 * (self.max_headers + 2) + self.max_topics_per_message


@dataclass(frozen=True, slots=True)
class Reply:
    """Where the answer to a command goes, and in which shape."""

    identity: bytes
    id: str | None
    delimiter: bool


@dataclass(frozen=True, slots=True)
class Publish(Outgoing):
    """An event to store, from a PUT; ``reply`` is who put it."""

    reply: Reply


@dataclass(eq=False, slots=True)
class Session:
    """One mc0 connection the bus knows."""

    identity: bytes
    producer: str
    ttl: float  # seconds
    delimiter: bool
    heard: float  # when the bus last heard from it
    told: float  # when the bus last sent it something
    version: str | None = None
    topics: set[str] = field(default_factory=set)
    generation: int = 0  # bumped when the TTL changes: older heap entries are stale


_NOOP, _EXPIRE = 0, 1


def default_producer(identity: bytes) -> str:
    """The producer of events put by a connection that gave no usable CONNECT ID."""
    return PRODUCER_PREFIX + identity.hex()[:64]


def _utf8_len(value: str) -> int:
    return len(value) if value.isascii() else len(value.encode())


class Mc0Core:
    """Every mc0 connection of one bus: its session, subscriptions and heartbeats."""

    def __init__(self, limits: Mc0Limits) -> None:
        self.limits = limits
        self.sessions: dict[bytes, Session] = {}
        self.topics = TopicIndex()
        self.outbox: list[tuple[bytes, list[bytes]]] = []
        self.publishes: list[Publish] = []
        #: (identity, reason, detail) of each refusal, for the wiring to log.
        self.refusals: list[tuple[bytes, str, str]] = []
        self.received = dict.fromkeys(VERBS_IN, 0)
        self.sent = dict.fromkeys(VERBS_OUT, 0)
        self.errors = dict.fromkeys(ERROR_REASONS, 0)
        self.drops = dict.fromkeys(DROP_REASONS, 0)
        self.expired = 0  # sessions dropped after 1.05 x TTL of silence
        self._heap: list[tuple[float, int, int, Session, int]] = []
        self._tie = itertools.count()

    # ------------------------------------------------------------------ input
    def receive(self, identity: bytes, frames: Sequence[bytes], now: float) -> None:
        """Handle one message from ``identity`` (the frames after the identity)."""
        delimiter = bool(frames) and not frames[0]
        dialect = CONNECTOR if delimiter else SPEC
        session = self.sessions.get(identity)
        if session is not None:
            session.heard = now
            session.delimiter = delimiter
        if len(frames) > self.limits.max_frames:
            self.received["invalid"] += 1
            detail = f"mc0: at most {self.limits.max_frames} frames, got {len(frames)}"
            self._refuse(
                Reply(identity, request_id(frames[:16], dialect), delimiter),
                "too_many_frames",
                detail,
                now,
            )
            return
        try:
            cmd = decode(frames, dialect)
        except ProtocolError as exc:
            self.received["invalid"] += 1
            reply = Reply(identity, request_id(frames, dialect), delimiter)
            self._refuse(reply, reject_reason(exc), str(exc), now)
            return
        self._dispatch(cmd, identity, delimiter, session, now)

    def _dispatch(
        self,
        cmd: Mc0Command,
        identity: bytes,
        delimiter: bool,
        session: Session | None,
        now: float,
    ) -> None:
        if isinstance(cmd, Put):
            self.received["PUT"] += 1
            self._put(cmd, Reply(identity, cmd.id, delimiter), session, now)
        elif isinstance(cmd, Noop):
            self.received["NOOP"] += 1
            self._ok(Reply(identity, cmd.id, delimiter), now)
        elif isinstance(cmd, Sub):
            self.received["SUB"] += 1
            self._sub(cmd, Reply(identity, cmd.id, delimiter), session, now)
        elif isinstance(cmd, Unsub):
            self.received["UNSUB"] += 1
            if session is not None:
                for topic in cmd.topics:
                    if topic in session.topics:
                        session.topics.discard(topic)
                        self.topics.remove(identity, topic)
            self._ok(Reply(identity, cmd.id, delimiter), now)
        elif isinstance(cmd, Connect):
            self.received["CONNECT"] += 1
            self._connect(cmd, Reply(identity, cmd.id, delimiter), session, now)
        elif isinstance(cmd, Disconnect):
            self.received["DISCONNECT"] += 1
            if session is not None:
                self._drop(session)
            self._ok(Reply(identity, cmd.id, delimiter), now)
        elif isinstance(cmd, Message):
            self.received["MESSAGE"] += 1
            detail = "mc0 MESSAGE: sent by the bus to subscribers, never to the bus (use PUT)"
            self._refuse(Reply(identity, None, delimiter), "wrong_direction", detail, now)
        else:  # OK or ERROR: an answer, which is not answered
            self.received["OK" if isinstance(cmd, Ok) else "ERROR"] += 1
            self.errors["wrong_direction"] += 1
            self.refusals.append((identity, "wrong_direction", f"mc0: ignored {cmd!r}"))

    def _connect(self, cmd: Connect, reply: Reply, session: Session | None, now: float) -> None:
        lim = self.limits
        ttl_ms = lim.default_ttl_ms if cmd.ttl is None else cmd.ttl
        if not lim.min_ttl_ms <= ttl_ms <= lim.max_ttl_ms:
            detail = (
                f"mc0 CONNECT: expected TTL in {lim.min_ttl_ms}..{lim.max_ttl_ms} "
                f"milliseconds, got {ttl_ms}"
            )
            self._refuse(reply, "bad_ttl", detail, now)
            return
        producer = default_producer(reply.identity)
        if cmd.id is not None and _utf8_len(cmd.id) <= MAX_PRODUCER_ID_BYTES:
            producer = PRODUCER_PREFIX + cmd.id
        if session is None:
            session = self._open(reply, ttl_ms, producer, now)
            session.version = cmd.version
            self._ok(reply, now)
            return
        session.producer = producer
        session.version = cmd.version
        self._ok(reply, now)
        if session.ttl != ttl_ms / 1000:
            session.ttl = ttl_ms / 1000
            session.generation += 1
            self._schedule(session)

    def _open(self, reply: Reply, ttl_ms: int, producer: str, now: float) -> Session:
        session = Session(reply.identity, producer, ttl_ms / 1000, reply.delimiter, now, now)
        self.sessions[reply.identity] = session
        self._schedule(session)
        return session

    def _sub(self, cmd: Sub, reply: Reply, session: Session | None, now: float) -> None:
        lim = self.limits
        for topic in cmd.topics:
            if _utf8_len(topic) > lim.max_topic_bytes:
                detail = f"mc0 SUB: expected topics of at most {lim.max_topic_bytes} bytes"
                self._refuse(reply, "bad_topic", f"{detail}, got {topic[:40]!r}...", now)
                return
        held = session.topics if session is not None else set()
        new = [topic for topic in dict.fromkeys(cmd.topics) if topic not in held]
        if len(held) + len(new) > lim.max_subscriptions:
            detail = (
                f"mc0 SUB: at most {lim.max_subscriptions} topics per connection; "
                f"it holds {len(held)} and asked for {len(new)} more"
            )
            self._refuse(reply, "too_many_subscriptions", detail, now)
            return
        if session is None:
            session = self._open(reply, lim.default_ttl_ms, default_producer(reply.identity), now)
        for topic in new:
            session.topics.add(topic)
            self.topics.add(reply.identity, topic)
        self._ok(reply, now)

    def _put(self, cmd: Put, reply: Reply, session: Session | None, now: float) -> None:
        lim = self.limits
        topic = cmd.topic
        if not topic or topic[0] == "\0" or _utf8_len(topic) > lim.max_topic_bytes:
            detail = (
                f"mc0 PUT TOPIC: expected 1 to {lim.max_topic_bytes} bytes of text "
                f"not starting with NUL, got {topic[:40]!r}"
            )
            self._refuse(reply, "bad_topic", detail, now)
            return
        if len(cmd.headers) > lim.max_headers:
            detail = f"mc0 PUT: at most {lim.max_headers} X- headers, got {len(cmd.headers)}"
            self._refuse(reply, "too_many_headers", detail, now)
            return
        data = wrap(cmd.headers, cmd.body)
        if len(data) > lim.max_data_bytes:
            detail = (
                f"mc0 PUT: expected body and headers of at most {lim.max_data_bytes} bytes "
                f"stored, got {len(data)}"
            )
            self._refuse(reply, "too_large", detail, now)
            return
        producer = session.producer if session is not None else default_producer(reply.identity)
        self.publishes.append(Publish(topic, producer, data, reply))

    # ------------------------------------------------------------- bus events
    def deliver(self, topic: str, data: bytes, now: float) -> int:
        """Queue MESSAGE for every session subscribed to ``topic``; returns how many."""
        targets = self.topics.match(topic)
        if not targets:
            return 0
        if len(data) > self.limits.max_data_bytes:
            self.drops["too_large"] += len(targets)
            return 0
        headers, body = unwrap(data)
        shapes: dict[bool, list[bytes]] = {}
        sessions = self.sessions
        outbox = self.outbox
        for identity in targets:
            session = sessions[identity]
            frames = shapes.get(session.delimiter)
            if frames is None:
                frames = shapes[session.delimiter] = _message(
                    topic, headers, body, session.delimiter
                )
            outbox.append((identity, frames))
            session.told = now
        self.sent["MESSAGE"] += len(targets)
        return len(targets)

    def stored(self, reply: Reply, now: float) -> None:
        """The bus stored the event of a PUT: OK when the PUT carried an ID."""
        self._ok(reply, now)

    def failed(self, reply: Reply, reason: str, detail: str, now: float) -> None:
        """The bus did not store the event of a PUT (``reason`` in ERROR_REASONS)."""
        self._refuse(reply, reason, detail, now)

    def forget(self, identity: bytes) -> bool:
        """The connection is gone (ZeroMQ cannot route to it): drop its session."""
        session = self.sessions.get(identity)
        if session is None:
            return False
        self._drop(session)
        return True

    # ------------------------------------------------------------- heartbeats
    def next_deadline(self) -> float | None:
        """When :meth:`tick` has something to do next, at the earliest (None: never)."""
        return self._heap[0][0] if self._heap else None

    def tick(self, now: float) -> None:
        """Send the NOOPs that are due and drop the sessions that fell silent."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, kind, session, generation = heapq.heappop(heap)
            if self.sessions.get(session.identity) is not session:
                continue  # dropped, or replaced by a new session
            if generation != session.generation:
                continue  # the TTL changed; the entries of the new one are in the heap
            if kind == _NOOP:
                due = session.told + NOOP_AFTER * session.ttl
                if due <= now:
                    self._send(Reply(session.identity, None, session.delimiter), Noop(), now)
                    due = now + NOOP_AFTER * session.ttl
                self._push(due, _NOOP, session)
            else:
                due = session.heard + DROP_AFTER * session.ttl
                if due <= now:
                    self.expired += 1
                    self._drop(session)
                    continue
                self._push(due, _EXPIRE, session)

    def _schedule(self, session: Session) -> None:
        self._push(session.told + NOOP_AFTER * session.ttl, _NOOP, session)
        self._push(session.heard + DROP_AFTER * session.ttl, _EXPIRE, session)

    def _push(self, due: float, kind: int, session: Session) -> None:
        heapq.heappush(self._heap, (due, next(self._tie), kind, session, session.generation))

    def _drop(self, session: Session) -> None:
        for topic in session.topics:
            self.topics.remove(session.identity, topic)
        session.topics.clear()
        del self.sessions[session.identity]
        # Its heap entries go stale and are skipped; purge them when they dominate.
        if len(self._heap) > 64 and len(self._heap) > 4 * len(self.sessions) + 64:
            self._heap = [e for e in self._heap if self.sessions.get(e[3].identity) is e[3]]
            heapq.heapify(self._heap)

    # ----------------------------------------------------------------- output
    def _ok(self, reply: Reply, now: float) -> None:
        if reply.id is not None:
            self._send(reply, Ok(reply.id), now)

    def _refuse(self, reply: Reply, reason: str, detail: str, now: float) -> None:
        self.errors[reason] += 1
        self.refusals.append((reply.identity, reason, detail))
        self._send(reply, Error(detail, reply.id), now)

    def _send(self, reply: Reply, cmd: Noop | Ok | Error, now: float) -> None:
        self.outbox.append((reply.identity, encode(cmd, CONNECTOR if reply.delimiter else SPEC)))
        self.sent[type(cmd).__name__.upper()] += 1
        session = self.sessions.get(reply.identity)
        if session is not None:
            session.told = now

    def take(self) -> tuple[list[tuple[bytes, list[bytes]]], list[Publish]]:
        """What to send and what to publish, since the last call."""
        out, pubs = self.outbox, self.publishes
        self.outbox, self.publishes = [], []
        return out, pubs


def _message(topic: str, headers: Headers, body: bytes, delimiter: bool) -> list[bytes]:
    """MESSAGE frames: TOPIC, the PUT's ``X-`` headers in its order, the body."""
    frames = [b"", b"MESSAGE"] if delimiter else [b"MESSAGE"]
    frames += (b"TOPIC", topic.encode())
    for key, value in headers:
        frames.append(key.encode())
        frames.append(value.encode())
    frames.append(b"")
    frames.append(body)
    return frames


__all__ = [
    "DROP_AFTER",
    "DROP_REASONS",
    "ERROR_REASONS",
    "NOOP_AFTER",
    "PRODUCER_PREFIX",
    "VERBS_IN",
    "VERBS_OUT",
    "Mc0Core",
    "Mc0Limits",
    "Publish",
    "Reply",
    "Session",
    "default_producer",
]
