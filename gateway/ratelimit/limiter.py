"""Per-API-key rate limits: who a request counts against, its limits, the decision, the refusal.

gateway.admission asks `RateLimiter.check` before a request takes an admission slot (so before
any engine work) and `charge`s the request's prompt + completion tokens once its response is
sent. A key is known by its key id, the first 12 hex digits of its sha256: that id, never the
key, is what the settings, the logs, the error messages and the shared store see. Without
api_keys (no authentication) the limits apply per client address ("addr:<ip>"): anything else
a client sends could be changed at will to dodge them.

With `state_url` the buckets are in the shared store and hold across the fleet; when the store
fails (or is being skipped after a failure) the local buckets decide. Those count this
gateway's own traffic all the time, so each gateway then enforces the limits on what it serves
itself (a fleet of N gateways may serve up to N times a limit until the store is back).
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from starlette.types import Scope

from gateway.errors import RateLimitError
from gateway.observability.metrics import Metrics
from gateway.ratelimit.buckets import Limits, LocalBuckets, Verdict
from gateway.ratelimit.shared import SharedBuckets
from gateway.settings import RateLimitSettings
from gateway.shared_state import SharedStore

log = logging.getLogger("gateway.ratelimit")

_NAMES = {"requests": "requests per min (RPM)", "tokens": "tokens per min (TPM)"}


def key_id(key: str) -> str:
    """The non-secret name of an API key in settings, logs and the shared store."""
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def presented_key(authorization: str | None, api_key: str | None) -> str | None:
    """The key a request carries, read as gateway.auth.ApiKeyChecker reads it."""
    if api_key and not authorization:
        return api_key.strip()
    if authorization:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return None


@dataclass(frozen=True, slots=True)
class Decision:
    """One request's rate-limit decision: what admission answers and the headers it adds."""

    key: str  # key id, or addr:<ip>
    limits: Limits
    verdict: Verdict
    source: Literal["shared", "local"]

    @property
    def allowed(self) -> bool:
        return self.verdict.allowed

    @property
    def retry_after(self) -> int:
        """Whole seconds for Retry-After: at least 1, rounded up."""
        return max(1, math.ceil(self.verdict.retry_after_s - 1e-6))

    def error(self) -> RateLimitExceeded:
        verdict, limits = self.verdict, self.limits
        exceeded = verdict.exceeded or "requests"
        used_requests, used_tokens = verdict.used(limits)
        if exceeded == "requests":
            limit, counts = limits.requests_per_minute, f"Used {used_requests}, Requested 1"
        else:
            limit, counts = limits.tokens_per_minute, f"Used {used_tokens}"
        if self.key.startswith("addr:"):
            name = f"client address {self.key.removeprefix('addr:')}"
        else:
            name = f"API key {self.key}"
        return RateLimitExceeded(
            f"Rate limit reached for {name} on {_NAMES[exceeded]}: Limit {limit}, {counts}. "
            f"Please try again in {self.retry_after}s.",
            limit=exceeded,
        )


class RateLimitExceeded(RateLimitError):
    """A key's rate limit, in OpenAI's words: type "requests" or "tokens", code
    rate_limit_exceeded (the Anthropic face answers 429 rate_limit_error)."""

    default_code = "rate_limit_exceeded"

    def __init__(self, message: str, *, limit: str) -> None:
        super().__init__(message)
        self.error_type = limit
        self.limit = limit


class RateLimiter:
    def __init__(
        self,
        settings: RateLimitSettings,
        metrics: Metrics,
        shared: SharedStore | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._default = Limits(settings.requests_per_minute, settings.tokens_per_minute)
        self._keys = {
            name: Limits(
                self._default.requests_per_minute
                if own.requests_per_minute is None
                else own.requests_per_minute,
                self._default.tokens_per_minute
                if own.tokens_per_minute is None
                else own.tokens_per_minute,
            )
            for name, own in settings.keys.items()
        }
        # Off (no work per request) unless some key has a limit.
        self.enabled = not self._default.unlimited or any(
            not limits.unlimited for limits in self._keys.values()
        )
        self._metrics = metrics
        self.local = LocalBuckets(settings.max_tracked_keys, clock)
        self._shared = None if shared is None else SharedBuckets(shared)

    def limits_for(self, key: str) -> Limits:
        return self._keys.get(key, self._default)

    @staticmethod
    def identify(
        scope: Scope, authenticated: bool, authorization: str | None, api_key: str | None
    ) -> str | None:
        """Who the request counts against: its key's id, or (no authentication) its address."""
        if authenticated:
            key = presented_key(authorization, api_key)
            return None if key is None else key_id(key)
        client = scope.get("client")
        return None if not client else f"addr:{client[0]}"

    async def check(self, key: str) -> Decision | None:
        """The decision for one more request of `key` (counted when allowed); None: `key` has
        no limit."""
        limits = self.limits_for(key)
        if limits.unlimited:
            return None
        if self._shared is not None:
            verdict = await self._shared.check(key, limits)
            if verdict is not None:
                if verdict.allowed:
                    self.local.count(key, limits)
                return self._decided(Decision(key, limits, verdict, "shared"))
        return self._decided(Decision(key, limits, self.local.check(key, limits), "local"))

    def _decided(self, decision: Decision) -> Decision:
        metrics = self._metrics
        metrics.child(metrics.rate_limit_checks, decision.source).inc()
        if not decision.allowed:
            limit = decision.verdict.exceeded or "requests"
            metrics.child(metrics.rate_limited, limit, decision.source).inc()
            log.debug("rate limited: %s on %s (%s)", decision.key, limit, decision.source)
        return decision

    async def charge(self, key: str, tokens: int) -> None:
        """A finished request's prompt + completion tokens, into its key's tokens bucket."""
        limits = self.limits_for(key)
        if not limits.tokens_per_minute or tokens <= 0:
            return
        self.local.charge(key, limits, tokens)
        if self._shared is not None:
            await self._shared.charge(key, limits, tokens)
