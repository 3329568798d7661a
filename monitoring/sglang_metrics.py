"""The metrics SGLang exports (FACTS.md section 5), under the colon names it really uses.

Checked against the real sglang-kt 0.7.2 server (tests/e2e/test_wire_diff.py): it has no
`sglang:num_aborted_requests_total`, which FACTS.md lists; the simulator keeps exporting it
for its own tests, and no dashboard reads it.

The engine dashboard may only query these; the simulator must export them (a test checks both).
Labels include `model_name`.
"""

from __future__ import annotations

HISTOGRAMS = (
    "sglang:time_to_first_token_seconds",
    "sglang:inter_token_latency_seconds",
    "sglang:e2e_request_latency_seconds",
    "sglang:queue_time_seconds",
)
GAUGES = (
    "sglang:gen_throughput",
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:token_usage",
    "sglang:cache_hit_rate",
    "sglang:mamba_usage",
)
COUNTERS = (
    "sglang:prompt_tokens_total",
    "sglang:generation_tokens_total",
    "sglang:cached_tokens_total",
    "sglang:num_requests_total",
)


def sample_names() -> frozenset[str]:
    """Every series name these metrics produce in the exposition format."""
    names = set(GAUGES) | set(COUNTERS)
    for histogram in HISTOGRAMS:
        names |= {f"{histogram}_bucket", f"{histogram}_sum", f"{histogram}_count"}
    return frozenset(names)
