"""The OpenAI Responses face's HTTP surface: POST /v1/responses (hop 1 here, the rest in the
core's Run), GET and DELETE /v1/responses/{id} for stored responses. Errors are OpenAI's JSON.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from fastapi import APIRouter
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope

from gateway.auth import ANONYMOUS, Caller, authenticate
from gateway.core.bounds import Params, check_bounds
from gateway.core.counting import count_prompt_tokens
from gateway.core.images import ImageSlots
from gateway.core.reasoning_codec import ReasoningCodec
from gateway.core.request import CoreRequest, Sampling, SessionHints
from gateway.core.run import Run
from gateway.errors import ClientDisconnected, GatewayError, InvalidRequestError, NotFoundError
from gateway.faces.body import check_counts, load_json_body, read_body
from gateway.faces.endpoint import face_endpoint
from gateway.faces.headers import read_headers
from gateway.faces.reasoning import request_codec
from gateway.faces.responses.convert import (
    convert_input,
    convert_tool_choice,
    convert_tools,
    effort,
)
from gateway.faces.responses.encode import ResponseInfo, ResponsesAnswer
from gateway.faces.responses.protocol import ResponsesRequest
from gateway.faces.validation import validation_message
from gateway.state import AppState, app_state

API = "responses"
router = APIRouter()
# The Responses API's names for the bounded fields (gateway.core.bounds).
PARAMS = Params(
    messages="input",
    max_tokens="max_output_tokens",
    tools_counted=" functions (namespace members counted)",
)

ENCRYPTED_REASONING = "reasoning.encrypted_content"
LOGPROBS = "message.output_text.logprobs"
_WANTED = (
    b"content-length",
    b"x-session-id",
    b"session_id",
    b"session-id",
    b"thread-id",
)
# What the response object echoes back of the request, as the client sent it.
_ECHO = (
    "instructions",
    "max_output_tokens",
    "parallel_tool_calls",
    "previous_response_id",
    "reasoning",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_p",
    "metadata",
    "store",
)


async def _history(
    state: AppState, request: ResponsesRequest, caller: Caller = ANONYMOUS
) -> tuple[list[Any], int]:
    """The conversation a previous_response_id names, before this request's input (from this
    gateway's store or the fleet's, gateway.responses_store.StoredResponses), and its stored
    size. Another key's response is answered as one that is not there: its id says nothing
    about it."""
    previous = request.previous_response_id
    if previous is None:
        return [], 0
    stored = await state.responses.get(previous, caller.key_id)
    if stored is None:
        raise InvalidRequestError(
            f"Previous response with id '{previous}' not found: it was never stored here, "
            "was deleted, or was evicted from the bounded store (responses.store_* settings); "
            "send the whole conversation as input instead.",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    return list(stored.conversation), stored.size


def _response_of(item_id: str) -> str | None:
    """The response that made an output item of ours: ItemWriter names items
    `{prefix}_{rid}_{index}` and the response is `resp_{rid}`; None for any other id."""
    _, sep, rest = item_id.partition("_")
    rid, sep2, index = rest.rpartition("_")
    if not sep or not sep2 or not rid or not index.isdigit():
        return None
    return f"resp_{rid}"


async def _referenced(
    state: AppState, items: str | list[Any], history: list[Any], caller: Caller = ANONYMOUS
) -> tuple[str | list[Any], int]:
    """The input with each `item_reference` replaced by the item it names, and the bytes those
    items add. An item is looked for in the previous_response_id's conversation, then in the
    stored response whose output it is (its id names it), the caller's key's only, as GET finds
    them; the conversations read are searched for the later references too, and the latest
    reference is resolved first, because a response's stored conversation holds the items its
    own input referenced: one read usually resolves a whole replayed history. The item comes
    back as stored, its reasoning as the exact text the model wrote (the stored `content`, so
    the prompt still extends the one that made it); its `encrypted_content` is left behind, as
    the text it would restore is already there."""
    if isinstance(items, str) or not any(
        isinstance(item, dict) and item.get("type") == "item_reference" for item in items
    ):
        return items, 0
    known: dict[str, Any] = {}

    def learn(conversation: list[Any]) -> None:
        for item in conversation:
            if isinstance(item, dict) and item.get("type") != "item_reference":
                item_id = item.get("id")
                if isinstance(item_id, str) and item_id:
                    known.setdefault(item_id, item)

    learn(history)
    read: set[str] = set()
    out = list(items)
    added = 0
    for index in range(len(out) - 1, -1, -1):
        item = out[index]
        if not (isinstance(item, dict) and item.get("type") == "item_reference"):
            continue
        where = f"input.{index}.id"
        item_id = item.get("id")
        if not isinstance(item_id, str) or not item_id:
            raise InvalidRequestError(
                f"{where}: an item_reference needs the id of a stored item.", param=where
            )
        found = known.get(item_id)
        response_id = _response_of(item_id) if found is None else None
        if response_id is not None and response_id not in read:
            read.add(response_id)
            stored = await state.responses.get(response_id, caller.key_id)
            if stored is not None:
                learn(stored.conversation)
                found = known.get(item_id)
        if found is None:
            raise InvalidRequestError(
                f"{where}: no stored item with id '{item_id}': its response was never stored "
                "here (store: false), was deleted, or was evicted from the bounded store "
                "(responses.store_* settings); send the item itself instead.",
                param=where,
            )
        resolved = {key: value for key, value in found.items() if key != "encrypted_content"}
        out[index] = resolved
        added += len(orjson.dumps(resolved))
    return out, added


def _echo(request: ResponsesRequest, raw: dict[str, Any]) -> dict[str, Any]:
    echo = {key: raw.get(key) for key in _ECHO}
    echo["tools"] = raw.get("tools") or []
    echo["tool_choice"] = raw.get("tool_choice") or "auto"
    echo["parallel_tool_calls"] = request.parallel_tool_calls is not False
    echo["store"] = request.store
    echo["metadata"] = raw.get("metadata") or {}
    return echo


async def _respond(state: AppState, scope: Scope, receive: Receive) -> Response:
    scope_state = scope["state"]
    headers = read_headers(scope["headers"], _WANTED)
    model = "unknown"
    settings = state.settings
    try:
        caller = authenticate(scope, state.auth)  # admission's decision (gateway.auth)
        request, raw, size = await _parsed(state, headers, receive)
        history, history_bytes = await _history(state, request, caller)
        items, referenced_bytes = await _referenced(state, request.input, history, caller)
        # Bound to the request's key, for its input and its answer (gateway.faces.reasoning).
        sent = size + history_bytes + referenced_bytes
        codec = request_codec(state, scope, sent)
        core, names, conversation = _core(state, request, raw, sent, headers, history, codec, items)
        # Any model name is served by the served model, echoed back in the answer.
        model = settings.model.served_names[0]
        record = state.admit(model, scope_state["arrival"], API)
    except GatewayError as exc:
        state.refused(model, exc, API)
        raise
    except ClientDisconnected:
        state.metrics.requests.labels(model=model, code="499", api=API).inc()
        raise

    writes: list[asyncio.Task[None]] = []

    def stored(response: dict[str, Any]) -> None:
        write = state.responses.put(response, [*conversation, *response["output"]], caller.key_id)
        if write is not None:
            writes.append(write)

    info = ResponseInfo(
        response_id=f"resp_{scope_state['rid']}",
        model=request.model,
        created_at=int(time.time()),
        echo=_echo(request, raw),
    )
    answer = ResponsesAnswer(
        rid=scope_state["rid"],
        info=info,
        codec=codec,
        names=names,
        on_done=stored if request.store else None,
        encrypted_reasoning=ENCRYPTED_REASONING in (request.include or ()),
    )
    run = Run(state, core, answer, record, scope_state, keepalive_s=settings.responses.keepalive_s)
    response = await run.respond(receive)
    if writes:
        # A non-streamed answer leaves only once the shared store has it (or the write failed,
        # within state.timeout_s), so a follow-up through any gateway finds it. A stream's
        # write starts as its last event is encoded.
        await asyncio.wait(writes)
    return response


def _core(
    state: AppState,
    request: ResponsesRequest,
    raw: dict[str, Any],
    sent: int,
    headers: dict[bytes, str],
    history: list[Any],
    codec: ReasoningCodec | None = None,
    items: str | list[Any] | None = None,
) -> tuple[CoreRequest, Any, list[Any]]:
    """`sent`: the bytes the request brought, its stored history and referenced items included
    (sent before, by the same key);
    `codec`: the request's own (gateway.faces.reasoning); None: the app's, unbound;
    `items`: the input with its item references resolved (`_referenced`); None: as sent."""
    tools, names = convert_tools(request.tools)
    if items is None:
        items = request.input
    current = [{"role": "user", "content": items}] if isinstance(items, str) else list(items)
    conversation = [*history, *current]
    images = ImageSlots()
    messages = convert_input(
        request.instructions, conversation, codec or state.reasoning_codec, names, images
    )
    kwargs, thinking = effort(request.reasoning.effort if request.reasoning else None)
    fmt = request.text.format if request.text is not None else None
    schema = None
    if fmt is not None and fmt.type == "json_schema":
        schema = orjson.dumps(fmt.schema_ or {"type": "object"}).decode()
    elif fmt is not None and fmt.type == "json_object":
        schema = '{"type": "object"}'
    settings = state.settings
    max_tokens = request.max_output_tokens
    if max_tokens is not None:
        max_tokens = min(max_tokens, settings.limits.max_tokens)
    session = (
        headers.get(b"session_id")
        or headers.get(b"session-id")
        or headers.get(b"x-session-id")
        or request.prompt_cache_key
    )
    # Codex sends its subagents' requests under the parent's session-id, each subagent with a
    # thread-id of its own; their first user message (the environment context) and head are
    # alike, so without the thread they would share one lineage and miss each other's turns.
    thread = headers.get(b"thread-id")
    subagent = thread if thread and thread != session else None
    extra = request.model_extra or {}
    core = CoreRequest(
        api=API,
        model=request.model,
        messages=messages,
        tools=tools or None,
        tool_choice=convert_tool_choice(request.tool_choice, names) if tools else None,
        template_kwargs=kwargs,
        sampling=Sampling(
            max_tokens=max_tokens,
            temperature=request.temperature,
            top_p=request.top_p,
            json_schema=schema,
        ),
        stream=request.stream,
        session=SessionHints(
            header=session,
            body={"user": request.user} if request.user else {},
            conversation=subagent,
        ),
        body_bytes=sent,
        thinking=thinking,
        clamp_max_tokens=True,
        parallel_tool_calls=request.parallel_tool_calls is not False,
        custom_params=extra.get("custom_params"),
        images=images or None,
    )
    # The history from previous_response_id is in `messages`: bounded like the rest.
    check_bounds(core, settings.limits, PARAMS)
    return core, names, conversation


async def _parsed(
    state: AppState, headers: dict[bytes, str], receive: Receive
) -> tuple[ResponsesRequest, dict[str, Any], int]:
    """Hop 1 for both endpoints (the key was checked by admission, gateway.auth): the body
    within its bounds, the validated request (and the raw body and its size, which the core
    request keeps)."""
    settings = state.settings
    limits = settings.limits
    body = await read_body(receive, headers.get(b"content-length"), limits.max_body_bytes)
    raw = load_json_body(body, limits, settings.media.json_bypass_min_bytes)
    # On the raw items, before validation is spent on them (gateway.faces.body does the same
    # for messages and tools); the bound itself is gateway.core.bounds', on the converted turn.
    if isinstance(raw.get("input"), list) and len(raw["input"]) > limits.max_messages:
        raise InvalidRequestError(
            f"Too many input items: {len(raw['input'])} > {limits.max_messages}.",
            param="input",
        )
    check_counts(raw, limits)
    try:
        request = ResponsesRequest.model_validate(raw)
    except ValidationError as exc:
        text, param = validation_message(exc)
        raise InvalidRequestError(text, param=param, code="invalid_value") from exc
    if LOGPROBS in (request.include or ()):
        raise InvalidRequestError(
            f"include: {LOGPROBS!r} is not served here (the gateway returns no log "
            "probabilities); leave it out.",
            param="include",
        )
    return request, raw, len(body)


async def _input_tokens(state: AppState, scope: Scope, receive: Receive) -> Response:
    headers = read_headers(scope["headers"], _WANTED)
    request, raw, size = await _parsed(state, headers, receive)
    caller = authenticate(scope, state.auth)
    history, history_bytes = await _history(state, request, caller)
    items, referenced_bytes = await _referenced(state, request.input, history, caller)
    sent = size + history_bytes + referenced_bytes
    codec = request_codec(state, scope, sent)
    core, _, _ = _core(state, request, raw, sent, headers, history, codec, items)
    count = await count_prompt_tokens(state, core)
    return Response(
        orjson.dumps({"object": "response.input_tokens", "input_tokens": count}),
        media_type="application/json",
    )


# POST /v1/responses.
serve_responses = face_endpoint(_respond)
# POST /v1/responses/input_tokens: what a /v1/responses request with this body would take as
# input tokens, before sending it (rendered here, counted by the engine's tokenizer).
serve_input_tokens = face_endpoint(_input_tokens)


async def _stored_or_404(request: Request, response_id: str) -> dict[str, Any]:
    """The response, if it is stored and the caller's key made it: another key's is a 404 in
    the same words as a missing one, so ids cannot be probed across keys."""
    state = app_state(request)
    caller = authenticate(request.scope, state.auth)
    stored = await state.responses.get(response_id, caller.key_id)
    if stored is None:
        raise NotFoundError(
            f"No response with id '{response_id}' is stored here (never stored, deleted, "
            "or evicted from the bounded store).",
            param="response_id",
        )
    return stored.response


@router.get("/v1/responses/{response_id}")
async def get_response(request: Request, response_id: str) -> JSONResponse:
    return JSONResponse(await _stored_or_404(request, response_id))


@router.delete("/v1/responses/{response_id}")
async def delete_response(request: Request, response_id: str) -> JSONResponse:
    await _stored_or_404(request, response_id)
    await app_state(request).responses.delete(response_id)
    return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})
