"""What the PPPP door shows: Prometheus metrics and the admin API's ``GET /api/v1/pppp``.

Both read the door's core from another thread while the door runs. They copy each dict
or set first (one C-level copy, atomic under the GIL) and read plain integers from it, so
that a scrape never sees a container change size under it, and never blocks the door.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from zbus.eventbus.core.pppp_subscribers import identity_text
from zbus.eventbus.server.pppp_door import PpppDoor

TOP_CHANNELS = 20  # channels with their own backlog label; the rest are "other"


def _backlogs(door: PpppDoor) -> list[tuple[str, int, int, int]]:
    """(channel, sequence, subscribers, backlog) of every channel, largest backlog first."""
    core = door.core
    out = []
    for name, channel in dict(core.channels.channels).items():
        out.append((name, channel.head, len(channel.subscribers), core.backlog(channel)))
    out.sort(key=lambda row: (-row[3], row[0]))
    return out


class PpppMetrics(Collector):
    """The door's counts, read from its core when Prometheus scrapes (``zbus_pppp_*``)."""

    def __init__(self, door: PpppDoor, registry: CollectorRegistry) -> None:
        self.door = door
        registry.register(self)

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        door, core = self.door, self.door.core
        subscribers = list(dict(core.subscribers).values())
        live = sum(1 for s in subscribers if s.live)
        family = GaugeMetricFamily(
            "zbus_pppp_subscribers",
            "PPPP subscribers, connected (live) or disconnected and kept for the grace period",
            labels=["state"],
        )
        family.add_metric(["live"], live)
        family.add_metric(["grace"], len(subscribers) - live)
        yield family
        yield GaugeMetricFamily("zbus_pppp_channels", "PPPP channels", value=len(core.channels))
        backlog = GaugeMetricFamily(
            "zbus_pppp_backlog",
            f"Messages of a channel not ACKed by all its subscribers (the {TOP_CHANNELS} "
            'largest by name; channel="other": the largest of the rest)',
            labels=["channel"],
        )
        rows = _backlogs(door)
        for name, _, _, depth in rows[:TOP_CHANNELS]:
            backlog.add_metric([name], depth)
        if len(rows) > TOP_CHANNELS:
            backlog.add_metric(["other"], rows[TOP_CHANNELS][3])
        yield backlog
        for name, doc, label, source in (
            ("received", "PPPP messages received, by command", "command", core.received),
            ("malformed", "PPPP messages dropped, by reason", "reason", core.malformed),
            ("sent", "PPPP messages sent, by kind", "kind", core.sent),
        ):
            counter = CounterMetricFamily(f"zbus_pppp_{name}", doc, labels=[label])
            for key, value in sorted(dict(source).items()):
                counter.add_metric([key], value)
            yield counter
        for name, doc, value in (
            ("resends", "PPPP messages sent again (NACKed or first-idle)", core.sent["resend"]),
            ("nacks", "PPPP messages NACKed by subscribers", core.nacks),
            (
                "first_idle_resends",
                "PPPP last messages sent again to a subscriber silent past misses x first idle",
                core.first_idle_resends,
            ),
            ("disconnects", "PPPP subscribers disconnected after misses x idle", core.disconnects),
            (
                "grace_expiries",
                "PPPP conversations dropped after the grace period",
                core.grace_expiries,
            ),
            ("stream_gaps", "Gaps in the bus's stream repaired from the log", door.stream_gaps),
            (
                "blocked_sends",
                "PPPP sends put off: the subscriber's queue was full",
                door.blocked_sends,
            ),
            ("unavailable", "PPPP messages the log no longer held", core.unavailable),
        ):
            yield CounterMetricFamily(f"zbus_pppp_{name}", doc, value=value)
        customs = CounterMetricFamily(
            "zbus_pppp_customs", "PPPP CUSTOMs, by result", labels=["result"]
        )
        customs.add_metric(["published"], door.customs_published)
        customs.add_metric(["refused"], door.customs_failed + core.malformed["custom_too_large"])
        yield customs
        yield GaugeMetricFamily(
            "zbus_pppp_cache_bytes",
            "Bytes of recent events the PPPP door holds",
            value=core.cache.held,
        )


def pppp_status(door: PpppDoor, after: str | None, limit: int) -> dict[str, Any]:
    """The admin API's view: channels, and one page of subscribers by identity.

    Raises:
        ValueError: ``after`` is not hex.
    """
    core = door.core
    start = bytes.fromhex(after) if after is not None else None
    identities = sorted(i for i in dict(core.subscribers) if start is None or i > start)
    page = identities[:limit]
    subscribers = []
    for identity in page:
        sub = core.subscribers.get(identity)
        if sub is None:
            continue
        channels = {}
        for name, conv in dict(sub.conversations).items():
            channels[name] = {
                "acked": conv.acked,
                "sent": conv.sent,
                "resend": sum(b - a + 1 for a, b in list(conv.resend)),
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
        "sequence": core.taken,
        "channels": [
            {"channel": name, "sequence": head, "subscribers": count, "backlog": depth}
            for name, head, count, depth in _backlogs(door)
        ],
        "subscribers": subscribers,
        "next": page[-1].hex() if len(identities) > limit else None,
    }


__all__ = ["PpppMetrics", "pppp_status"]
