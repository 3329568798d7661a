"""Each API face over the one core turns its API's request into a core request and the
core's deltas into its wire format (docs/architecture.md, "Faces over one core").

`ENDPOINTS` is what gateway.app.GatewayApp serves past FastAPI's layers: a new face adds its
endpoints here and its module under gateway/faces/, nothing in the core.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.types import ASGIApp

from gateway.admission import AdmissionMiddleware, LimitHeaders
from gateway.faces.anthropic import errors as anthropic_errors
from gateway.faces.anthropic import route as anthropic_route
from gateway.faces.errors import ErrorRenderer, openai_error
from gateway.faces.openai_chat import route as openai_route
from gateway.faces.responses import route as responses_route
from gateway.middleware import openai_error_body
from gateway.ratelimit import openai_limit_headers


@dataclass(frozen=True, slots=True)
class Endpoint:
    path: str  # POST only; the query string is not part of it (Claude Code adds ?beta=true)
    serve: ASGIApp
    api: str  # the metrics label
    render_error: ErrorRenderer
    # Generation requests: the app puts admission (auth, the key's rate limit, a slot in the
    # generation pool: gateway.admission) around `serve`. Counting endpoints say False: their
    # `serve` carries that same gate already, with a slot in the counting pool (`_counted`).
    admitted: bool
    # Its rate-limit headers.
    limit_headers: LimitHeaders = openai_limit_headers


def _counted(
    path: str,
    serve: ASGIApp,
    api: str,
    render_error: ErrorRenderer,
    limit_headers: LimitHeaders = openai_limit_headers,
) -> Endpoint:
    """A counting endpoint: the same auth and rate limit as generation, its own pool."""
    gate = AdmissionMiddleware(
        serve,
        controller=None,
        api=api,
        render_error=render_error,
        limit_headers=limit_headers,
        counting=True,
    )
    return Endpoint(path, gate, api, render_error, admitted=False, limit_headers=limit_headers)


ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        "/v1/chat/completions", openai_route.serve_chat, "openai", openai_error, admitted=True
    ),
    Endpoint(
        "/v1/messages",
        anthropic_route.serve_messages,
        "anthropic",
        anthropic_errors.error_response,
        admitted=True,
        limit_headers=anthropic_errors.limit_headers,
    ),
    Endpoint(
        "/v1/responses",
        responses_route.serve_responses,
        "responses",
        openai_error,
        admitted=True,
    ),
    _counted(
        "/v1/responses/input_tokens", responses_route.serve_input_tokens, "responses", openai_error
    ),
    _counted(
        "/v1/messages/count_tokens",
        anthropic_route.serve_count_tokens,
        "anthropic",
        anthropic_errors.error_response,
        anthropic_errors.limit_headers,
    ),
)

_ANTHROPIC_PREFIX = "/v1/messages"


def is_anthropic_path(path: str) -> bool:
    return path == _ANTHROPIC_PREFIX or path.startswith(_ANTHROPIC_PREFIX + "/")


def error_body(path: str, status: int, code: str, message: str, request_id: str) -> bytes:
    """Errors the request-context middleware answers itself, in the shape of the path's face."""
    if is_anthropic_path(path):
        return anthropic_errors.middleware_error_body(status, message, request_id)
    return openai_error_body(path, status, code, message, request_id)
