"""Access to the app's state from a route (built in the lifespan; see gateway.app)."""

from __future__ import annotations

from starlette.requests import Request

from gateway.state import AppState


def app_state(request: Request) -> AppState:
    state: AppState = request.app.state.flashbox
    return state
