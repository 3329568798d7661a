"""bench.media_load runs end to end on a small load and reports both phases."""

from __future__ import annotations

from bench.media_load import _markdown, measure


def test_a_small_run_reports_both_phases() -> None:
    result = measure(requests=3, image_clients=1)
    assert result["image_requests"] >= 1
    for phase in ("alone", "under_image_load"):
        assert result[phase]["p50_ms"] > 0
    assert "| ratio |" in _markdown(result)
