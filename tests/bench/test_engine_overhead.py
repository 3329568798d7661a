"""`python -m bench overhead --engine-url URL`: both ways measured over each engine, in one run
(here a simulator stands in for the real server, which `make engine-cpu` starts)."""

from __future__ import annotations

from bench import engine_overhead
from tests.support.procs import start_sim


def test_the_benchmark_measures_both_engines_both_ways() -> None:
    engine = start_sim(name="stand-in", as_launched=True)
    try:
        results = engine_overhead.run(
            engine.url, requests=3, max_tokens=8, warmup=1, time_scale=0.001
        )
    finally:
        engine.stop()
    assert [r.engine for r in results] == ["simulator", "sglang-kt"]
    for result in results:
        assert result.requests == 3
        assert result.direct_ttft_p50_ms > 0
        assert result.gateway_ttft_p50_ms > 0
        assert result.added_p50_ms == result.gateway_ttft_p50_ms - result.direct_ttft_p50_ms
        # Three requests may take less gateway CPU than the process clock's tick.
        assert result.gateway_cpu_us_per_token >= 0
    assert "| sglang-kt | 3 |" in engine_overhead.table(results)
