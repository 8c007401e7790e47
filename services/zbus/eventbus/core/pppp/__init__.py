"""The event bus's PPPP door (seed 003, ADR 0006), sans-I/O: its core and what the core
hands its shell.

The core (:class:`PpppCore`) takes what arrived and the time, and hands back what to do:
:meth:`PpppCore.take` gives the messages to send (a :class:`Batch` per subscriber), the
reads of the log to make (:data:`Read`), and the CUSTOMs to publish;
:meth:`PpppCore.take_changes` the positions and checkpoints to store and the retention
hold; :meth:`PpppCore.next_deadline` when to call :meth:`PpppCore.tick`. A read's result
comes back as an input, as does what ZeroMQ did not take (:meth:`PpppCore.unsent`).
"""

from zbus.eventbus.core.pppp._batch import HEARTBEAT, Batch
from zbus.eventbus.core.pppp._cache import Payload, payload_frames
from zbus.eventbus.core.pppp._channels import MARK_EVERY, Channel
from zbus.eventbus.core.pppp._core import Output, PpppCore
from zbus.eventbus.core.pppp._sending import PENDING, PUMP_BUDGET
from zbus.eventbus.core.pppp._state import (
    STATE_PRODUCER,
    STATE_TOPIC,
    StateDelta,
    StateError,
    decode_state,
    encode_state,
)
from zbus.eventbus.core.pppp._subscribers import (
    MESSAGE_OVERHEAD,
    Conversation,
    Subscriber,
    Times,
    identity_text,
)
from zbus.eventbus.core.pppp._timers import Deadlines
from zbus.eventbus.core.pppp._types import (
    COMMANDS,
    QUEUE_MARGIN,
    REASONS,
    SENT,
    CatchUpRead,
    Changes,
    Limits,
    MessagesRead,
    Read,
    SyncRead,
)

__all__ = [
    "COMMANDS",
    "HEARTBEAT",
    "MARK_EVERY",
    "MESSAGE_OVERHEAD",
    "PENDING",
    "PUMP_BUDGET",
    "QUEUE_MARGIN",
    "REASONS",
    "SENT",
    "STATE_PRODUCER",
    "STATE_TOPIC",
    "Batch",
    "CatchUpRead",
    "Changes",
    "Channel",
    "Conversation",
    "Deadlines",
    "Limits",
    "MessagesRead",
    "Output",
    "Payload",
    "PpppCore",
    "Read",
    "StateDelta",
    "StateError",
    "Subscriber",
    "SyncRead",
    "Times",
    "decode_state",
    "encode_state",
    "identity_text",
    "payload_frames",
]
