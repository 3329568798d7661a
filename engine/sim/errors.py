"""Error responses (OpenAI-shaped JSON) and the one way request bodies are read."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from engine.sim.requests import SimRequestError

if TYPE_CHECKING:
    from engine.sim.engine import SimEngine


def error_response(
    status: int,
    message: str,
    kind: str,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
    return Response(orjson.dumps(body), status, headers=headers, media_type="application/json")


async def read_json(request: Request, engine: SimEngine) -> Any:
    limit = engine.settings.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise SimRequestError(f"the body exceeds {limit} bytes", status=413)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise SimRequestError(f"the body exceeds {limit} bytes", status=413)
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw:
        raise SimRequestError("the body is empty; send a JSON object")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise SimRequestError(f"the body is not valid JSON: {exc}") from None
