"""The simulator's Prometheus metrics, under SGLang's own `sglang:*` names.

One registry per app instance, so several simulators (or tests) in one process never share
counters. Latencies are wall-clock seconds, as a client of this process sees them.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    20.0,
    40.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1200.0,
)
_ITL_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.03,
    0.04,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    1.0,
    2.5,
)


class SimMetrics:
    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name"]
        r = self.registry

        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, labels, registry=r, buckets=buckets)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=r)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=r)

        self.ttft = hist(
            "sglang:time_to_first_token_seconds", "Time to first token.", _LATENCY_BUCKETS
        ).labels(model_name)
        self.itl = hist(
            "sglang:inter_token_latency_seconds", "Gap between tokens.", _ITL_BUCKETS
        ).labels(model_name)
        self.e2e = hist(
            "sglang:e2e_request_latency_seconds", "Arrival to finish.", _LATENCY_BUCKETS
        ).labels(model_name)
        self.queue_time = hist(
            "sglang:queue_time_seconds", "Time spent waiting in the queue.", _LATENCY_BUCKETS
        ).labels(model_name)
        self.gen_throughput = gauge("sglang:gen_throughput", "Decode tokens per second.").labels(
            model_name
        )
        self.running = gauge("sglang:num_running_reqs", "Running requests.").labels(model_name)
        self.queued = gauge("sglang:num_queue_reqs", "Queued requests.").labels(model_name)
        self.token_usage = gauge("sglang:token_usage", "KV token usage (0-1).").labels(model_name)
        self.cache_hit_rate = gauge(
            "sglang:cache_hit_rate", "Cached share of prompt tokens (0-1)."
        ).labels(model_name)
        self.mamba_usage = gauge(
            "sglang:mamba_usage", "Share of recurrent-state checkpoint slots in use (0-1)."
        ).labels(model_name)
        self.prompt_tokens = counter("sglang:prompt_tokens", "Prompt tokens.").labels(model_name)
        self.generation_tokens = counter("sglang:generation_tokens", "Generated tokens.").labels(
            model_name
        )
        self.cached_tokens = counter("sglang:cached_tokens", "Prompt tokens from cache.").labels(
            model_name
        )
        self.requests = counter("sglang:num_requests", "Finished requests.").labels(model_name)
        self.aborted = counter("sglang:num_aborted_requests", "Aborted requests.").labels(
            model_name
        )
        # The simulator's own (the engine exports no such counters): prompt-head checkpoints
        # saved, and prefills that restored from one.
        self.head_checkpoints_saved = counter(
            "flashbox_sim_head_checkpoints_saved", "Prompt-head checkpoints saved."
        ).labels(model_name)
        self.head_checkpoints_restored = counter(
            "flashbox_sim_head_checkpoints_restored", "Prefills restored from a prompt head."
        ).labels(model_name)
        self._prompt_seen = 0
        self._cached_seen = 0

    def record_prefill(self, prompt_tokens: int, cached_tokens: int) -> None:
        self.prompt_tokens.inc(prompt_tokens)
        self.cached_tokens.inc(cached_tokens)
        self._prompt_seen += prompt_tokens
        self._cached_seen += cached_tokens
        if self._prompt_seen:
            self.cache_hit_rate.set(self._cached_seen / self._prompt_seen)

    def render(self) -> bytes:
        return generate_latest(self.registry)
