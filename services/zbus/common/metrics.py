"""Exporting counts kept by sans-I/O logic, read when Prometheus scrapes; reading
them back as totals (for admin APIs and the dashboard's sampler)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
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


def family_totals(
    families: Iterable[Metric], name: str, label: str | None = None
) -> dict[str, float]:
    """The values of metric family ``name`` summed by ``label`` (every sample under the
    key ``""`` when ``label`` is None), from a registry's ``collect()`` or parsed
    Prometheus text. A counter is read from its ``_total`` samples, a gauge from its own;
    a histogram's or summary's samples are not summed.

    Args:
        families: metric families, e.g. ``registry.collect()``.
        name: the family's name, without ``_total``.
        label: the label to group by; samples without it count under ``""``.
    """
    out: dict[str, float] = {}
    for family in families:
        if family.name != name:
            continue
        wanted = f"{name}_total" if family.type == "counter" else name
        for sample in family.samples:
            if sample.name != wanted:
                continue
            key = sample.labels.get(label, "") if label is not None else ""
            out[key] = out.get(key, 0.0) + float(sample.value)
    return out
