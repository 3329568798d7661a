"""Anthropic's error envelope for every failure the gateway can meet, mapped in one place.

`{"type": "error", "error": {"type", "message"}, "request_id"}` with a `request-id` header.
Types are Anthropic's own (Claude Code's retry and compaction logic keys on them): 400
invalid_request_error, 401 authentication_error, 403 permission_error, 404 not_found_error,
413 request_too_large, 429 rate_limit_error, 504 timeout_error, 529 overloaded_error (no
replica or the admission queue's deadline passed: retry later), api_error for the rest.
A prompt the engine finds too long is said in Anthropic's words, which Claude Code compacts on.
"""

from __future__ import annotations

import re

import orjson
from starlette.responses import Response

from gateway.errors import GatewayError, NoReplicaError

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
}

# SGLang: "The input (N tokens) is longer than the model's context length (M tokens)."; the
# simulator: "the prompt has N tokens; the context length is M".
_TOO_LONG = (
    re.compile(r"input \((\d+) tokens\) is longer than the model's context length \((\d+) tokens"),
    re.compile(r"prompt has (\d+) tokens; the context length is (\d+)"),
)


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
    for pattern in _TOO_LONG:
        found = pattern.search(error.message)
        if found:
            return f"prompt is too long: {found.group(1)} tokens > {found.group(2)} maximum"
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
