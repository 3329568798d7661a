"""Hop 1 for chat: read the body within its bound, parse it, check every limit.

Messages and tools stay the client's own dicts (the renderer's input); the pydantic model only
proves their shape. Counts are checked on the raw JSON first, so an oversized conversation is
refused before any validation work is spent on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError
from starlette.types import Receive

from gateway.errors import (
    ClientDisconnected,
    InvalidRequestError,
    NotFoundError,
    PayloadTooLargeError,
)
from gateway.protocol import ChatCompletionRequest
from gateway.settings import Settings


@dataclass(frozen=True, slots=True)
class ChatInput:
    request: ChatCompletionRequest
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    body_bytes: int
    model: str  # the served name that matched


async def read_body(receive: Receive, content_length: str | None, max_bytes: int) -> bytes:
    """The whole body from ASGI `receive`, refused (413) as soon as it passes `max_bytes`;
    raises ClientDisconnected if the client leaves first."""
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
            return bytes(parts)
        message = await receive()


def _too_large(max_bytes: int) -> PayloadTooLargeError:
    return PayloadTooLargeError(f"The request body is larger than the limit of {max_bytes} bytes.")


def validation_message(exc: ValidationError) -> tuple[str, str | None]:
    """The first problem, said so the client can fix it, and the field it is in."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"])
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    text = f"Invalid request: '{where}': {first['msg']}{more}." if where else first["msg"]
    return text, where or None


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


def parse_chat(body: bytes, settings: Settings) -> ChatInput:
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequestError(
            f"The request body is not valid JSON ({exc}); send a JSON object.",
            code="invalid_json",
        ) from exc
    if not isinstance(raw, dict):
        raise InvalidRequestError("The request body must be a JSON object.", code="invalid_json")
    limits = settings.limits
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
    if _nesting_exceeds(raw, limits.max_json_depth):
        # Deeper JSON than any real conversation; later hops (hashing, templates) have their
        # own recursion limits, and this keeps them from turning it into a 500.
        raise InvalidRequestError(
            f"The request nests JSON deeper than {limits.max_json_depth} levels; "
            "flatten the tool schemas or arguments.",
            code="json_too_deep",
        )
    try:
        request = ChatCompletionRequest.model_validate(raw)
    except ValidationError as exc:
        message, param = validation_message(exc)
        raise InvalidRequestError(message, param=param, code="invalid_value") from exc
    _check(request, settings)
    return ChatInput(
        request=request,
        messages=messages,  # type: ignore[arg-type]  # validated above
        tools=tools,
        body_bytes=len(body),
        model=request.model,
    )


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
