"""Arithmetic shared by every benchmark: percentiles and summaries of recorded samples."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks.

    Same definition as numpy's default ("linear"), so figures compare with other tools.
    """
    if not values:
        return math.nan
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    if low == high:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(values: Sequence[float]) -> dict[str, float]:
    """count, mean, p50/p90/p95/p99, min and max of the samples (NaN where empty)."""
    count = len(values)
    return {
        "count": float(count),
        "mean": sum(values) / count if count else math.nan,
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "min": min(values) if count else math.nan,
        "max": max(values) if count else math.nan,
    }


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, NaN instead of a ZeroDivisionError for empty runs."""
    return numerator / denominator if denominator else math.nan
