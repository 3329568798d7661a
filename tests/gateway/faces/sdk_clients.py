"""The official `openai` and `anthropic` clients against the in-process gateway.

Both SDKs speak through `httpx2`, the in-process gateway through `httpx` (tests.gateway.conftest
gateway_client): `Bridge` hands each SDK request to that client, so what the SDKs parse is the
gateway's own bytes, with everything the shared fixture sets up and checks.
"""

from __future__ import annotations

import anthropic
import httpx
import httpx2
import openai

# Framing the bridge redoes itself: the body arrives here whole and decoded.
_HOP_HEADERS = {"content-length", "content-encoding", "transfer-encoding"}


class Bridge(httpx2.AsyncBaseTransport):
    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        headers = [
            (name, value)
            for name, value in request.headers.multi_items()
            if name.lower() not in _HOP_HEADERS
        ]
        response = await self._client.request(
            request.method, str(request.url), headers=headers, content=body
        )
        kept = [
            (name, value)
            for name, value in response.headers.multi_items()
            if name.lower() not in _HOP_HEADERS
        ]
        return httpx2.Response(response.status_code, headers=kept, content=response.content)


def openai_client(client: httpx.AsyncClient) -> openai.AsyncOpenAI:
    http = httpx2.AsyncClient(transport=Bridge(client))
    return openai.AsyncOpenAI(base_url="http://gw/v1", api_key="k", http_client=http, max_retries=0)


def anthropic_client(client: httpx.AsyncClient) -> anthropic.AsyncAnthropic:
    http = httpx2.AsyncClient(transport=Bridge(client))
    return anthropic.AsyncAnthropic(
        base_url="http://gw", api_key="k", http_client=http, max_retries=0
    )
