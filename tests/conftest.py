"""Suite-wide settings (Hypothesis profiles, the garbage-in budget) and the fixtures
every part of the suite shares: a ZeroMQ context that fails the test on a socket left
open, a real event bus in a thread of its own, its endpoints, and dead ports."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import zmq
from hypothesis import HealthCheck, settings

from tests.support.ports import HeldPorts
from tests.support.zmq_context import SocketTrackingContext

if TYPE_CHECKING:
    # Imported where used: a test session that needs no bus (the unit tests, `import zbus`
    # measured in process) loads none of its modules.
    from zbus.eventbus.client import BusEndpoints
    from zbus.eventbus.server.service import EventBusService

# Garbage-in tests ask for FUZZ_EXAMPLES examples per protocol; CI runs the full budget.
FUZZ_EXAMPLES = int(os.environ.get("ZBUS_FUZZ_EXAMPLES", "10000"))

settings.register_profile(
    "default",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("default")


@pytest.fixture
def ctx() -> Iterator[zmq.Context[Any]]:
    """A ZeroMQ context for the test's own sockets. The test fails when one made from it
    (a monitor socket too) is still open at its end; then the context is destroyed with
    linger 0, so that nothing waits on an unsent message."""
    context = SocketTrackingContext()
    try:
        yield context
        left = context.open_sockets()
    finally:
        context.destroy(linger=0)
    if left:
        pytest.fail(f"the test left sockets open: {', '.join(left)}")


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[EventBusService]:
    """A real event bus with every door (Event BUS, mc0, PPPP) on ports it chose, run on a
    loop in a thread of its own so that blocking clients never stall it; its data under
    ``tmp_path / "bus"``."""
    from tests.support.bus import bus_thread

    with bus_thread(tmp_path / "bus", pppp_port=0) as service:
        yield service


@pytest.fixture
def bus_endpoints(bus: EventBusService) -> BusEndpoints:
    """The Event BUS endpoints of ``bus``, as its clients take them."""
    from zbus.eventbus.client import BusEndpoints

    return BusEndpoints.from_info(bus.info())


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A TCP port on 127.0.0.1 where nothing listens for the whole test (held bound by
    the test's process, never listening): connecting to it is refused."""
    with HeldPorts() as held:
        yield held.port


@pytest.fixture
def refused_ports() -> Iterator[HeldPorts]:
    """Four consecutive TCP ports on 127.0.0.1 where nothing listens for the whole test: a
    dead base endpoint P..P+3, or four dead endpoints."""
    with HeldPorts(4) as held:
        yield held
