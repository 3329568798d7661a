"""Checkpoint-hit accounting of the multi-turn workload (bench.sessions)."""

from __future__ import annotations

from dataclasses import replace

from bench.sessions import EngineTiming, TurnResult, summarize_turns, with_engine_timings


def _turn(session: int, turn: int, ttft: float, eligible: bool, hit: bool) -> TurnResult:
    return TurnResult(
        session=session,
        turn=turn,
        ok=True,
        ttft=ttft,
        prompt_tokens=1000,
        cached_tokens=768 if hit else 0,
        eligible=eligible,
        hit=hit,
        replica="a",
        error=None,
    )


def test_hit_ratio_counts_only_eligible_turns() -> None:
    turns = [
        _turn(0, 1, 50.0, False, False),
        _turn(0, 2, 10.0, True, True),
        _turn(0, 3, 11.0, True, True),
        _turn(1, 1, 52.0, False, False),
        _turn(1, 2, 110.0, True, False),
    ]
    summary = summarize_turns(turns)
    assert summary["eligible"] == 3
    assert summary["hits"] == 2
    assert summary["hit_ratio"] == 2 / 3
    assert summary["ttft_later_turns"]["count"] == 3
    assert summary["ttft_later_turns"]["p50"] == 11.0
    assert summary["ttft_by_turn"][1]["p50"] == 51.0


def test_engine_timings_put_router_time_at_its_own_scale() -> None:
    # Wall TTFT 0.5 s at time scale 0.01 reads as 50 s scaled; the engine's share was 0.45 s
    # of wall time and 44 s modelled, so the path around it took 0.05 s, not 5 s.
    timed = replace(_turn(0, 2, 50.0, True, True), rid="r1", ttft_scaled=50.0)
    untimed = replace(_turn(0, 3, 20.0, True, True), rid="r2", ttft_scaled=20.0)
    timings = {"r1": EngineTiming(wall_ttft_s=0.45, model_ttft_s=44.0)}
    corrected = with_engine_timings([timed, untimed], timings, time_scale=0.01)
    assert corrected[0].ttft is not None
    assert abs(corrected[0].ttft - 44.05) < 1e-9
    assert corrected[0].ttft_scaled == 50.0
    assert corrected[1] == untimed  # no timing: the scaled figure stays
    summary = summarize_turns(corrected)
    assert summary["ttft_later_turns_scaled"]["p50"] == 35.0
