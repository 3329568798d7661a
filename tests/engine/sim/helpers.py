"""Helpers for talking to a simulator process in tests: SSE parsing, /generate, /metrics."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

GLM_PROMPT = "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hello there<|assistant|><think>"


def sse_events(body: str) -> list[Any]:
    """Parse an SSE body into JSON objects; '[DONE]' stays a string."""
    out: list[Any] = []
    for block in body.split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), block
        payload = block[len("data: ") :]
        out.append(payload if payload == "[DONE]" else orjson.loads(payload))
    return out


def generate(url: str, body: dict[str, Any], **kwargs: Any) -> httpx.Response:
    return httpx.post(url + "/generate", json=body, timeout=30.0, **kwargs)


def stream(url: str, body: dict[str, Any], **kwargs: Any) -> list[Any]:
    response = generate(url, {**body, "stream": True}, **kwargs)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return sse_events(response.text)


def metric(url: str, name: str) -> float:
    """The value of an unlabelled-but-for-model_name sample in /metrics (0 when absent)."""
    text = httpx.get(url + "/metrics", timeout=5.0).text
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
