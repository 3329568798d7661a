"""GET /health (the gateway process is alive), GET /ready (a replica can take work), and
GET / HEAD / (a one-line index: Claude Code probes `HEAD /` before its first request)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse

from gateway.state import app_state

router = APIRouter()

# What the root says: what this is and where the APIs are. No auth, no work: a client's
# reachability probe (HEAD /) must not need a key or touch an engine.
INDEX = (
    "flashbox gateway: POST /v1/chat/completions, /v1/messages, /v1/responses; "
    "GET /v1/models, /health, /ready, /metrics\n"
)


@router.api_route("/", methods=["GET", "HEAD"])
async def index() -> PlainTextResponse:
    return PlainTextResponse(INDEX)


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
