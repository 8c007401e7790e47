"""Node liveness as a transition table, with time as an input (STYLE "State machines").

Seed 004, "Heartbeating": "Any received command except DISCONNECT acts as a heartbeat",
and "a peer MUST consider the other peer 'disconnected' if no heartbeat arrives within
some multiple of that interval (usually 3-5)". With ``I`` the node's heartbeat interval,
``M`` the allowed misses, ``G`` the grace and ``t`` the time of its last command:

=================  ===========================  ===========
event              when                         next state
=================  ===========================  ===========
``missed``         ``now >= t + I*LATE_AFTER``  late
``silent``         ``now >= t + I*M``           inactive
``expired``        ``now >= t + I*M + G``       gone
``heard``          any command                  active
``disconnected``   DISCONNECT either way        gone
=================  ===========================  ===========

Each boundary is inclusive. ``late`` means a beat is missing, not merely due: a node that
beats exactly every ``I`` is heard a little after ``t + I`` every time, and with the
boundary at ``t + I`` it would flip between active and late on every beat. Time only
moves a node towards ``gone``; a command brings it back to ``active`` from anywhere but
``gone``. ``late`` is a view of the silence, not a fact worth storing: the registry only
records transitions between active, inactive and gone (see ``DURABLE``).
"""

from __future__ import annotations

from typing import Final, Literal, TypeAlias

from zbus.catalog.core.model import NodeState

Event: TypeAlias = Literal["heard", "missed", "silent", "expired", "disconnected"]

#: (state, event) -> next state. A pair not in the table is a bug in the caller.
TRANSITIONS: Final[dict[tuple[NodeState, Event], NodeState]] = {
    ("active", "heard"): "active",
    ("late", "heard"): "active",
    ("inactive", "heard"): "active",
    ("active", "missed"): "late",
    ("active", "silent"): "inactive",
    ("late", "silent"): "inactive",
    ("active", "expired"): "gone",
    ("late", "expired"): "gone",
    ("inactive", "expired"): "gone",
    ("active", "disconnected"): "gone",
    ("late", "disconnected"): "gone",
    ("inactive", "disconnected"): "gone",
}

#: Silence, in heartbeat intervals, after which a node counts as late.
LATE_AFTER: Final = 1.5

#: States the registry store records; a change between two states that map to the same
#: durable state (active <-> late) is not written.
DURABLE: Final[dict[NodeState, NodeState]] = {
    "active": "active",
    "late": "active",
    "inactive": "inactive",
    "gone": "gone",
}

_RANK: Final[dict[NodeState, int]] = {"active": 0, "late": 1, "inactive": 2, "gone": 3}


def step(state: NodeState, event: Event) -> NodeState:
    """The state after ``event``.

    Raises:
        ValueError: ``event`` cannot happen in ``state``.
    """
    try:
        return TRANSITIONS[state, event]
    except KeyError:
        raise ValueError(f"no transition from {state!r} on {event!r}") from None


def due(last: float, interval: float, misses: int, grace: float, now: float) -> Event | None:
    """The most severe time event due at ``now`` for a node last heard at ``last``."""
    silence = now - last
    if silence >= interval * misses + grace:
        return "expired"
    if silence >= interval * misses:
        return "silent"
    if silence >= interval * LATE_AFTER:
        return "missed"
    return None


def advance(
    state: NodeState, last: float, interval: float, misses: int, grace: float, now: float
) -> NodeState:
    """``state`` after the time event due at ``now``, if that moves it towards gone."""
    event = due(last, interval, misses, grace, now)
    if event is None:
        return state
    target = step(state, event) if (state, event) in TRANSITIONS else state
    return target if _RANK[target] > _RANK[state] else state


def next_change(
    state: NodeState, last: float, interval: float, misses: int, grace: float
) -> float | None:
    """When the node's state next changes by time alone, or None (gone)."""
    if state == "active":
        return last + interval * min(LATE_AFTER, misses)
    if state == "late":
        return last + interval * misses
    if state == "inactive":
        return last + interval * misses + grace
    return None
