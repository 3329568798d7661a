"""The per-token ITL histogram exposes exactly what prometheus_client's Histogram would."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from gateway.observability.metrics import ITL_BUCKETS, Metrics
from gateway.observability.token_histogram import TokenGapHistogram

# Below, on, between and above the bucket bounds, with repeats.
SAMPLES = [(0.0, 1), (0.001, 2), (0.005, 1), (0.0051, 3), (0.075, 1), (0.2, 1), (2.0, 1), (9.5, 4)]


def _exposition(registry: CollectorRegistry) -> list[str]:
    text = generate_latest(registry).decode()
    # prometheus_client adds a `_created` series (a timestamp); ours has none.
    return [line for line in text.splitlines() if "_created" not in line]


def test_same_exposition_as_prometheus_histogram() -> None:
    reference, ours = CollectorRegistry(), CollectorRegistry()
    histogram = Histogram(
        "gap_seconds", "Gaps.", ["model"], buckets=ITL_BUCKETS, registry=reference
    )
    gaps = TokenGapHistogram("gap_seconds", "Gaps.", "model", ITL_BUCKETS, ours)
    for model in ("b", "a"):
        for value, times in SAMPLES:
            for _ in range(times):
                histogram.labels(model=model).observe(value)
            gaps.labels(model).observe(value, times)
    assert _exposition(ours) == _exposition(reference)


def test_itl_metric_after_observations() -> None:
    metrics = Metrics(process_metrics=False)
    child = metrics.itl.labels("m")
    child.observe(0.012)
    child.observe(0.5, 3)
    get = metrics.registry.get_sample_value
    name = "flashbox_inter_token_latency_seconds"
    assert get(f"{name}_count", {"model": "m"}) == 4.0
    assert get(f"{name}_sum", {"model": "m"}) == 0.012 + 1.5
    assert get(f"{name}_bucket", {"model": "m", "le": "0.015"}) == 1.0
    assert get(f"{name}_bucket", {"model": "m", "le": "0.5"}) == 4.0
    assert get(f"{name}_bucket", {"model": "m", "le": "+Inf"}) == 4.0
