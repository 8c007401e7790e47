"""The PPPP door (seed 003, ADR 0006): its shell (:class:`PpppDoor`), the positions it
keeps beside the log (:mod:`~zbus.eventbus.doors.pppp.positions`), what it shows the
admin API and Prometheus (:mod:`~zbus.eventbus.doors.pppp.admin`), and its row of the
bus's table of doors (:data:`PPPP`). Its core is :mod:`zbus.eventbus.core.pppp`.
"""

from zbus.eventbus.doors.pppp.admin import PpppMetrics, read_status, read_summary
from zbus.eventbus.doors.pppp.door import PpppDoor, payload_of
from zbus.eventbus.doors.wiring import DoorSpec

#: The PPPP door's row in the bus's table of doors: events come from the stream (and the
#: log), CUSTOMs go to the collector, positions to pppp.sqlite, and the log keeps what
#: a subscriber has not ACKed.
PPPP: DoorSpec[PpppDoor] = DoorSpec(
    name="pppp",
    title="PPPP",
    port_setting="pppp_port",
    build=PpppDoor,
    metrics=PpppMetrics,
    holds_retention=True,
)

__all__ = ["PPPP", "PpppDoor", "PpppMetrics", "payload_of", "read_status", "read_summary"]
