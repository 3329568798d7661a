"""Rate-limit response headers in OpenAI's style (x-ratelimit-*), for the OpenAI faces.

Sent on every response of a request that has a limit (gateway.admission adds them at the
response's start) and on its 429: the limit, what is left now, and how long until the bucket
is full again, written as OpenAI writes durations ("20ms", "1.5s", "6m0s"). Only the limits a
key has are described. The Anthropic face writes its own (gateway.faces.anthropic.errors).
"""

from __future__ import annotations

from gateway.ratelimit.limiter import Decision

Headers = list[tuple[bytes, bytes]]


def duration(seconds: float) -> str:
    """A duration as OpenAI's reset headers write it."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    minutes, rest = divmod(round(seconds, 3), 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".")
    return f"{int(minutes)}m{text}s" if minutes else f"{text}s"


def openai_limit_headers(decision: Decision) -> Headers:
    limits, verdict = decision.limits, decision.verdict
    requests, tokens = verdict.remaining(limits)
    headers: Headers = []
    if limits.requests_per_minute:
        headers += [
            (b"x-ratelimit-limit-requests", str(limits.requests_per_minute).encode()),
            (b"x-ratelimit-remaining-requests", str(requests).encode()),
            (b"x-ratelimit-reset-requests", duration(verdict.requests_backlog_s).encode()),
        ]
    if limits.tokens_per_minute:
        headers += [
            (b"x-ratelimit-limit-tokens", str(limits.tokens_per_minute).encode()),
            (b"x-ratelimit-remaining-tokens", str(tokens).encode()),
            (b"x-ratelimit-reset-tokens", duration(verdict.tokens_backlog_s).encode()),
        ]
    return headers
