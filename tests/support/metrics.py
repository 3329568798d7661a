"""A process's Prometheus samples, read with prometheus_client's own text parser."""

from __future__ import annotations

from bench.procs import metric_samples

__all__ = ["affinity_outcomes", "metric_samples"]


def affinity_outcomes(url: str) -> dict[tuple[str, str], float]:
    """flashbox_affinity_total by (outcome, lineage)."""
    return {
        (labels["outcome"], labels["lineage"]): value
        for labels, value in metric_samples(url, "flashbox_affinity_total")
    }
