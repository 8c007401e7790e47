"""Exporting counts kept by sans-I/O logic, read when Prometheus scrapes."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry


class CountsCollector(Collector):
    """One labelled counter whose values are a mapping of running counts (e.g. a core's
    ``counters`` dict): nothing is copied on the hot path, the values are read at scrape.
    With ``gauge``, the values are current levels (e.g. services by state) instead."""

    def __init__(
        self,
        name: str,
        documentation: str,
        label: str,
        source: Callable[[], Mapping[str, int]],
        registry: CollectorRegistry,
        *,
        gauge: bool = False,
    ) -> None:
        self.name, self.documentation, self.label, self.source = name, documentation, label, source
        self.family = GaugeMetricFamily if gauge else CounterMetricFamily
        registry.register(self)

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        family = self.family(self.name, self.documentation, labels=[self.label])
        for key, value in sorted(self.source().items()):
            family.add_metric([key], value)
        yield family
