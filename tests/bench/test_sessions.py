"""Checkpoint-hit accounting of the multi-turn workload (bench.sessions)."""

from __future__ import annotations

from bench.sessions import TurnResult, summarize_turns


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
