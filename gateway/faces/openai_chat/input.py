"""Hop 1 of the OpenAI chat face: parse the body, make the core request, check its bounds
(gateway.core.bounds, the same check for every face).

Messages and tools stay the client's own dicts (the renderer's input); the pydantic model only
proves their shape. A `tool` message whose `tool_call_id` names no call (or that has none) is
rendered like the others, tied to no call: the rule of every face (docs/architecture.md, "Tool
results without their call"). Counts are checked on the raw JSON first, so an oversized
conversation is refused before any validation work is spent on it (gateway.faces.body, shared by
every face).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError

from gateway.core.bounds import at_ceiling, check_bounds
from gateway.core.effort import reasoning_mode
from gateway.core.images import ImageSlots
from gateway.core.request import CoreRequest, Sampling, SessionHints
from gateway.errors import (
    InvalidRequestError,
    NotFoundError,
)
from gateway.faces.body import check_counts, load_json_body
from gateway.faces.openai_chat.protocol import IMAGE_PARTS, ChatCompletionRequest
from gateway.faces.validation import validation_message
from gateway.settings import Settings

API = "openai"


@dataclass(frozen=True, slots=True)
class ChatInput:
    core: CoreRequest
    # stream_options.include_usage: the face's own option, for its encoder.
    include_usage: bool


def parse_chat(
    body: bytes | bytearray,
    settings: Settings,
    session_header: str | None = None,
    parent_session: str | None = None,
) -> ChatInput:
    """`parent_session`: opencode's x-parent-session-id, sent by a subagent's child session
    with its own x-session-id: the child is a conversation of its parent's session."""
    limits = settings.limits
    raw = load_json_body(body, limits, settings.media.json_bypass_min_bytes)
    check_counts(raw, limits)
    try:
        request = ChatCompletionRequest.model_validate(raw)
    except ValidationError as exc:
        message, param = validation_message(exc)
        raise InvalidRequestError(message, param=param, code="invalid_value") from exc
    _check(request, settings)
    hints = (
        SessionHints(header=parent_session, conversation=session_header)
        if parent_session and session_header
        else SessionHints(header=session_header)
    )
    core = _core(request, raw, len(body), hints, at_ceiling(request.requested_max_tokens, limits))
    check_bounds(core, limits)
    return ChatInput(core, request.include_usage)


def _core(
    request: ChatCompletionRequest,
    raw: dict[str, Any],
    body_bytes: int,
    hints: SessionHints,
    max_tokens: int | None,
) -> CoreRequest:
    extra = request.model_extra or {}
    session_body: dict[str, Any] = dict(extra)
    if request.user is not None:
        session_body["user"] = request.user
    effort, thinking = reasoning_mode(request.reasoning_effort)
    kwargs = {**(request.chat_template_kwargs or {}), **effort}
    choice = request.tool_choice
    messages, images = _with_image_slots(raw["messages"])
    return CoreRequest(
        api=API,
        model=request.model,
        messages=messages,
        tools=raw.get("tools"),
        tool_choice=choice if choice is None or isinstance(choice, str) else choice.model_dump(),
        template_kwargs=kwargs,
        sampling=Sampling(
            max_tokens=max_tokens,
            temperature=request.temperature,
            top_p=request.top_p,
            top_k=request.top_k,
            min_p=request.min_p,
            presence_penalty=request.presence_penalty,
            frequency_penalty=request.frequency_penalty,
            repetition_penalty=request.repetition_penalty,
            seed=request.seed,
            stop=tuple(request.stop_list),
            json_schema=_json_schema(request),
        ),
        stream=request.stream,
        session=SessionHints(
            header=hints.header, body=session_body, conversation=hints.conversation
        ),
        body_bytes=body_bytes,
        custom_params=extra.get("custom_params"),
        images=images,
        thinking=thinking,
        # No max_tokens: as much as the context leaves, not the default past it (the real
        # engine refuses prompt + default_max_tokens beyond its context outright).
        clamp_max_tokens=request.requested_max_tokens is None,
        parallel_tool_calls=request.parallel_tool_calls is not False,
    )


def _with_image_slots(
    messages: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], ImageSlots | None]:
    """The messages with each image part in a sentinel's place (gateway.core.images); copied
    only when there are images (the client's own dicts otherwise, as the renderer takes them)."""
    slots = ImageSlots()
    out: list[dict[str, Any]] | None = None
    for i, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list) or not any(
            isinstance(part, dict) and part.get("type") in IMAGE_PARTS for part in content
        ):
            continue
        parts = [
            slots.add(_image_url(part), f"messages.{i}.content.{j}")
            if isinstance(part, dict) and part.get("type") in IMAGE_PARTS
            else part
            for j, part in enumerate(content)
        ]
        if out is None:
            out = list(messages)
        out[i] = {**message, "content": parts}
    return (out, slots) if out is not None else (messages, None)


def _image_url(part: dict[str, Any]) -> str:
    if part.get("type") == "image_url":
        image = part.get("image_url")
        return str(image.get("url") if isinstance(image, dict) else image)
    return str(part.get("url") or part.get("image"))


def _json_schema(request: ChatCompletionRequest) -> str | None:
    fmt = request.response_format
    if fmt is not None and fmt.type == "json_schema" and fmt.json_schema is not None:
        return orjson.dumps(fmt.json_schema.schema_ or {"type": "object"}).decode()
    if fmt is not None and fmt.type == "json_object":
        return '{"type": "object"}'
    return None


def _check(request: ChatCompletionRequest, settings: Settings) -> None:
    if request.model not in settings.model.served_names:
        raise NotFoundError(
            f"The model {request.model!r} does not exist here; "
            f"available: {', '.join(settings.model.served_names)}.",
            param="model",
            code="model_not_found",
        )
    if request.n > 1:
        raise InvalidRequestError(
            "n > 1 is not supported: send n separate requests instead.", param="n"
        )
