"""POST /v1/chat/completions: hop 1 here, the rest in ChatRun.

`serve_chat` is how requests really arrive: gateway.app.GatewayApp sends them through the
gateway's own middleware straight to it, past Starlette's router, FastAPI's request handler
and the exception middleware, and it works on the raw ASGI scope and `receive` (no Request
or Headers objects). Those layers cost time before the engine sees the request and, for the
send wrappers, on every streamed chunk. The FastAPI route stays for the OpenAPI schema, for
405 on other methods, and for any stack built without GatewayApp.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.errors import ClientDisconnected, GatewayError
from gateway.routes.chat_input import parse_chat, read_body
from gateway.routes.chat_run import ChatRun
from gateway.routes.deps import app_state, error_response
from gateway.state import AppState

router = APIRouter()

# The request headers hop 1 reads; everything else is the middleware's (request id, bounds).
_WANTED = (b"authorization", b"content-length", b"x-session-id")


def _headers(scope: Scope) -> dict[bytes, str]:
    found: dict[bytes, str] = {}
    for name, value in scope["headers"]:
        if name in _WANTED and name not in found:
            found[name] = value.decode("latin-1")
    return found


async def _respond(state: AppState, scope: Scope, receive: Receive) -> Response:
    """Auth, body, validation, admission into the metrics; then ChatRun answers."""
    scope_state: dict[str, Any] = scope["state"]
    headers = _headers(scope)
    model = "unknown"
    try:
        state.auth.check(headers.get(b"authorization"))
        limit = state.settings.limits.max_body_bytes
        body = await read_body(receive, headers.get(b"content-length"), limit)
        chat = parse_chat(body, state.settings)
        model = chat.model
        record = state.admit(model, scope_state["arrival"])
    except GatewayError as exc:
        state.refused(model, exc)
        raise
    except ClientDisconnected:
        state.metrics.requests.labels(model=model, code="499").inc()
        raise
    run = ChatRun(state, chat, record, scope_state, headers.get(b"x-session-id"))
    return await run.respond(receive)


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    try:
        return await _respond(app_state(request), request.scope, request.receive)
    except ClientDisconnected:
        return Response(status_code=499)  # nobody is left to read it


async def serve_chat(scope: Scope, receive: Receive, send: Send) -> None:
    """The route as a bare ASGI app; GatewayError is answered as the app's handler would."""
    try:
        response = await _respond(scope["app"].state.flashbox, scope, receive)
    except GatewayError as exc:
        response = error_response(exc)
    except ClientDisconnected:
        return  # left while sending its body: nothing was started, nobody to answer
    await response(scope, receive, send)
