"""The catalog core on two clocks: liveness on monotonic time, wall time only in stamps.

A ``ManualClock`` drives the core; its wall clock is stepped an hour forward and back
(as an operator or NTP may) while monotonic time goes on as usual: no node changes state
because of a step, and every transition still comes at its monotonic time.
"""

from __future__ import annotations

from typing import Any

import pytest

from zbus.catalog.core.catalog import CatalogConfig, CatalogCore, NodeRecord
from zbus.common.clock import ManualClock
from zbus.common.protocols.dbp import Approved, Heartbeat, Registration

I = 3.0  # heartbeat interval  # noqa: E741
G = 10.0  # grace
HOUR = 3600.0
EPS = 2.0**-10  # exact in binary: sums of it land on the boundaries
A = b"\x00node-a"
B = b"\x00node-b"


def info(name: str) -> dict[str, Any]:
    return {"name": name, "ip": "10.0.0.7", "port": 5555, "function": "f",
            "heartbeat_interval": I}  # fmt: skip


class Driven:
    """A core and the clock that feeds it, the way the service's wiring reads it."""

    def __init__(self, nodes: tuple[NodeRecord, ...] = (), clock: ManualClock | None = None):
        self.clock = clock or ManualClock()
        config = CatalogConfig(heartbeat_interval=I, grace=G)
        self.core = CatalogCore(config, nodes, now=self.clock.monotonic(), wall=self.clock.time())

    def tcp(self, identity: bytes, cmd: Any) -> None:
        self.core.tcp_message(identity, cmd, self.clock.monotonic(), wall=self.clock.time())

    def beat(self, name: str) -> None:
        cmd = Heartbeat(name, self.clock.time())
        self.core.udp_heartbeat(("10.0.0.7", 4000), cmd, self.clock.monotonic(),
                                wall=self.clock.time())  # fmt: skip

    def tick(self) -> None:
        self.core.tick(self.clock.monotonic(), wall=self.clock.time())

    def states(self) -> dict[str, str]:
        return {r.name: r.state for r in self.core.nodes()}


def registered(*names: bytes) -> Driven:
    d = Driven()
    for identity in names:
        d.tcp(identity, Registration(info(identity.decode()[1:]), d.clock.time()))
    assert all(isinstance(o.command, Approved) for o in d.core.take_outbox())
    return d


@pytest.mark.parametrize("step", [HOUR, -HOUR])
def test_a_wall_clock_step_changes_no_node_state(step: float) -> None:
    # node-a beats steadily; node-b falls silent after its registration.
    d = registered(A, B)
    d.core.take_changes()
    seen: list[dict[str, str]] = []
    for second in range(1, 60):
        d.clock.advance(0.5)
        if second == 4:
            d.clock.step(step)
        if second == 8:
            d.clock.step(-step)  # and back: both directions at runtime
        if second % 4 == 0:
            d.beat("node-a")
        d.tick()
        seen.append(d.states())
    assert all(s["node-a"] == "active" for s in seen)
    # node-b's silence is judged on monotonic time alone: late after 1.5 I, inactive
    # after 3 I, gone after 3 I + G, as if the wall clock had never moved.
    b = [s.get("node-b", "gone") for s in seen]
    assert b.index("late") == int(1.5 * I / 0.5) - 1
    assert b.index("inactive") == int(3 * I / 0.5) - 1
    assert b.index("gone") == int((3 * I + G) / 0.5) - 1
    assert d.core.counters["expiries"] == 1


@pytest.mark.parametrize("step", [HOUR, -HOUR])
def test_every_transition_comes_at_its_monotonic_time_with_wall_stepped(step: float) -> None:
    d = registered(A)
    d.clock.step(step)  # at once: nothing is due
    d.tick()
    assert d.states() == {"node-a": "active"}
    d.clock.advance(1.5 * I - EPS)
    d.clock.step(step)
    d.tick()
    assert d.states() == {"node-a": "active"}
    d.clock.advance(EPS)
    d.tick()
    assert d.states() == {"node-a": "late"}
    d.clock.advance(1.5 * I - EPS)
    d.clock.step(-2 * step)
    d.tick()
    assert d.states() == {"node-a": "late"}
    d.clock.advance(EPS)
    d.tick()
    assert d.states() == {"node-a": "inactive"}
    d.beat("node-a")  # heard again: active, whatever the wall clock says
    d.clock.step(step)
    d.tick()
    assert d.states() == {"node-a": "active"}
    d.clock.advance(3 * I + G - EPS)
    d.tick()
    assert d.states() == {"node-a": "inactive"}
    d.clock.advance(EPS)
    d.tick()
    assert d.states() == {}


def test_wall_time_goes_only_into_stamps_and_records() -> None:
    d = registered(A)
    [rec] = d.core.take_changes()
    assert rec.registered_at == rec.last_heartbeat == d.clock.time()
    d.clock.advance(I)
    d.clock.step(-HOUR)
    d.tick()  # the catalog's HEARTBEAT, stamped with the (stepped) wall time
    [out] = d.core.take_outbox()
    assert isinstance(out.command, Heartbeat) and out.command.time == d.clock.time()
    d.beat("node-a")
    assert d.core.nodes()[0].last_heartbeat == d.clock.time()
    # Uptime is an interval: monotonic.
    assert d.core.uptime("node-a", d.clock.monotonic()) == I
    assert d.core.uptime("nobody", d.clock.monotonic()) is None


@pytest.mark.parametrize("stored_age", [HOUR, -HOUR])
def test_a_restart_gives_loaded_nodes_a_fresh_monotonic_deadline(stored_age: float) -> None:
    # Stored wall times from an hour before the restart, or an hour after it (the wall
    # clock was stepped back meanwhile): neither is used for expiry.
    clock = ManualClock()
    clock.advance(50_000.0)
    stored = NodeRecord(name="node-a", identity=A, info=info("node-a"), state="active",
                        registered_at=clock.time() - stored_age,
                        last_heartbeat=clock.time() - stored_age,
                        heartbeat_interval=I)  # fmt: skip
    d = Driven((stored,), clock)
    assert d.core.nodes()[0].last_heartbeat == clock.time()
    assert d.core.uptime("node-a", clock.monotonic()) == max(0.0, stored_age)
    clock.advance(3 * I + G - EPS)
    d.tick()
    assert d.states() == {"node-a": "inactive"}
    clock.advance(EPS)
    d.tick()
    assert d.states() == {}
