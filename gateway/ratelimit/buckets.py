"""Token buckets for per-key rate limits, and this gateway's own (in-process) set of them.

A key has two buckets, as OpenAI and Anthropic describe theirs: one holds `requests_per_minute`
requests, the other `tokens_per_minute` tokens, and each refills continuously, so that an empty
bucket is full again one minute later. A bucket is kept as one number, its backlog: how long
until it is full again (GCRA's "theoretical arrival time" minus now). A request adds
60 s / requests_per_minute to the requests backlog and fits while the backlog stays within 60 s;
N tokens add N x 60 s / tokens_per_minute to the tokens backlog, which may pass 60 s (tokens
are charged after the fact), and a request is refused while it is at or past 60 s.

`judge` is the one rule, used by the local buckets here and mirrored by the shared store's
script (gateway/ratelimit/shared.py), so both decide alike.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

WINDOW_S = 60.0
# Float slack so the N-th of N requests sent at once still fits (N x 60/N may round above 60).
_SLACK_S = 1e-6

Limit = Literal["requests", "tokens"]


@dataclass(frozen=True, slots=True)
class Limits:
    requests_per_minute: int  # 0: unlimited
    tokens_per_minute: int  # 0: unlimited

    @property
    def unlimited(self) -> bool:
        return not self.requests_per_minute and not self.tokens_per_minute


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a check found; backlogs in seconds (0: the bucket is full)."""

    allowed: bool
    exceeded: Limit | None
    # The requests backlog once this request is counted (as it was, when refused).
    requests_backlog_s: float
    tokens_backlog_s: float
    retry_after_s: float  # 0 when allowed

    def remaining(self, limits: Limits) -> tuple[int, int]:
        """Requests and tokens still allowed now, as the x-ratelimit-remaining-* headers say."""
        requests = (WINDOW_S - self.requests_backlog_s) * limits.requests_per_minute / WINDOW_S
        tokens = (WINDOW_S - self.tokens_backlog_s) * limits.tokens_per_minute / WINDOW_S
        return max(0, math.floor(requests + 1e-6)), max(0, math.floor(tokens))

    def used(self, limits: Limits) -> tuple[int, int]:
        """Requests and tokens counted in the buckets now (the refusal message says them)."""
        requests = self.requests_backlog_s * limits.requests_per_minute / WINDOW_S
        tokens = self.tokens_backlog_s * limits.tokens_per_minute / WINDOW_S
        return math.ceil(requests - 1e-6), math.ceil(tokens - 1e-6)


def judge(limits: Limits, requests_backlog_s: float, tokens_backlog_s: float) -> Verdict:
    """Whether one more request fits buckets with these backlogs, and when it would."""
    exceeded: Limit | None = None
    retry = 0.0
    after = requests_backlog_s
    if limits.requests_per_minute:
        after = requests_backlog_s + WINDOW_S / limits.requests_per_minute
        if after > WINDOW_S + _SLACK_S:
            exceeded, retry = "requests", after - WINDOW_S
    if limits.tokens_per_minute and tokens_backlog_s >= WINDOW_S:
        wait = tokens_backlog_s - WINDOW_S
        if exceeded is None or wait > retry:
            exceeded, retry = "tokens", wait
    if exceeded is not None:
        return Verdict(False, exceeded, requests_backlog_s, tokens_backlog_s, retry)
    return Verdict(True, None, after, tokens_backlog_s, 0.0)


class LocalBuckets:
    """Buckets of this gateway's own traffic, for at most `max_keys` keys.

    A key's entry is the two instants (this process's monotonic clock) at which its buckets are
    full again; once both have passed the entry says nothing and is dropped. Beyond `max_keys`
    the key seen least recently is forgotten (its buckets count as full).
    """

    def __init__(self, max_keys: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._max_keys = max_keys
        self._clock = clock
        self._entries: OrderedDict[str, list[float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def check(self, key: str, limits: Limits) -> Verdict:
        """Judge one more request of `key`; counts it when it fits."""
        now = self._clock()
        entry = self._entry(key, now)
        verdict = judge(limits, max(entry[0] - now, 0.0), max(entry[1] - now, 0.0))
        if verdict.allowed:
            entry[0] = now + verdict.requests_backlog_s
        return verdict

    def count(self, key: str, limits: Limits) -> None:
        """A request the shared store let through: this gateway's own traffic, counted here too
        so these buckets are up to date when the store fails."""
        if limits.requests_per_minute:
            now = self._clock()
            entry = self._entry(key, now)
            entry[0] = max(entry[0], now) + WINDOW_S / limits.requests_per_minute

    def charge(self, key: str, limits: Limits, tokens: int) -> None:
        """A finished request's tokens."""
        if limits.tokens_per_minute and tokens > 0:
            now = self._clock()
            entry = self._entry(key, now)
            entry[1] = max(entry[1], now) + tokens * WINDOW_S / limits.tokens_per_minute

    def _entry(self, key: str, now: float) -> list[float]:
        entries = self._entries
        # Drop the entry seen least recently if it has refilled: one per call keeps the map
        # free of dead entries without a sweep.
        if entries:
            oldest_key, oldest = next(iter(entries.items()))
            if oldest_key != key and max(oldest) <= now:
                del entries[oldest_key]
        entry = entries.get(key)
        if entry is None:
            entry = entries[key] = [now, now]
            while len(entries) > self._max_keys:
                entries.popitem(last=False)
        else:
            entries.move_to_end(key)
        return entry
