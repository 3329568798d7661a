"""Per-replica circuit breaker: passive failure detection from the requests themselves.

Health probes catch a dead engine within a probe interval; the breaker catches one that answers
/health but fails requests (5xx, broken streams). After `threshold` failures in a row it opens
for `open_s`; then one trial request is let through (half-open), and its outcome closes or
reopens it.

The trial is a lease (`TrialLease`): held by the request that was picked as it, until that
request's outcome is reported, it is forgotten, or `trial_s` passes. A request that never says
how it went (cancelled where nothing reported it, a bug) then costs the replica `trial_s`, not
every request after it: the next request takes a new lease and tries.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, slots=True)
class TrialLease:
    # The request id of the trial (RequestContext.request_id).
    holder: str
    # Monotonic seconds: past this the trial is free again, whether or not it was reported.
    until: float


@dataclass(slots=True)
class CircuitBreaker:
    threshold: int = 5
    open_s: float = 10.0
    trial_s: float = 60.0
    failures: int = 0
    opened_at: float | None = None
    trial: TrialLease | None = None

    def configure(self, threshold: int, open_s: float, trial_s: float) -> None:
        self.threshold, self.open_s, self.trial_s = threshold, open_s, trial_s

    def state(self, now: float) -> BreakerState:
        if self.opened_at is None:
            return BreakerState.CLOSED
        if now - self.opened_at < self.open_s:
            return BreakerState.OPEN
        return BreakerState.HALF_OPEN

    def trial_held(self, now: float) -> bool:
        """Whether a half-open trial's lease is running (taken, not ended, not expired)."""
        return self.trial is not None and now < self.trial.until

    def allows(self, now: float) -> bool:
        state = self.state(now)
        return state is BreakerState.CLOSED or (
            state is BreakerState.HALF_OPEN and not self.trial_held(now)
        )

    def on_pick(self, now: float, holder: str) -> TrialLease | None:
        """`holder` was picked for this replica: while half-open it takes the trial's lease
        (the lease it replaces, if any, had expired unreported: returned for the log)."""
        if self.state(now) is not BreakerState.HALF_OPEN or self.trial_held(now):
            return None
        expired, self.trial = self.trial, TrialLease(holder, now + self.trial_s)
        return expired

    def trial_over(self, holder: str) -> None:
        """A request that told nothing of the replica ended (the engine refused it as the
        client's mistake, the client left, it never reached the engine): were it the half-open
        trial, the next request is let through instead. A request whose lease expired and was
        taken by another ends nothing of the new one."""
        if self.trial is not None and self.trial.holder == holder:
            self.trial = None

    def success(self) -> None:
        self.failures, self.opened_at, self.trial = 0, None, None

    def failure(self, now: float) -> None:
        self.failures += 1
        self.trial = None
        if self.opened_at is not None or self.failures >= self.threshold:
            self.opened_at = now
