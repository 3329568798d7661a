"""Helpers for talking to a simulator process in tests: SSE parsing, /generate, /metrics,
images as data URLs."""

from __future__ import annotations

import base64
from io import BytesIO
from typing import Any

import httpx
import orjson
from PIL import Image

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


IMAGE_MARKER = "<|begin_of_image|><|image|><|end_of_image|>"


def image_bytes(
    width: int, height: int, colour: tuple[int, int, int] = (200, 30, 30), fmt: str = "PNG"
) -> bytes:
    buffer = BytesIO()
    Image.new("RGB", (width, height), colour).save(buffer, format=fmt)
    return buffer.getvalue()


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def png_url(width: int, height: int, colour: tuple[int, int, int] = (200, 30, 30)) -> str:
    """A solid-colour PNG as a data URL."""
    return data_url(image_bytes(width, height, colour))
