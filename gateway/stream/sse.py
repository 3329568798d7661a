"""The one SSE encoder: every byte the gateway streams to a client goes through here."""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from gateway.errors import GatewayError

DONE = b"data: [DONE]\n\n"
HEADERS = {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    # Reverse proxies (nginx) must pass each event on at once, not buffer the stream.
    "x-accel-buffering": "no",
}


class SendBytes(Protocol):
    """Writes SSE bytes to the client; `last=True` also ends the response, in the same write."""

    async def __call__(self, data: bytes, *, last: bool = False) -> None: ...


def event(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def error_event(error: GatewayError) -> bytes:
    """What the openai client raises as APIError mid-stream."""
    return event(error.to_body())
