"""The performance model against FACTS.md section 2 (deterministic: the model's own numbers)."""

from __future__ import annotations

import pytest

from engine.sim.perf import PerfModel, interpolate
from engine.sim.profile import load_profile

# FACTS.md section 2, copied here on purpose: the test checks the profile against the source.
COLD_PREFILL_S = [
    (2048, 6.43),
    (8192, 6.57),
    (32768, 22.59),
    (61440, 48.26),
    (250_000, 332.35),
    (512_000, 1118.64),
]
DECODE_MS_BS1 = [(8192, 33.4), (32768, 33.4), (61440, 33.4), (250_000, 34.3), (512_000, 37.7)]
AGGREGATE_TPS = {1: 25.2, 2: 32.5, 4: 47.1}


@pytest.fixture(scope="module")
def perf() -> PerfModel:
    return PerfModel(load_profile())


def within(value: float, expected: float, tolerance: float = 0.10) -> bool:
    return abs(value - expected) <= tolerance * expected


@pytest.mark.parametrize(("tokens", "seconds"), COLD_PREFILL_S)
def test_cold_prefill_reproduces_the_table(perf: PerfModel, tokens: int, seconds: float) -> None:
    assert within(perf.prefill_seconds(tokens, 0), seconds)


@pytest.mark.parametrize("tokens", [1, 16, 300, 1000, 4096])
def test_short_prompts_pay_the_floor(perf: PerfModel, tokens: int) -> None:
    assert 6.0 <= perf.prefill_seconds(tokens, 0) <= 6.7


@pytest.mark.parametrize("context", [8192, 32768, 61440, 120_000, 250_000, 500_000])
@pytest.mark.parametrize("suffix", [64, 1024, 2048])
def test_checkpoint_hit_with_short_suffix_costs_about_ten_seconds(
    perf: PerfModel, context: int, suffix: int
) -> None:
    assert within(perf.prefill_seconds(context + suffix, context), 10.0)


def test_miss_at_60k_costs_about_103_seconds_more_than_a_hit(perf: PerfModel) -> None:
    # FACTS: "a checkpoint miss costs about +103 s per turn at ~60k" (baseline cold 103.4 s);
    # the tuned cold prefill is 48 s, so the modelled miss penalty is the tuned one.
    hit = perf.prefill_seconds(61440 + 1024, 61440)
    miss = perf.prefill_seconds(61440 + 1024, 0)
    assert miss > 4 * hit


@pytest.mark.parametrize(("context", "ms"), DECODE_MS_BS1)
def test_decode_ms_per_step_by_context(perf: PerfModel, context: int, ms: float) -> None:
    assert within(perf.decode_step_seconds(context, 1) * 1000, ms)


@pytest.mark.parametrize("batch", [2, 4])
def test_decode_batch_scaling_matches_aggregate_throughput(perf: PerfModel, batch: int) -> None:
    step_bs1 = perf.decode_step_seconds(8192, 1)
    step = perf.decode_step_seconds(8192, batch)
    modelled_gain = (batch / step) / (1 / step_bs1)
    assert within(modelled_gain, AGGREGATE_TPS[batch] / AGGREGATE_TPS[1])


def test_larger_batches_keep_growing_step_time(perf: PerfModel) -> None:
    steps = [perf.decode_step_seconds(8192, b) for b in (1, 2, 4, 8, 16, 64)]
    assert steps == sorted(steps)
    assert steps[-1] > steps[2]


def test_batched_prefill_shares_the_floor(perf: PerfModel) -> None:
    one = perf.prefill_batch_seconds([(500, 0)])
    four = perf.prefill_batch_seconds([(500, 0)] * 4)
    assert one == four == perf.prefill_seconds(500, 0)


def test_many_small_prompts_cost_about_one_prompt_of_their_total(perf: PerfModel) -> None:
    split = perf.prefill_batch_seconds([(256, 0)] * 64)  # 16k tokens in 64 prompts
    whole = perf.prefill_seconds(64 * 256, 0)
    assert within(split, whole)
    # Attention is quadratic: one long prompt costs more than many short ones.
    assert perf.prefill_batch_seconds([(256, 0)] * 512) < perf.prefill_seconds(512 * 256, 0)


def test_interpolate_extrapolates_with_the_end_slopes() -> None:
    table = [(0.0, 0.0), (10.0, 10.0), (20.0, 30.0)]
    assert interpolate(table, 5) == 5
    assert interpolate(table, 30) == 50
    assert interpolate(table, -10) == -10
