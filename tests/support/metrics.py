"""A process's Prometheus samples, read with prometheus_client's own text parser."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families


def metric_samples(url: str, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample called `name` on `url`/metrics."""
    text = httpx.get(url + "/metrics", timeout=5).text
    return [
        (dict(sample.labels), sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


def affinity_outcomes(url: str) -> dict[tuple[str, str], float]:
    """flashbox_affinity_total by (outcome, lineage)."""
    return {
        (labels["outcome"], labels["lineage"]): value
        for labels, value in metric_samples(url, "flashbox_affinity_total")
    }
