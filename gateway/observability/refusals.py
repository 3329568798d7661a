"""One log line for each request the gateway answers with an error of its own.

A request ends in an error response in exactly one of two places: admission's answer (auth,
the key's rate limit, a full or draining pool: gateway.admission) or the face's endpoint (a
GatewayError from the handler: validation, bounds, the fair queue, an engine that failed:
gateway.faces.endpoint). Both call `log_refusal` as they render it, so an operator sees why a
client was refused, once. The line carries what the client was told (the message, which never
quotes the body) and the request id to find the rest; never a key, never the body.
"""

from __future__ import annotations

import logging

from starlette.types import Scope

from gateway.errors import GatewayError

log = logging.getLogger("gateway.refused")

# A message is the client's, bounded by what builds it; this keeps a log line a line.
_MAX_MESSAGE_CHARS = 500


def log_refusal(scope: Scope, error: GatewayError) -> None:
    """INFO for the client's fault (4xx), WARNING for ours or the engine's (5xx)."""
    level = logging.WARNING if error.status_code >= 500 else logging.INFO
    request_id = scope.get("state", {}).get("request_id", "")
    message = error.message
    if len(message) > _MAX_MESSAGE_CHARS:
        message = message[:_MAX_MESSAGE_CHARS] + "..."
    log.log(
        level,
        "refused request_id=%s face=%s status=%d code=%s: %s",
        request_id,
        scope.get("path", ""),
        error.status_code,
        error.code or error.error_type,
        message,
    )
