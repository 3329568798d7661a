"""The FastAPI application: state from the lifespan, errors mapped to OpenAI JSON in one place."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway import state as app_state
from gateway.admission import AdmissionController, AdmissionMiddleware
from gateway.errors import GatewayError, InvalidRequestError, NotFoundError
from gateway.faces.anthropic import errors as anthropic_errors
from gateway.faces.anthropic import route as anthropic_route
from gateway.faces.errors import error_response
from gateway.faces.openai_chat import route as chat
from gateway.faces.openai_chat.protocol import ChatCompletionRequest
from gateway.faces.registry import ENDPOINTS, Endpoint, error_body, is_anthropic_path
from gateway.faces.responses import route as responses_route
from gateway.media.addresses import HostResolver
from gateway.middleware import RequestContextMiddleware
from gateway.observability.tracing import Tracing
from gateway.routes import admin, health, metrics, models
from gateway.settings import Settings, load_settings

log = logging.getLogger("gateway.app")


def _face_error(request: Request, error: GatewayError) -> Response:
    """A GatewayError in the shape of the face whose path was asked (OpenAI's by default)."""
    if is_anthropic_path(request.url.path):
        return anthropic_errors.error_response(error, request.state.request_id)
    return error_response(error)


async def _gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)
    return _face_error(request, exc)


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    where = ".".join(str(part) for part in first.get("loc", ()))
    return error_response(
        InvalidRequestError(f"Invalid request: '{where}': {first.get('msg')}.", param=where or None)
    )


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return _face_error(request, NotFoundError(f"No route {request.url.path}."))
    error = GatewayError(str(exc.detail), code=None)
    error.status_code = exc.status_code
    error.error_type = "invalid_request_error" if exc.status_code < 500 else "server_error"
    return _face_error(request, error)


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema, plus what the raw-body chat route really accepts and answers.

    The route reads its body itself (bounded, counted before validation), so FastAPI cannot
    see the model; the schema is added here so clients and schemathesis see the real contract.
    """
    if app.openapi_schema is not None:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version="1", routes=app.routes)
    request = ChatCompletionRequest.model_json_schema(
        ref_template="#/components/schemas/{model}", by_alias=True
    )
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.update(request.pop("$defs", {}))
    components["ChatCompletionRequest"] = request
    components["Error"] = _ERROR_SCHEMA
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    operation = schema["paths"]["/v1/chat/completions"]["post"]
    operation["requestBody"] = {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/ChatCompletionRequest"}}
        },
    }
    operation["responses"] = {
        "200": {
            "description": "A chat completion, or with stream=true an SSE stream of chunks.",
            "content": {"application/json": {"schema": {"type": "object"}}},
        },
        **{code: {"description": text, "content": error} for code, text in _ERROR_CODES.items()},
    }
    app.openapi_schema = schema
    return schema


_ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}
_ERROR_CODES = {
    "400": "Invalid request: the message says what to fix.",
    "401": "Missing or wrong API key.",
    "404": "Unknown model.",
    "413": "Body over limits.max_body_bytes.",
    "429": "Admission queue full, or the API key's rate limit (Retry-After).",
    "502": "The engine failed.",
    "503": "No engine replica, or the admission queue deadline passed (Retry-After).",
    "504": "The engine missed a deadline.",
}


class GatewayApp(FastAPI):
    """FastAPI, with the faces' POST endpoints taken straight to the gateway's own middleware.

    POST to a face endpoint (gateway.faces.registry.ENDPOINTS: /v1/chat/completions, ...)
    goes through the app's middleware (CORS when configured, request context) and, for
    generation requests, admission to the face's serve function, and skips what FastAPI puts
    around them: the telemetry hook, Starlette's ServerErrorMiddleware (the request context
    middleware already turns an unexpected exception into a 500 in the face's shape),
    ExceptionMiddleware and the router. Each of those is a Python call before the engine sees
    the request, and a wrapper call on every streamed chunk. Everything else takes FastAPI's
    full path.
    """

    _face_stacks: dict[str, ASGIApp] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            stacks = self._face_stacks
            if stacks is None:
                stacks = self._face_stacks = {e.path: self._build_stack(e) for e in ENDPOINTS}
            stack = stacks.get(scope["path"])
            if stack is not None:
                scope["app"] = self
                await stack(scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    def _build_stack(self, endpoint: Endpoint) -> ASGIApp:
        # Admission bounds generation requests only: innermost, inside the app's middleware.
        app: ASGIApp = endpoint.serve
        if endpoint.admitted:
            app = AdmissionMiddleware(
                app,
                controller=self.state.admission,
                api=endpoint.api,
                render_error=endpoint.render_error,
                limit_headers=endpoint.limit_headers,
            )
        for middleware in reversed(self.user_middleware):
            app = middleware.cls(app, *middleware.args, **middleware.kwargs)
        return app


def create_app(
    settings: Settings | None = None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    media_transport: httpx.AsyncBaseTransport | None = None,
    media_resolve_host: HostResolver | None = None,
) -> GatewayApp:
    """`transport` replaces the network to the engines (tests pass an httpx.MockTransport).

    `media_transport` and `media_resolve_host` replace the network and the DNS that image URLs
    are fetched through, so the remote-image defences (address policy, redirects, caps,
    timeouts) can be shown through the whole app without a network; None: the real ones.
    """
    settings = settings or load_settings()
    # None unless tracing is on (the setting or the OTEL_* endpoint variables): then the faces'
    # endpoints are traced, and the spans left are exported when the app stops.
    tracing = Tracing.build(settings.observability.tracing, [e.path for e in ENDPOINTS])

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = app_state.build_state(
            settings,
            transport=transport,
            media_transport=media_transport,
            media_resolve_host=media_resolve_host,
        )
        app.state.flashbox = state
        await app_state.start(state)
        try:
            yield
        finally:
            try:
                await app_state.stop(state)
            finally:
                if tracing is not None:
                    # Blocks while the export thread sends what is queued: off the loop.
                    await asyncio.to_thread(tracing.shutdown)

    app = GatewayApp(
        title="flashbox gateway",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    app.add_exception_handler(GatewayError, _gateway_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    for module in (chat, anthropic_route, responses_route, models, health, metrics, admin):
        app.include_router(module.router)
    # The last added runs first: CORS, then request context (arrival time, request id,
    # header bounds). GatewayApp takes chat requests through these and then admission (whose
    # queue wait counts from that arrival) straight to gateway.routes.chat.serve_chat.
    app.state.admission = AdmissionController(settings.admission, settings.shutdown)
    app.state.tracing = tracing
    security = settings.security
    app.add_middleware(
        RequestContextMiddleware,
        max_request_id_chars=settings.limits.max_request_id_chars,
        max_header_bytes=security.max_header_bytes,
        max_headers=security.max_headers,
        error_body=error_body,
        tracing=tracing,
    )
    if security.cors_allow_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=security.cors_allow_origins,
            allow_methods=["GET", "POST"],
            allow_headers=[
                "authorization",
                "x-api-key",
                "anthropic-version",
                "anthropic-beta",
                "content-type",
                "x-request-id",
                "x-session-id",
                "traceparent",
                "tracestate",
            ],
            expose_headers=[
                "x-request-id",
                "request-id",
                "x-flashbox-replica",
                "x-flashbox-trace-id",
                "retry-after",
            ],
        )
    return app
