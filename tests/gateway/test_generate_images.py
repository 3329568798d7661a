"""/generate carries `image_data` only when the request has images (the engine's multimodal
path is not entered for text), and then only the data URLs the gateway built."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.gateway.conftest import MODEL, chat_body
from tests.gateway.fake_engine import FakeEngine
from tests.gateway.media import images

TEXT_ONLY = {
    "/v1/chat/completions": chat_body(max_tokens=8),
    "/v1/messages": {
        "model": MODEL,
        "max_tokens": 8,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    },
    "/v1/responses": {"model": MODEL, "input": "hi", "max_output_tokens": 8},
}


@pytest.mark.parametrize("path", list(TEXT_ONLY))
async def test_a_text_only_request_sends_no_image_data(
    engine: FakeEngine, client: httpx.AsyncClient, path: str
) -> None:
    response = await client.post(path, json=TEXT_ONLY[path])
    assert response.status_code == 200, response.text
    [sent] = engine.generates
    assert "image_data" not in sent
    assert "<|image|>" not in sent["text"]


async def test_an_image_request_sends_the_gateways_own_data_url(
    engine: FakeEngine, client: httpx.AsyncClient
) -> None:
    # A GIF (bare-string image_url form): the engine gets its first frame as a PNG the
    # gateway wrote, never the client's string.
    given = images.data_url(images.gif(64, 48), "image/gif")
    content: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": given},
        {"type": "text", "text": "What is this?"},
    ]
    body = chat_body(messages=[{"role": "user", "content": content}], max_tokens=8)
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    [sent] = engine.generates
    [sent_image] = sent["image_data"]
    assert sent_image.startswith("data:image/png;base64,")
    assert sent_image != given
    assert sent["text"].count("<|begin_of_image|><|image|><|end_of_image|>") == 1
