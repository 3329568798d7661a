"""The simulator's ASGI app: routes, and the engine built in the lifespan (no globals)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from engine.sim import info, native, openai_chat, tokenize
from engine.sim.engine import SimEngine
from engine.sim.errors import error_response
from engine.sim.settings import SimSettings


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
    return error_response(exc.status_code, str(exc.detail), kind)


async def _server_error(request: Request, exc: Exception) -> Response:
    return error_response(500, f"simulator error: {type(exc).__name__}", "server_error")


def build_app(settings: SimSettings) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        engine = SimEngine(settings)
        app.state.engine = engine
        engine.scheduler.start()
        try:
            yield
        finally:
            await engine.scheduler.stop()

    routes = [
        Route("/generate", native.generate, methods=["POST"]),
        Route("/abort_request", native.abort_request, methods=["POST"]),
        Route("/tokenize", tokenize.tokenize, methods=["POST"]),
        Route("/v1/tokenize", tokenize.tokenize, methods=["POST"]),
        Route("/health", info.health, methods=["GET"]),
        Route("/health_generate", info.health_generate, methods=["GET"]),
        Route("/model_info", info.model_info, methods=["GET"]),
        Route("/get_model_info", info.model_info, methods=["GET"]),
        Route("/server_info", info.server_info, methods=["GET"]),
        Route("/get_server_info", info.server_info, methods=["GET"]),
        Route("/v1/models", info.models, methods=["GET"]),
        Route("/metrics", info.metrics, methods=["GET"]),
        Route("/v1/chat/completions", openai_chat.chat_completions, methods=["POST"]),
        Route("/sim/config", info.sim_config, methods=["GET", "POST"]),
        Route("/sim/model", info.sim_model, methods=["GET"]),
        Route("/sim/timings", info.sim_timings, methods=["GET"]),
    ]
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_error, 500: _server_error},
    )
