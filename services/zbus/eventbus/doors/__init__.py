"""The event bus's front doors besides its spec ports: their I/O shells, and the table
the service starts them from.

Every door is three parts:

- a **codec** (``zbus.common.protocols``): bytes to commands and back, pure;
- a **core** (``zbus.eventbus.core``), sans-I/O: it takes what arrived (a client's
  message, an event of the log, a confirm, a log read it asked for) and the time, and
  hands back what to send, what to publish into the log or read from it or store, and
  its next deadline. It reads no clock, no socket and no store, and calls nothing back:
  a read of the log is an action it asks its shell for, whose result comes back to it
  as an input. ``Mc0Core`` and ``PpppCore`` collect their output for ``take()`` and
  say their next deadline in ``next_deadline()``;
- a **shell** (here): one thread with a blocking poller that owns the door's sockets,
  feeds the core what arrives with the time, and carries out what the core hands back.
  What the shell does the same for every door, it does through a
  :class:`~zbus.eventbus.doors.link.LogLink` (the collector and the stream: batching,
  stamps, uuids, confirms with a timeout, gaps).

The doors sit between the service (``zbus.eventbus.server``, which they never import)
and the cores: the service hands each door what it needs in a
:class:`~zbus.eventbus.doors.wiring.DoorWiring`, and starts, watches and stops every door
of :data:`DOORS` whose port is set.
"""

from __future__ import annotations

from typing import Any

from zbus.eventbus.doors.mc0 import MC0
from zbus.eventbus.doors.pppp import PPPP
from zbus.eventbus.doors.wiring import Door, DoorSettings, DoorSpec, DoorWiring

#: Every door of the bus, in the order they start (and stop).
DOORS: tuple[DoorSpec[Any], ...] = (MC0, PPPP)

__all__ = ["DOORS", "Door", "DoorSettings", "DoorSpec", "DoorWiring"]
