"""GET /v1/models: the served names from settings."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import JSONResponse

from gateway.routes.deps import app_state

router = APIRouter()


@router.get("/v1/models")
async def list_models(request: Request) -> JSONResponse:
    state = app_state(request)
    state.auth.check(request.headers.get("authorization"))
    model = state.settings.model
    data = [
        {"id": name, "object": "model", "created": 0, "owned_by": model.owned_by}
        for name in model.served_names
    ]
    return JSONResponse({"object": "list", "data": data})
