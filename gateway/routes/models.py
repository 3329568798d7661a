"""GET /v1/models: the served names from settings, in a shape both OpenAI's and Anthropic's
clients read (Claude Code's model discovery reads `data[].id` and `display_name`)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import JSONResponse

from gateway.state import app_state

router = APIRouter()


@router.get("/v1/models")
async def list_models(request: Request) -> JSONResponse:
    state = app_state(request)
    state.auth.check(request.headers.get("authorization"), request.headers.get("x-api-key"))
    model = state.settings.model
    names = model.served_names
    data = [
        {
            "id": name,
            "object": "model",
            "created": 0,
            "owned_by": model.owned_by,
            "type": "model",
            "display_name": name,
            "created_at": "1970-01-01T00:00:00Z",
        }
        for name in names
    ]
    return JSONResponse(
        {
            "object": "list",
            "data": data,
            "has_more": False,
            "first_id": names[0],
            "last_id": names[-1],
        }
    )
