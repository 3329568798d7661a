"""A smoke run of the lag benchmark (bench/sim_lag.py), so it keeps working; no timing checks."""

from __future__ import annotations

from bench import sim_lag


def test_lag_benchmark_runs_and_reports() -> None:
    results = sim_lag.run((2,), time_scale=0.01, prompt_tokens=16, output_tokens=4, rounds_single=1)
    assert len(results) == 1
    row = results[0]
    assert row["requests"] == 2
    assert row["e2e_ratio_p50"] > 0
    assert row["sim_cpu_us_per_token"] >= 0
    markdown = sim_lag.to_markdown(results, 16, 4)
    assert "| 2 | 2 | 0.01 |" in markdown
