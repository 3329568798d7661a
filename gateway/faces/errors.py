"""The one place a GatewayError becomes its OpenAI-shaped JSON response (the chat and Responses
faces, and the routes that are not a face); the Anthropic face has its own envelope
(gateway.faces.anthropic.errors)."""

from __future__ import annotations

import orjson
from starlette.responses import Response

from gateway.errors import GatewayError


def error_response(error: GatewayError) -> Response:
    return Response(
        orjson.dumps(error.to_body()),
        status_code=error.status_code,
        media_type="application/json",
        headers=error.headers or None,
    )
