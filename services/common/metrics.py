"""Exporting counts kept by sans-I/O logic, read when Prometheus scrapes."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry


class CountsCollector(Collector):
    """One labelled counter whose values are a mapping of running counts (e.g. a core's
    ``counters`` dict): nothing is copied on the hot path, the values are read at scrape."""

    def __init__(
        self,
        name: str,
        documentation: str,
        label: str,
        source: Callable[[], Mapping[str, int]],
        registry: CollectorRegistry,
    ) -> None:
        self.name, self.documentation, self.label, self.source = name, documentation, label, source
        registry.register(self)

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self.name, self.documentation, labels=[self.label])
        for key, value in sorted(self.source().items()):
            family.add_metric([key], value)
        yield family
