"""Anthropic's error envelope for every failure the gateway can meet, mapped in one place.

`{"type": "error", "error": {"type", "message"}, "request_id"}` with a `request-id` header.
Types are Anthropic's own (Claude Code's retry and compaction logic keys on them): 400
invalid_request_error, 401 authentication_error, 403 permission_error, 404 not_found_error,
413 request_too_large, 429 rate_limit_error, 504 timeout_error, 529 overloaded_error (no
replica or the admission queue's deadline passed: retry later), api_error for the rest.
A prompt the engine finds too long is said in Anthropic's words, which Claude Code compacts on.
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime

import orjson
from starlette.responses import Response

from gateway.errors import ContextLengthError, GatewayError, NoReplicaError
from gateway.ratelimit import Decision

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
}


def status(error: GatewayError) -> int:
    # Out of capacity (no replica, queue deadline): Anthropic's "overloaded", which clients retry.
    if isinstance(error, NoReplicaError) or error.status_code == 503:
        return 529
    return error.status_code


def error_type(error: GatewayError) -> str:
    code = status(error)
    if code == 529:
        return "overloaded_error"
    return _TYPES.get(code, "api_error")


def message(error: GatewayError) -> str:
    if isinstance(error, ContextLengthError):
        prompt, context, output = error.prompt_tokens, error.context_length, error.output_tokens
        if output is not None and prompt < context:
            return (
                f"input length and `max_tokens` exceed context limit: {prompt} + {output} > "
                f"{context}, decrease input length or `max_tokens` and try again"
            )
        return f"prompt is too long: {prompt} tokens > {context} maximum"
    return error.message


def error_body(error: GatewayError, request_id: str) -> bytes:
    return orjson.dumps(
        {
            "type": "error",
            "error": {"type": error_type(error), "message": message(error)},
            "request_id": request_id,
        }
    )


def error_response(error: GatewayError, request_id: str) -> Response:
    headers = {**error.headers, "request-id": request_id}
    return Response(
        error_body(error, request_id),
        status_code=status(error),
        media_type="application/json",
        headers=headers,
    )


def middleware_error_body(status_code: int, message_text: str, request_id: str) -> bytes:
    """The envelope for errors answered before any route (headers too large, a crash)."""
    kind = _TYPES.get(status_code, "api_error" if status_code >= 500 else "invalid_request_error")
    return orjson.dumps(
        {
            "type": "error",
            "error": {"type": kind, "message": message_text},
            "request_id": request_id,
        }
    )


def limit_headers(decision: Decision) -> list[tuple[bytes, bytes]]:
    """Anthropic's rate-limit headers (anthropic-ratelimit-{requests,tokens}-{limit,remaining,
    reset}, reset the RFC 3339 instant the bucket is full again), for the limits a key has."""
    limits, verdict = decision.limits, decision.verdict
    requests, tokens = verdict.remaining(limits)
    now = time.time()
    headers: list[tuple[bytes, bytes]] = []
    for name, limit, remaining, backlog in (
        ("requests", limits.requests_per_minute, requests, verdict.requests_backlog_s),
        ("tokens", limits.tokens_per_minute, tokens, verdict.tokens_backlog_s),
    ):
        if limit:
            full_at = datetime.fromtimestamp(math.ceil(now + backlog), UTC)
            reset = full_at.strftime("%Y-%m-%dT%H:%M:%SZ")
            prefix = f"anthropic-ratelimit-{name}-"
            headers += [
                ((prefix + "limit").encode(), str(limit).encode()),
                ((prefix + "remaining").encode(), str(remaining).encode()),
                ((prefix + "reset").encode(), reset.encode()),
            ]
    return headers
