"""The event bus's mc0 door (seed 001, ADR 0005), sans-I/O: its core (:class:`Mc0Core`:
sessions, verbs, heartbeats, fan-out), the index of its subscriptions
(:class:`TopicIndex`), the outbox its shell queues in when a connection's ZeroMQ queue is
full (:class:`Outbox`), and a client's heartbeat timing (:class:`Liveness`).
"""

from zbus.eventbus.core.mc0._core import (
    DROP_AFTER,
    DROP_REASONS,
    ERROR_REASONS,
    NOOP_AFTER,
    PRODUCER_PREFIX,
    VERBS_IN,
    VERBS_OUT,
    Mc0Core,
    Mc0Limits,
    Publish,
    Reply,
    Session,
    default_producer,
)
from zbus.eventbus.core.mc0._liveness import Liveness
from zbus.eventbus.core.mc0._outbox import (
    FRAME_OVERHEAD,
    Outbox,
    message_bytes,
    message_size,
    smallest_peer_bytes,
)
from zbus.eventbus.core.mc0._topics import TopicIndex, is_subtree

__all__ = [
    "DROP_AFTER",
    "DROP_REASONS",
    "ERROR_REASONS",
    "FRAME_OVERHEAD",
    "NOOP_AFTER",
    "PRODUCER_PREFIX",
    "VERBS_IN",
    "VERBS_OUT",
    "Liveness",
    "Mc0Core",
    "Mc0Limits",
    "Outbox",
    "Publish",
    "Reply",
    "Session",
    "TopicIndex",
    "default_producer",
    "is_subtree",
    "message_bytes",
    "message_size",
    "smallest_peer_bytes",
]
