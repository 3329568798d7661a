"""GET /metrics: Prometheus exposition of the app's registry."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from gateway.state import app_state

router = APIRouter()


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    state = app_state(request)
    if state.settings.auth.protect_metrics:
        state.auth.check(request.headers.get("authorization"))
    # OpenMetrics when the scraper asks for it: its histograms carry exemplars (trace ids).
    body, content_type = state.metrics.exposition(request.headers.get("accept"))
    return Response(body, media_type=content_type)
