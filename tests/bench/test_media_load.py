"""bench.media_load runs end to end on a small load and reports every phase (no timing
asserted)."""

from __future__ import annotations

import math
import os

from bench.media_load import _markdown, _split_cpus, measure


def test_a_small_run_reports_every_phase() -> None:
    result = measure(requests=3, rounds=2, image_rate=4.0, image_clients=1, image_requests=2)
    assert result["images_only"]["image_requests"] == 2
    assert result["images_only"]["cpu_ms_per_image_request"]["gateway"] > 0
    for phase in ("alone", "via_gateway", "straight_to_engine"):
        assert result[phase]["ttft"]["p50_ms"] > 0
        assert not math.isnan(result[phase]["hops"]["p50_ms"])
    for phase in ("via_gateway", "straight_to_engine"):
        assert result[phase]["image_requests"] >= 1
        assert result[phase]["image_errors"] == 0
    # Straight to the engine, the gateway relays only these few text requests: its CPU can be
    # under the process clock's 10 ms tick, so 0 is possible there; never with images on it.
    assert 0 < result["via_gateway"]["gateway_share_of_cpu"] < 1
    assert 0 <= result["straight_to_engine"]["gateway_share_of_cpu"] < 1
    assert result["images_only"]["image_errors"] == 0
    text = _markdown(result)
    assert "| images straight to the engine |" in text
    assert "The gateway's share" in text


def test_pinning_is_undone_for_the_calling_process() -> None:
    if not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2:
        return
    affinity = os.sched_getaffinity(0)
    result = measure(
        requests=2, rounds=1, image_rate=4.0, image_clients=1, image_requests=1, pin=True
    )
    assert os.sched_getaffinity(0) == affinity
    assert result["cpus"] is not None


def test_cpus_are_split_between_the_gateway_and_the_rest() -> None:
    assert _split_cpus({0}) is None
    assert _split_cpus({0, 1}) == ({0}, {1})
    assert _split_cpus({2, 3, 5, 7, 8}) == ({2, 3}, {5, 7, 8})
