"""The Anthropic Messages face's HTTP surface: POST /v1/messages (Claude Code adds
`?beta=true`), POST /v1/messages/count_tokens, and HEAD/GET /api/hello (Claude Code's
connection probe). Hop 1 here, the rest in the core's Run.

Like the OpenAI chat route, the two POSTs are bare ASGI apps that gateway.app.GatewayApp calls
past FastAPI's layers; every answer, errors included, is in Anthropic's shape with a
`request-id` header.
"""

from __future__ import annotations

import orjson
from fastapi import APIRouter
from pydantic import ValidationError
from starlette.responses import Response
from starlette.types import Receive, Scope

from gateway.auth import authenticate
from gateway.core.bounds import Params, check_bounds
from gateway.core.counting import count_prompt_tokens
from gateway.core.images import ImageSlots
from gateway.core.request import CoreRequest, Sampling, SessionHints
from gateway.core.run import Run
from gateway.errors import ClientDisconnected, GatewayError, InvalidRequestError
from gateway.faces.anthropic.convert import (
    API,
    Headers,
    check_tool_references,
    convert_messages,
    convert_tool_choice,
    convert_tools,
    template_kwargs,
    thinking_on,
    to_core,
)
from gateway.faces.anthropic.encode import MessagesAnswer
from gateway.faces.anthropic.errors import error_response
from gateway.faces.anthropic.protocol import CountTokensRequest, MessagesRequest
from gateway.faces.body import check_counts, load_json_body, read_body
from gateway.faces.endpoint import face_endpoint
from gateway.faces.reasoning import request_codec
from gateway.faces.validation import validation_message
from gateway.state import AppState

router = APIRouter()

# The Messages API's names for the bounded fields (gateway.core.bounds).
PARAMS = Params(stop="stop_sequences")


def _validated(model: type[MessagesRequest | CountTokensRequest], raw: dict[str, object]) -> object:
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        text, param = validation_message(exc)
        raise InvalidRequestError(text, param=param, code="invalid_value") from exc


async def _read(
    state: AppState, headers: Headers, receive: Receive
) -> tuple[dict[str, object], int]:
    # The key was checked by admission (gateway.auth), before anything was charged.
    limits = state.settings.limits
    body = await read_body(receive, headers.get(b"content-length"), limits.max_body_bytes)
    raw = load_json_body(body, limits, state.settings.media.json_bypass_min_bytes)
    check_counts(raw, limits)
    return raw, len(body)


async def _respond(state: AppState, scope: Scope, receive: Receive) -> Response:
    scope_state = scope["state"]
    headers = Headers(scope["headers"])
    model = "unknown"
    try:
        authenticate(scope, state.auth)  # admission's decision (gateway.auth)
        raw, size = await _read(state, headers, receive)
        request = _validated(MessagesRequest, raw)
        assert isinstance(request, MessagesRequest)
        settings = state.settings
        extra = request.model_extra or {}
        # Bound to the request's key, for its input and its answer (gateway.faces.reasoning).
        codec = request_codec(state, scope, size)
        core = to_core(
            request,
            codec=codec,
            settings=settings,
            headers=headers,
            body_bytes=size,
            custom_params=extra.get("custom_params"),
        )
        check_bounds(core, settings.limits, PARAMS)
        # Any model name is served by the served model (Claude Code asks for claude-* ids for
        # subagents): the metrics count it under the served name, the answer echoes the ask.
        model = settings.model.served_names[0]
        record = state.admit(model, scope_state["arrival"], API)
    except GatewayError as exc:
        state.refused(model, exc, API)
        raise
    except ClientDisconnected:
        state.metrics.requests.labels(model=model, code="499", api=API).inc()
        raise
    answer = MessagesAnswer(
        scope_state["rid"],
        request.model,
        codec,
        core.sampling.stop,
        {"request-id": scope_state["request_id"]},
        show_thinking=request.thinking is None or request.thinking.display != "omitted",
    )
    run = Run(state, core, answer, record, scope_state, keepalive_s=settings.anthropic.keepalive_s)
    return await run.respond(receive)


# POST /v1/messages as a bare ASGI app.
serve_messages = face_endpoint(_respond, error_response)


async def _count(state: AppState, scope: Scope, receive: Receive) -> Response:
    headers = Headers(scope["headers"])
    raw, size = await _read(state, headers, receive)
    request = _validated(CountTokensRequest, raw)
    assert isinstance(request, CountTokensRequest)
    images = ImageSlots()
    codec = request_codec(state, scope, size)
    messages = convert_messages(request, codec, state.settings, images)
    tools = convert_tools(request.tools)
    check_tool_references(messages, tools, size, state.settings.limits)
    core = CoreRequest(
        api=API,
        model=request.model,
        messages=messages,
        tools=tools,
        tool_choice=convert_tool_choice(request),
        template_kwargs=template_kwargs(request),
        sampling=Sampling(),
        stream=False,
        session=SessionHints(),
        body_bytes=size,
        thinking=thinking_on(request),
        images=images or None,
    )
    # The same bounds as the request it counts (a count is not a way around them).
    check_bounds(core, state.settings.limits, PARAMS)
    count = await count_prompt_tokens(state, core)
    return Response(
        orjson.dumps({"input_tokens": count}),
        media_type="application/json",
        headers={"request-id": scope["state"]["request_id"]},
    )


# POST /v1/messages/count_tokens: the rendered prompt's exact token count, from the engine.
serve_count_tokens = face_endpoint(_count, error_response)


@router.api_route("/api/hello", methods=["GET", "HEAD"])
async def hello() -> Response:
    """Claude Code's connection-warming probe: answered at once, no auth, no work."""
    return Response(status_code=200)
