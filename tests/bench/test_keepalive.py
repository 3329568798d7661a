"""bench keepalive: a short run measures both faces' keepalives during a real prefill."""

from __future__ import annotations

import pytest

from bench.keepalive import markdown, measure

# A real prefill at the reference host's pace, twice: ~20 s, so make test-full only.
pytestmark = pytest.mark.slow


def test_keepalives_are_counted_and_on_time_during_a_prefill() -> None:
    results = measure(interval_s=0.2, prompt_tokens=2_000)  # ~1.6 s of prefill each
    assert [r.face for r in results] == ["anthropic ping", "responses in_progress"]
    for result in results:
        assert result.keepalives >= 3, result
        assert result.worst_gap_s > 0
        assert result.worst_ratio < 5, result  # a loose bound: this box is shared
    assert "| idle | anthropic ping |" in markdown([("idle", results[0])])
