"""Per-replica circuit breaker: passive failure detection from the requests themselves.

Health probes catch a dead engine within a probe interval; the breaker catches one that answers
/health but fails requests (5xx, broken streams). After `threshold` failures in a row it opens
for `open_s`; then one trial request is let through (half-open), and its outcome closes or
reopens it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(slots=True)
class CircuitBreaker:
    threshold: int = 5
    open_s: float = 10.0
    failures: int = 0
    opened_at: float | None = None
    trial_in_flight: bool = False

    def configure(self, threshold: int, open_s: float) -> None:
        self.threshold, self.open_s = threshold, open_s

    def state(self, now: float) -> BreakerState:
        if self.opened_at is None:
            return BreakerState.CLOSED
        if now - self.opened_at < self.open_s:
            return BreakerState.OPEN
        return BreakerState.HALF_OPEN

    def allows(self, now: float) -> bool:
        state = self.state(now)
        return state is BreakerState.CLOSED or (
            state is BreakerState.HALF_OPEN and not self.trial_in_flight
        )

    def on_pick(self, now: float) -> None:
        if self.state(now) is BreakerState.HALF_OPEN:
            self.trial_in_flight = True

    def trial_over(self) -> None:
        """A request that told nothing of the replica ended (the engine refused it as the
        client's mistake, the client left, it never reached the engine): were it the half-open
        trial, the next request is let through instead. (A request picked before the breaker
        opened may end so too; at worst two trials then run.)"""
        self.trial_in_flight = False

    def success(self) -> None:
        self.failures, self.opened_at, self.trial_in_flight = 0, None, False

    def failure(self, now: float) -> None:
        self.failures += 1
        self.trial_in_flight = False
        if self.opened_at is not None or self.failures >= self.threshold:
            self.opened_at = now
