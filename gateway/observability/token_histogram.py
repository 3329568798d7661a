"""A labelled Prometheus histogram for the one metric observed once per relayed token.

prometheus_client's Histogram takes a lock for its sum and walks its buckets with another
lock per observation; on the per-token path that was a measurable share of the gateway's
CPU. Here an observation is one bisect and two additions. The exposition is the same as a
prometheus_client Histogram's (`_bucket{le}` cumulative, `_count`, `_sum`, same `le`
spelling) without the `_created` series. Observations and collection both happen on the
event loop's thread (the /metrics route renders the registry there), so no lock is needed.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.utils import floatToGoString

# prometheus_client's own `le` spelling (1.0, 0.005, +Inf), so series match its Histogram's.
_go_float: Callable[[float], str] = floatToGoString


class TokenGapCounts:
    """One label value's buckets (not cumulative; the last is +Inf) and sum."""

    __slots__ = ("_bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, amount: float, times: int = 1) -> None:
        """`times` observations of `amount` (first bucket whose bound is >= amount)."""
        self.counts[bisect_left(self._bounds, amount)] += times
        self.total += amount * times


class TokenGapHistogram:
    """A histogram with one label, registered on `registry` as a collector."""

    def __init__(
        self,
        name: str,
        documentation: str,
        label: str,
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._label = label
        self._bounds = tuple(sorted(float(b) for b in buckets if b != float("inf")))
        self._le = [_go_float(b) for b in self._bounds] + ["+Inf"]
        self._children: dict[str, TokenGapCounts] = {}
        registry.register(self)

    def labels(self, value: str) -> TokenGapCounts:
        child = self._children.get(value)
        if child is None:
            child = self._children[value] = TokenGapCounts(self._bounds)
        return child

    def _family(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(self._name, self._documentation, labels=[self._label])

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield self._family()

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = self._family()
        for value, child in self._children.items():
            cumulative, buckets = 0, []
            for le, count in zip(self._le, child.counts, strict=True):
                cumulative += count
                buckets.append((le, float(cumulative)))
            family.add_metric([value], buckets, child.total)
        yield family
