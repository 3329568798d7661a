"""One request's timeline, turned into metrics exactly once when the request ends.

Times are `time.perf_counter()` seconds; stages are measured from the request's arrival (the
first thing the gateway's middleware does), so TTFT here is what the client sees minus network.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from gateway.observability.metrics import Metrics
from gateway.observability.token_histogram import TokenGapCounts

# How many per-token ITL observations one engine event may add. Observing is O(1) in the
# count now; the cap stays so the histogram's counts mean what they always have.
_MAX_ITL_OBSERVATIONS = 32


@dataclass(slots=True)
class RequestRecord:
    metrics: Metrics
    model: str
    arrival: float
    api: str = "openai"
    stages: dict[str, float] = field(default_factory=dict)
    first_token_at: float | None = None
    last_token_at: float | None = None
    tokens_seen: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    finished: bool = False
    # {"trace_id": ...} when the request is traced (gateway.core.run): the TTFT and e2e
    # observations carry it as an exemplar, shown in the OpenMetrics exposition.
    exemplar: dict[str, str] | None = None
    # The ITL child, looked up once: labels() per event is measurable on the hot path.
    _itl: TokenGapCounts | None = None

    def mark(self, stage: str, now: float | None = None) -> None:
        if stage not in self.stages:
            self.stages[stage] = (time.perf_counter() if now is None else now) - self.arrival

    def tokens(self, completion_tokens: int, now: float) -> None:
        """An engine event brought the completion to `completion_tokens` tokens (cumulative)."""
        new = completion_tokens - self.tokens_seen
        if new <= 0:
            return
        self.tokens_seen = completion_tokens
        if self.last_token_at is not None:
            gap = (now - self.last_token_at) / new
            itl = self._itl
            if itl is None:
                itl = self._itl = self.metrics.itl.labels(self.model)
            itl.observe(gap, min(new, _MAX_ITL_OBSERVATIONS))
        self.last_token_at = now

    def first_token(self, now: float) -> None:
        if self.first_token_at is None:
            self.first_token_at = now

    def finish(self, code: int | str, error_kind: str | None = None) -> None:
        """Record the request's metrics; later calls do nothing."""
        if self.finished:
            return
        self.finished = True
        m, model = self.metrics, self.model
        child = m.child
        now = time.perf_counter()
        api = self.api
        child(m.requests, model, str(code), api).inc()
        if error_kind is not None:
            child(m.errors, error_kind, api).inc()
        for stage, seconds in self.stages.items():
            child(m.ttft_stage, stage).observe(seconds)
        if self.prompt_tokens:
            child(m.prompt_tokens, model).inc(self.prompt_tokens)
            child(m.cached_tokens, model).inc(self.cached_tokens)
        if self.completion_tokens:
            child(m.generated_tokens, model).inc(self.completion_tokens)
        if error_kind is None:
            child(m.e2e, model).observe(now - self.arrival, self.exemplar)
        if self.first_token_at is None:
            return
        ttft = self.first_token_at - self.arrival
        child(m.ttft, model, api).observe(ttft, self.exemplar)
        uncached = self.prompt_tokens - self.cached_tokens
        if uncached > 0 and ttft > 0:
            child(m.prefill_rate, model).observe(uncached / ttft)
        decode_time = (self.last_token_at or now) - self.first_token_at
        if self.completion_tokens > 1 and decode_time > 0:
            child(m.decode_rate, model).observe((self.completion_tokens - 1) / decode_time)
