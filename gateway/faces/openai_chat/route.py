"""POST /v1/chat/completions: the OpenAI chat face's hop 1 here, the rest in the core's Run.

`serve_chat` is how requests really arrive: gateway.app.GatewayApp sends them through the
gateway's own middleware straight to it, past Starlette's router, FastAPI's request handler
and the exception middleware, and it works on the raw ASGI scope and `receive` (no Request
or Headers objects). Those layers cost time before the engine sees the request and, for the
send wrappers, on every streamed chunk. The FastAPI route stays for the OpenAPI schema, for
405 on other methods, and for any stack built without GatewayApp.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope

from gateway.auth import authenticate
from gateway.core.run import Run
from gateway.errors import ClientDisconnected, GatewayError
from gateway.faces.body import read_body
from gateway.faces.endpoint import face_endpoint
from gateway.faces.headers import read_headers
from gateway.faces.openai_chat.encode import ChatAnswer
from gateway.faces.openai_chat.input import API, parse_chat
from gateway.state import AppState, app_state

router = APIRouter()

# The request headers hop 1 reads; everything else is the middleware's (request id, bounds)
# or admission's (the key: gateway.auth).
_WANTED = (b"content-length", b"x-session-id", b"x-parent-session-id")


async def _respond(state: AppState, scope: Scope, receive: Receive) -> Response:
    """Body, validation, bounds, admission into the metrics; then the core's Run answers."""
    scope_state: dict[str, Any] = scope["state"]
    headers = read_headers(scope["headers"], _WANTED)
    model = "unknown"
    try:
        authenticate(scope, state.auth)  # admission's decision, or made here off its path
        limit = state.settings.limits.max_body_bytes
        body = await read_body(receive, headers.get(b"content-length"), limit)
        chat = parse_chat(
            body,
            state.settings,
            headers.get(b"x-session-id"),
            headers.get(b"x-parent-session-id"),
        )
        model = chat.core.model
        record = state.admit(model, scope_state["arrival"], API)
    except GatewayError as exc:
        state.refused(model, exc, API)
        raise
    except ClientDisconnected:
        state.metrics.requests.labels(model=model, code="499", api=API).inc()
        raise
    answer = ChatAnswer(
        scope_state["rid"], model, int(time.time()), include_usage=chat.include_usage
    )
    run = Run(state, chat.core, answer, record, scope_state)
    return await run.respond(receive)


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    try:
        return await _respond(app_state(request), request.scope, request.receive)
    except ClientDisconnected:
        return Response(status_code=499)  # nobody is left to read it


# The route as a bare ASGI app; GatewayError is answered as the app's handler would.
serve_chat = face_endpoint(_respond)
