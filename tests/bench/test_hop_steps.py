"""bench.hop_steps: every step of the request path runs, and is timed warm and after idling."""

from __future__ import annotations

from bench.hop_steps import markdown, measure


def test_every_step_is_timed_for_both_requests() -> None:
    results = measure(repeats=3, idle_ms=0.1, tool_calls=3)
    assert list(results) == ["one message", "3 tool results"]
    for steps in results.values():
        assert list(steps) == [
            "parse + validate",
            "session key",
            "render",
            "replica pick",
            "engine body + parser",
            "all of the above",
        ]
        assert all(warm > 0 and idle > 0 for warm, idle in steps.values())
    table = markdown(results, 0.1)
    assert "| render |" in table
    assert "after 0.1 ms of sleep" in table
