"""The benchmarks' own arithmetic: percentiles, summaries, ratios."""

from __future__ import annotations

import math
import random

import pytest

from bench.stats import percentile, ratio, summarize


def test_percentile_matches_linear_interpolation_definition() -> None:
    values = [15.0, 20.0, 35.0, 40.0, 50.0]
    assert percentile(values, 0) == 15.0
    assert percentile(values, 100) == 50.0
    assert percentile(values, 50) == 35.0
    # rank 0.4 * 4 = 1.6 -> 20 + 0.6 * (35 - 20)
    assert percentile(values, 40) == pytest.approx(29.0)


def test_percentile_is_order_independent_and_monotone() -> None:
    rng = random.Random(7)
    values = [rng.random() for _ in range(101)]
    shuffled = values[:]
    rng.shuffle(shuffled)
    qs = [0, 1, 25, 50, 75, 99, 100]
    got = [percentile(shuffled, q) for q in qs]
    assert got == [percentile(values, q) for q in qs]
    assert got == sorted(got)
    assert percentile(values, 50) == sorted(values)[50]


def test_percentile_rejects_out_of_range_and_handles_empty() -> None:
    with pytest.raises(ValueError, match=r"0\.\.100"):
        percentile([1.0], 101)
    assert math.isnan(percentile([], 50))


def test_summarize_and_ratio() -> None:
    summary = summarize([1.0, 2.0, 3.0, 4.0])
    assert summary["count"] == 4
    assert summary["mean"] == 2.5
    assert summary["p50"] == 2.5
    assert summary["min"] == 1.0
    assert summary["max"] == 4.0
    assert math.isnan(summarize([])["p99"])
    assert ratio(10, 4) == 2.5
    assert math.isnan(ratio(1, 0))
