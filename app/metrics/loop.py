"""Lock-free histograms and counters for metrics updated only on the event loop thread.

prometheus_client's ``Histogram.observe`` takes a lock for the sum and another for the bucket
(~2.5 us each call); ``/route`` records six observations per request, which made metrics the
largest single cost of the decision (see ``bench/bench_route.py``). Everything that updates
these runs on the event loop thread (async handlers and pure ASGI middleware), so plain
Python integers suffice. They are exposed through prometheus_client's own metric families and
registry, so the text format, names and ``_bucket``/``_sum``/``_count`` series are the
library's.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

# The library's own ``le`` formatting (unannotated upstream, hence the typed alias).
_le: Callable[[float], str] = floatToGoString


# A speed exception, kept because it pays: six locked observations were the largest cost of a
# decision (module docstring).
class HistogramChild:
    """One label set's buckets: ``observe`` is a bisect and two additions."""

    __slots__ = ("_bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last slot is +Inf
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self._bounds, value)] += 1
        self.total += value


class CounterChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class LoopHistogram(Collector):
    """A labelled histogram registered on ``registry`` (upper bounds ``le``, Prometheus style)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Iterable[float],
        registry: CollectorRegistry,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = tuple(sorted(float(b) for b in buckets))
        self._children: dict[tuple[str, ...], HistogramChild] = {}
        registry.register(self)

    def labels(self, *values: str, **by_name: str) -> HistogramChild:
        values = _label_values(self.name, self.labelnames, values, by_name)
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = HistogramChild(self.bounds)
        return child

    def observe(self, value: float) -> None:
        """Observe on the histogram without labels."""
        self.labels().observe(value)

    def describe(self) -> list[Metric]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in list(self._children.items()):
            cumulative = 0
            buckets = []
            for bound, count in zip((*self.bounds, float("inf")), list(child.counts), strict=True):
                cumulative += count
                buckets.append((_le(bound), float(cumulative)))
            family.add_metric(list(values), buckets, child.total)
        yield family


class LoopCounter(Collector):
    """A labelled counter (exposed with the ``_total`` suffix) registered on ``registry``."""

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], *, registry: CollectorRegistry
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], CounterChild] = {}
        registry.register(self)

    def labels(self, *values: str, **by_name: str) -> CounterChild:
        values = _label_values(self.name, self.labelnames, values, by_name)
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = CounterChild()
        return child

    def describe(self) -> list[Metric]:
        return [CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in list(self._children.items()):
            family.add_metric(list(values), child.value)
        yield family


def _label_values(
    name: str, labelnames: tuple[str, ...], values: tuple[str, ...], by_name: dict[str, str]
) -> tuple[str, ...]:
    if by_name:
        if values or set(by_name) != set(labelnames):
            raise ValueError(f"{name}: expected labels {labelnames}, got {values or by_name}")
        return tuple(str(by_name[n]) for n in labelnames)
    if len(values) != len(labelnames):
        raise ValueError(f"{name}: expected labels {labelnames}, got {values}")
    return tuple(str(v) for v in values)
