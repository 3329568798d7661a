"""Hop 1 of the OpenAI chat face: parse the body, check every limit, make the core request.

Messages and tools stay the client's own dicts (the renderer's input); the pydantic model only
proves their shape. Counts are checked on the raw JSON first, so an oversized conversation is
refused before any validation work is spent on it. Reading the body within its bound and the
checks on raw JSON are shared with the other faces (`read_body`, `load_json_body`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError
from starlette.types import Receive

from gateway.core.images import ImageSlots
from gateway.core.request import CoreRequest, Sampling, SessionHints
from gateway.errors import (
    ClientDisconnected,
    InvalidRequestError,
    NotFoundError,
    PayloadTooLargeError,
)
from gateway.faces import lifted_json
from gateway.faces.openai_chat.protocol import IMAGE_PARTS, ChatCompletionRequest
from gateway.faces.validation import validation_message
from gateway.settings import LimitSettings, Settings

API = "openai"


@dataclass(frozen=True, slots=True)
class ChatInput:
    core: CoreRequest
    # stream_options.include_usage: the face's own option, for its encoder.
    include_usage: bool


async def read_body(
    receive: Receive, content_length: str | None, max_bytes: int
) -> bytes | bytearray:
    """The whole body from ASGI `receive`, refused (413) as soon as it passes `max_bytes`;
    raises ClientDisconnected if the client leaves first. A body that came in several
    messages is returned as the bytearray it was gathered in: copying megabytes (an image
    request) into bytes would cost the event loop milliseconds, mostly page faults."""
    if content_length is not None and content_length.isdigit() and int(content_length) > max_bytes:
        raise _too_large(max_bytes)
    message = await receive()
    if message["type"] == "http.request" and not message.get("more_body", False):
        body: bytes = message.get("body", b"")  # the usual case: one message
        if len(body) > max_bytes:
            raise _too_large(max_bytes)
        return body
    parts = bytearray()
    while True:
        if message["type"] == "http.disconnect":
            raise ClientDisconnected
        parts += message.get("body", b"")
        if len(parts) > max_bytes:
            raise _too_large(max_bytes)
        if not message.get("more_body", False):
            return parts
        message = await receive()


def _too_large(max_bytes: int) -> PayloadTooLargeError:
    return PayloadTooLargeError(f"The request body is larger than the limit of {max_bytes} bytes.")


def _nesting_exceeds(value: object, limit: int) -> bool:
    """Whether containers nest more than `limit` deep (the outermost is depth 1).

    Level by level, and only containers are kept: an agentic body holds thousands of strings
    and numbers, and one comprehension per container passes them over at C speed (the
    former per-value stack cost more than orjson's parse of the same body).
    """
    level: list[Any] = [value] if isinstance(value, (dict, list)) else []
    for _ in range(limit):
        deeper: list[Any] = []
        for node in level:
            children = node.values() if isinstance(node, dict) else node
            deeper += [child for child in children if isinstance(child, (dict, list))]
        if not deeper:
            return False
        level = deeper
    return bool(level)


def load_json_body(
    body: bytes | bytearray, limits: LimitSettings, bypass_min_bytes: int
) -> dict[str, Any]:
    """The body as a JSON object, refused (400) when it is not one or nests too deep.
    `bypass_min_bytes`: media.json_bypass_min_bytes (gateway.faces.lifted_json)."""
    try:
        raw = lifted_json.loads(body, bypass_min_bytes)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequestError(
            f"The request body is not valid JSON ({exc}); send a JSON object.",
            code="invalid_json",
        ) from exc
    if not isinstance(raw, dict):
        raise InvalidRequestError("The request body must be a JSON object.", code="invalid_json")
    if _nesting_exceeds(raw, limits.max_json_depth):
        # Deeper JSON than any real conversation; later hops (hashing, templates) have their
        # own recursion limits, and this keeps them from turning it into a 500.
        raise InvalidRequestError(
            f"The request nests JSON deeper than {limits.max_json_depth} levels; "
            "flatten the tool schemas or arguments.",
            code="json_too_deep",
        )
    return raw


def check_counts(raw: dict[str, Any], limits: LimitSettings) -> None:
    """Counts of messages and tools, on the raw JSON, before any validation work."""
    messages = raw.get("messages")
    if isinstance(messages, list) and len(messages) > limits.max_messages:
        raise InvalidRequestError(
            f"Too many messages: {len(messages)} > {limits.max_messages}.", param="messages"
        )
    tools = raw.get("tools")
    if isinstance(tools, list) and len(tools) > limits.max_tools:
        raise InvalidRequestError(
            f"Too many tools: {len(tools)} > {limits.max_tools}.", param="tools"
        )


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
    return ChatInput(_core(request, raw, len(body), hints), request.include_usage)


def _core(
    request: ChatCompletionRequest, raw: dict[str, Any], body_bytes: int, hints: SessionHints
) -> CoreRequest:
    extra = request.model_extra or {}
    session_body: dict[str, Any] = dict(extra)
    if request.user is not None:
        session_body["user"] = request.user
    kwargs = dict(request.chat_template_kwargs or {})
    if request.reasoning_effort is not None:
        kwargs["reasoning_effort"] = request.reasoning_effort
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
            max_tokens=request.requested_max_tokens,
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
    limits = settings.limits
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
    max_tokens = request.requested_max_tokens
    if max_tokens is not None and max_tokens > limits.max_tokens:
        param = "max_completion_tokens" if request.max_completion_tokens else "max_tokens"
        raise InvalidRequestError(
            f"{param} is {max_tokens}, above this server's limit of {limits.max_tokens}.",
            param=param,
        )
    if len(request.stop_list) > limits.max_stop_sequences:
        raise InvalidRequestError(
            f"Too many stop sequences: at most {limits.max_stop_sequences}.", param="stop"
        )
