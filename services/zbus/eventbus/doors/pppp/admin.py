"""What the PPPP door shows: Prometheus metrics, the admin API's ``GET /api/v1/pppp`` and
the door's line in ``GET /api/v1/bus``.

The door's core belongs to the door's thread. Every view is computed there, through
:meth:`~zbus.eventbus.doors.pppp.door.PpppDoor.submit`, and handed back as plain values:
the admin API awaits it for at most :data:`ADMIN_TIMEOUT` and answers 503 when the door
does not answer; a Prometheus scrape (synchronous, on the admin's event loop) waits at
most :data:`METRICS_TIMEOUT` and then leaves the door's families out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import HTTPException
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from zbus.eventbus.core.pppp import identity_text
from zbus.eventbus.doors.pppp.door import PpppDoor

log = logging.getLogger(__name__)

TOP_CHANNELS = 20  # channels with their own backlog label; the rest are "other"
ADMIN_TIMEOUT = 5.0  # seconds the admin API waits for the door's thread
METRICS_TIMEOUT = 1.0  # seconds a scrape waits for it (the admin's event loop waits too)
T = TypeVar("T")


async def ask(door: PpppDoor, fn: Callable[[PpppDoor], T]) -> T:
    """``fn(door)`` computed on the door's thread, awaited :data:`ADMIN_TIMEOUT` at most.

    Raises:
        HTTPException: 503 when the door does not answer in time or has stopped.
    """
    future = door.submit(fn)
    wait = ADMIN_TIMEOUT
    try:
        async with asyncio.timeout(wait):
            return await asyncio.wrap_future(future)
    except TimeoutError:
        future.cancel()
        raise HTTPException(
            503, f"the PPPP door did not answer within {wait:g} s (its thread is busy or stuck)"
        ) from None
    except RuntimeError as exc:
        raise HTTPException(503, f"the PPPP door cannot answer: {exc}") from None


def _backlogs(door: PpppDoor) -> list[tuple[str, int, int, int]]:
    """(channel, sequence, subscribers, backlog) of every channel, largest backlog first
    (on the door's thread)."""
    core = door.core
    out = []
    for name, channel in core.channels.channels.items():
        out.append((name, channel.head, len(channel.subscribers), core.backlog(channel)))
    out.sort(key=lambda row: (-row[3], row[0]))
    return out


@dataclass(frozen=True, slots=True)
class Counts:
    """What a scrape shows, copied on the door's thread."""

    live: int
    grace: int
    channels: int
    backlogs: list[tuple[str, int, int, int]]
    received: dict[str, int]
    malformed: dict[str, int]
    sent: dict[str, int]
    nacks: int
    first_idle_resends: int
    disconnects: int
    grace_expiries: int
    stream_gaps: int
    blocked_sends: int
    unavailable: int
    customs_published: int
    customs_failed: int
    cache_bytes: int
    state_ignored: int = 0


def counts(door: PpppDoor) -> Counts:
    """The door's counts (on the door's thread)."""
    core = door.core
    live = sum(1 for s in core.subscribers.values() if s.live)
    group = door.group
    malformed = dict(core.malformed)
    if group is not None:  # what a follower's door dropped: it serves no subscriber
        malformed["not_leader"] = group.not_leader
    return Counts(
        live=live,
        grace=len(core.subscribers) - live,
        channels=len(core.channels),
        backlogs=_backlogs(door),
        received=dict(core.received),
        malformed=malformed,
        sent=dict(core.sent),
        nacks=core.nacks,
        first_idle_resends=core.first_idle_resends,
        disconnects=core.disconnects,
        grace_expiries=core.grace_expiries,
        stream_gaps=core.stream_gaps,
        blocked_sends=door.blocked_sends,
        unavailable=core.unavailable,
        customs_published=door.customs_published,
        customs_failed=door.customs_failed,
        cache_bytes=core.cache.held,
        state_ignored=group.bad_events if group is not None else 0,
    )


class PpppMetrics(Collector):
    """The door's counts, computed on its thread when Prometheus scrapes (``zbus_pppp_*``)."""

    def __init__(self, door: PpppDoor, registry: CollectorRegistry) -> None:
        self.door = door
        registry.register(self)

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        future = self.door.submit(counts)
        try:
            c = future.result(METRICS_TIMEOUT)
        except (TimeoutError, RuntimeError) as exc:
            future.cancel()
            log.warning("pppp door: no metrics", extra={"error": str(exc) or "no answer"})
            return
        family = GaugeMetricFamily(
            "zbus_pppp_subscribers",
            "PPPP subscribers, connected (live) or disconnected and kept for the grace period",
            labels=["state"],
        )
        family.add_metric(["live"], c.live)
        family.add_metric(["grace"], c.grace)
        yield family
        yield GaugeMetricFamily("zbus_pppp_channels", "PPPP channels", value=c.channels)
        backlog = GaugeMetricFamily(
            "zbus_pppp_backlog",
            f"Messages of a channel not ACKed by all its subscribers (the {TOP_CHANNELS} "
            'largest by name; channel="other": the largest of the rest)',
            labels=["channel"],
        )
        rows = c.backlogs
        for name, _, _, depth in rows[:TOP_CHANNELS]:
            backlog.add_metric([name], depth)
        if len(rows) > TOP_CHANNELS:
            backlog.add_metric(["other"], rows[TOP_CHANNELS][3])
        yield backlog
        for name, doc, label, source in (
            ("received", "PPPP messages received, by command", "command", c.received),
            ("malformed", "PPPP messages dropped, by reason", "reason", c.malformed),
            ("sent", "PPPP messages sent, by kind", "kind", c.sent),
        ):
            counter = CounterMetricFamily(f"zbus_pppp_{name}", doc, labels=[label])
            for key, value in sorted(source.items()):
                counter.add_metric([key], value)
            yield counter
        for name, doc, value in (
            ("resends", "PPPP messages sent again (NACKed or first-idle)", c.sent["resend"]),
            ("nacks", "PPPP messages NACKed by subscribers", c.nacks),
            (
                "first_idle_resends",
                "PPPP last messages sent again to a subscriber silent past misses x first idle",
                c.first_idle_resends,
            ),
            ("disconnects", "PPPP subscribers disconnected after misses x idle", c.disconnects),
            (
                "grace_expiries",
                "PPPP conversations dropped after the grace period",
                c.grace_expiries,
            ),
            ("stream_gaps", "Gaps in the bus's stream repaired from the log", c.stream_gaps),
            (
                "blocked_sends",
                "PPPP sends put off: the subscriber's queue was full",
                c.blocked_sends,
            ),
            ("unavailable", "PPPP messages the log no longer held", c.unavailable),
            (
                "state_ignored",
                "PPPP state events of the log ignored: unreadable or not the door's",
                c.state_ignored,
            ),
        ):
            yield CounterMetricFamily(f"zbus_pppp_{name}", doc, value=value)
        customs = CounterMetricFamily(
            "zbus_pppp_customs", "PPPP CUSTOMs, by result", labels=["result"]
        )
        customs.add_metric(["published"], c.customs_published)
        customs.add_metric(["refused"], c.customs_failed + c.malformed["custom_too_large"])
        yield customs
        yield GaugeMetricFamily(
            "zbus_pppp_cache_bytes",
            "Bytes of recent events the PPPP door holds",
            value=c.cache_bytes,
        )


def pppp_status(door: PpppDoor, after: str | None, limit: int) -> dict[str, Any]:
    """The admin API's view: channels, and one page of subscribers by identity (on the
    door's thread: :func:`read_status`).

    Raises:
        ValueError: ``after`` is not hex.
    """
    core = door.core
    start = bytes.fromhex(after) if after is not None else None
    identities = sorted(i for i in core.subscribers if start is None or i > start)
    page = identities[:limit]
    subscribers = []
    for identity in page:
        sub = core.subscribers[identity]
        channels = {}
        for name, conv in sub.conversations.items():
            channels[name] = {
                "acked": conv.acked,
                "sent": conv.sent,
                "resend": sum(b - a + 1 for a, b in conv.resend),
                "syncing": conv.sync is not None,
                "live": conv.live,
            }
        subscribers.append(
            {
                "identity": identity.hex(),
                "name": identity_text(identity),
                "state": "live" if sub.live else "grace",
                "channels": channels,
            }
        )
    return {
        "endpoint": door.endpoint,
        "serving": door.serving,
        "sequence": core.taken,
        "channels": [
            {"channel": name, "sequence": head, "subscribers": count, "backlog": depth}
            for name, head, count, depth in _backlogs(door)
        ],
        "subscribers": subscribers,
        "next": page[-1].hex() if len(identities) > limit else None,
    }


def pppp_summary(door: PpppDoor) -> dict[str, Any]:
    """The door's line in ``GET /api/v1/bus`` (on the door's thread: :func:`read_summary`)."""
    core = door.core
    live = sum(1 for s in core.subscribers.values() if s.live)
    return {
        "endpoint": door.endpoint,
        "serving": door.serving,
        "peers": {"live": live, "grace": len(core.subscribers) - live},
        "subscribers": live,
        "subscriptions": len(core.channels),
        "malformed": sum(core.malformed.values()),
    }


async def read_status(door: PpppDoor, after: str | None, limit: int) -> dict[str, Any]:
    """:func:`pppp_status`, asked of the door's thread.

    Raises:
        ValueError: ``after`` is not hex.
        HTTPException: 503, the door did not answer.
    """
    if after is not None:
        bytes.fromhex(after)  # a ValueError here, not on the door's thread
    return await ask(door, lambda d: pppp_status(d, after, limit))


async def read_summary(door: PpppDoor) -> dict[str, Any]:
    """:func:`pppp_summary`, asked of the door's thread.

    Raises:
        HTTPException: 503, the door did not answer.
    """
    return await ask(door, pppp_summary)


__all__ = [
    "ADMIN_TIMEOUT",
    "Counts",
    "PpppMetrics",
    "ask",
    "counts",
    "pppp_status",
    "pppp_summary",
    "read_status",
    "read_summary",
]
