"""The one place a GatewayError becomes its OpenAI-shaped JSON response (the chat and Responses
faces, and the routes that are not a face); the Anthropic face has its own envelope
(gateway.faces.anthropic.errors). `ErrorRenderer` is the one signature both have, so the
registry names each endpoint's renderer once and admission and the endpoint use it alike."""

from __future__ import annotations

from collections.abc import Callable

import orjson
from starlette.responses import Response

from gateway.errors import GatewayError

# A face's error response for a request: the error and the request's id (Anthropic's envelope
# carries it; OpenAI's JSON does not, the middleware's x-request-id header does).
ErrorRenderer = Callable[[GatewayError, str], Response]


def error_response(error: GatewayError) -> Response:
    return Response(
        orjson.dumps(error.to_body()),
        status_code=error.status_code,
        media_type="application/json",
        headers=error.headers or None,
    )


def openai_error(error: GatewayError, request_id: str) -> Response:
    """`error_response` as an ErrorRenderer."""
    return error_response(error)
