"""Reading a gateway's SSE stream as the client sees it, bounded in time."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import httpx
import orjson

from tests.support.procs import Proc


@dataclass
class StreamResult:
    status: int
    events: list[dict[str, object]] = field(default_factory=list)
    done: bool = False
    error: dict[str, object] | None = None
    seconds: float = 0.0
    body: bytes = b""

    @property
    def content(self) -> str:
        parts: list[str] = []
        for event in self.events:
            for choice in event.get("choices", []):  # type: ignore[attr-defined]
                delta = choice.get("delta", {})
                for key in ("reasoning_content", "content"):
                    if isinstance(delta.get(key), str):
                        parts.append(delta[key])
        return "".join(parts)


def stream_chat(gateway: Proc, body: dict[str, object], *, timeout: float = 30.0) -> StreamResult:
    """POST a streaming chat; `timeout` bounds every read, so a hung connection fails the test."""
    started = time.monotonic()
    with httpx.stream(
        "POST",
        gateway.url + "/v1/chat/completions",
        json={**body, "stream": True},
        timeout=httpx.Timeout(timeout),
    ) as response:
        result = StreamResult(status=response.status_code)
        if response.status_code != 200:
            result.body = response.read()
            result.seconds = time.monotonic() - started
            return result
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            assert not result.done, "data after [DONE]"
            if data == "[DONE]":
                result.done = True
                continue
            event = orjson.loads(data)
            if "error" in event:
                result.error = event["error"]
            else:
                result.events.append(event)
    result.seconds = time.monotonic() - started
    return result


def wait_for(predicate: object, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False
