"""GET /v1/models and GET /v1/models/{id}: the served names from settings, in a shape both
OpenAI's and Anthropic's clients read (Claude Code's model discovery reads `data[].id` and
`display_name`; each SDK's `models.retrieve` reads the one object).

Generation accepts any model name, but these list only `model.served_names`: an unknown id is
a 404 (OpenAI's `model_not_found`), as the list would not show it. Errors on these paths are
OpenAI-shaped like every path outside /v1/messages; Anthropic's SDK goes by the status."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import JSONResponse

from gateway.errors import NotFoundError
from gateway.settings import ModelSettings
from gateway.state import app_state

router = APIRouter()


def _model_object(name: str, model: ModelSettings) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": 0,
        "owned_by": model.owned_by,
        "type": "model",
        "display_name": name,
        "created_at": "1970-01-01T00:00:00Z",
    }


def _served(request: Request) -> ModelSettings:
    state = app_state(request)
    state.auth.check(request.headers.get("authorization"), request.headers.get("x-api-key"))
    return state.settings.model


@router.get("/v1/models")
async def list_models(request: Request) -> JSONResponse:
    model = _served(request)
    names = model.served_names
    return JSONResponse(
        {
            "object": "list",
            "data": [_model_object(name, model) for name in names],
            "has_more": False,
            "first_id": names[0],
            "last_id": names[-1],
        }
    )


# `path`: served names may hold a slash (org/model, as Hugging Face names them).
@router.get("/v1/models/{model_id:path}")
async def retrieve_model(request: Request, model_id: str) -> JSONResponse:
    model = _served(request)
    if model_id not in model.served_names:
        raise NotFoundError(
            f"The model {model_id!r} is not served here; served: "
            f"{', '.join(model.served_names)} (GET /v1/models).",
            param="model",
            code="model_not_found",
        )
    return JSONResponse(_model_object(model_id, model))
