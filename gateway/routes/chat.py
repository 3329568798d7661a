"""POST /v1/chat/completions: hop 1 here, the rest in ChatRun.

`serve_chat` is how requests really arrive: gateway.admission calls it directly, past
Starlette's router, FastAPI's request handler and the exception middleware — layers that cost
time before the engine sees the request and a wrapper call on every streamed chunk. The
FastAPI route stays for the OpenAPI schema, for 405 on other methods, and for any stack
built without the admission middleware.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.errors import GatewayError
from gateway.routes.chat_input import parse_chat, read_body
from gateway.routes.chat_run import ChatRun
from gateway.routes.deps import app_state, error_response

router = APIRouter()


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    state = app_state(request)
    scope_state = request.scope["state"]
    model = "unknown"
    try:
        state.auth.check(request.headers.get("authorization"))
        body = await read_body(request, state.settings.limits.max_body_bytes)
        chat = parse_chat(body, state.settings)
        model = chat.model
        record = state.admit(model, scope_state["arrival"])
    except GatewayError as exc:
        state.refused(model, exc)
        raise
    run = ChatRun(
        state,
        chat,
        record,
        scope_state["request_id"],
        scope_state,
        request.headers.get("x-session-id"),
    )
    return await run.respond(request.receive)


async def serve_chat(scope: Scope, receive: Receive, send: Send) -> None:
    """The route as a bare ASGI app; GatewayError is answered as the app's handler would."""
    try:
        response = await chat_completions(Request(scope, receive))
    except GatewayError as exc:
        response = error_response(exc)
    await response(scope, receive, send)
