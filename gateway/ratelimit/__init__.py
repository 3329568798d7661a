"""Per-API-key rate limits: requests and tokens per minute (docs/security.md, "Rate limits";
docs/fleet.md for the shared store). `buckets` holds the rule and this gateway's own buckets,
`shared` the fleet's buckets in the shared store, `limiter` who counts against what and the
refusal, `headers` the x-ratelimit-* headers."""

from gateway.ratelimit.buckets import Limits, LocalBuckets, Verdict, judge
from gateway.ratelimit.headers import openai_limit_headers
from gateway.ratelimit.limiter import Decision, RateLimiter, RateLimitExceeded, key_id

__all__ = [
    "Decision",
    "Limits",
    "LocalBuckets",
    "RateLimitExceeded",
    "RateLimiter",
    "Verdict",
    "judge",
    "key_id",
    "openai_limit_headers",
]
