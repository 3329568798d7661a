"""A face's handler as a bare ASGI app (faces/registry.py mounts these): a GatewayError becomes
the face's own error response, logged once (gateway.observability.refusals), and a client that
left while sending its body gets nothing, since nothing was started and nobody is left to
answer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.errors import ClientDisconnected, GatewayError
from gateway.faces.errors import ErrorRenderer, openai_error
from gateway.observability.refusals import log_refusal
from gateway.state import AppState

Handler = Callable[[AppState, Scope, Receive], Awaitable[Response]]


def face_endpoint(handler: Handler, render: ErrorRenderer = openai_error) -> ASGIApp:
    async def serve(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            response = await handler(scope["app"].state.flashbox, scope, receive)
        except GatewayError as exc:
            log_refusal(scope, exc)
            response = render(exc, str(scope["state"].get("request_id", "")))
        except ClientDisconnected:
            return
        await response(scope, receive, send)

    return serve
