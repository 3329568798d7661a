"""The FastAPI application: state from the lifespan, errors mapped to OpenAI JSON in one place."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import orjson
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from gateway import state as app_state
from gateway.errors import GatewayError, InvalidRequestError, NotFoundError
from gateway.middleware import RequestContextMiddleware
from gateway.routes import chat, health, metrics, models
from gateway.settings import Settings, load_settings

log = logging.getLogger("gateway.app")


def _error_response(error: GatewayError) -> Response:
    return Response(
        orjson.dumps(error.to_body()),
        status_code=error.status_code,
        media_type="application/json",
        headers=error.headers or None,
    )


async def _gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)
    return _error_response(exc)


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    where = ".".join(str(part) for part in first.get("loc", ()))
    return _error_response(
        InvalidRequestError(f"Invalid request: '{where}': {first.get('msg')}.", param=where or None)
    )


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return _error_response(NotFoundError(f"No route {request.url.path}."))
    error = GatewayError(str(exc.detail), code=None)
    error.status_code = exc.status_code
    error.error_type = "invalid_request_error" if exc.status_code < 500 else "server_error"
    return _error_response(error)


def create_app(
    settings: Settings | None = None, *, transport: httpx.AsyncBaseTransport | None = None
) -> FastAPI:
    """`transport` replaces the network to the engines (tests pass an httpx.MockTransport)."""
    settings = settings or load_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = app_state.build_state(settings, transport=transport)
        app.state.flashbox = state
        await app_state.start(state)
        try:
            yield
        finally:
            await app_state.stop(state)

    app = FastAPI(
        title="flashbox gateway",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.add_exception_handler(GatewayError, _gateway_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    for module in (chat, models, health, metrics):
        app.include_router(module.router)
    app.add_middleware(
        RequestContextMiddleware, max_request_id_chars=settings.limits.max_request_id_chars
    )
    return app
