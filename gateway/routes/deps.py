"""Access to the app's state from a route (built in the lifespan; see gateway.app), and the
one place a GatewayError becomes its OpenAI-shaped JSON response."""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.errors import GatewayError
from gateway.state import AppState


def app_state(request: Request) -> AppState:
    state: AppState = request.app.state.flashbox
    return state


def error_response(error: GatewayError) -> Response:
    return Response(
        orjson.dumps(error.to_body()),
        status_code=error.status_code,
        media_type="application/json",
        headers=error.headers or None,
    )
