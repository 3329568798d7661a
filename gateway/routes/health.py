"""GET /health (the gateway process is alive) and GET /ready (a replica can take work)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import JSONResponse

from gateway.routes.deps import app_state

router = APIRouter()


@router.get("/health")
async def health(request: Request) -> JSONResponse:
    state = app_state(request)
    if state.settings.auth.protect_health:
        state.auth.check(request.headers.get("authorization"))
    return JSONResponse({"status": "ok"})


@router.get("/ready")
async def ready(request: Request) -> JSONResponse:
    state = app_state(request)
    if state.settings.auth.protect_health:
        state.auth.check(request.headers.get("authorization"))
    replicas = {r.name: r.healthy for r in state.picker.replicas}
    ok = any(replicas.values())
    return JSONResponse(
        {"status": "ready" if ok else "unavailable", "replicas": replicas},
        status_code=200 if ok else 503,
    )
