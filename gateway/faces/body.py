"""Face plumbing every face shares: the request body read within its bound, parsed as one JSON
object within the nesting bound, and the message and tool counts checked on the raw JSON before
any validation work is spent on it."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.types import Receive

from gateway.errors import ClientDisconnected, InvalidRequestError, PayloadTooLargeError
from gateway.faces import lifted_json
from gateway.settings import LimitSettings


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
