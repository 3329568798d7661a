"""An in-process stand-in for SGLang's native API, as an httpx.MockTransport handler.

It speaks the same wire format as the engine (FACTS.md section 5): cumulative `text` per
event, meta_info with token counts, `data: [DONE]`. Each test sets what the next /generate
answers; every request and abort is recorded for assertions.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson


@dataclass
class Script:
    # The prompt ends in "<think>", so output starts with reasoning.
    pieces: list[str] = field(default_factory=lambda: ["Hmm", "</think>", "Hel", "lo", " world"])
    finish: dict[str, Any] | None = field(
        default_factory=lambda: {"type": "stop", "matched": 151336}
    )
    prompt_tokens: int = 12
    cached_tokens: int = 5
    status: int = 200
    error_body: bytes = b'{"error": {"message": "boom"}}'
    # Sends an in-stream error event after this many pieces.
    error_after: int | None = None
    # Events as literal cumulative texts (overrides pieces), to test odd engines.
    cumulative: list[str] | None = None
    send_done: bool = True
    # Everything in one network chunk, as a busy engine's events arrive together.
    one_chunk: bool = False
    # sglang-kt's refusal of a streamed request: 200, this as the only event, [DONE]
    # (its /generate turns a ValueError into an in-stream error).
    refusal: str | None = None
    # Seconds before the first event (a busy engine's queue).
    first_event_delay_s: float = 0.0


@dataclass
class FakeEngine:
    script: Script = field(default_factory=Script)
    healthy: bool = True
    reachable: bool = True
    generates: list[dict[str, Any]] = field(default_factory=list)
    aborts: list[str] = field(default_factory=list)
    # The x-request-id header of each /generate (the client's id, as the gateway forwards it).
    request_ids: list[str | None] = field(default_factory=list)
    # What GET /server_info answers (None: 404, as before it was asked); /tokenize counts one
    # token per 4 bytes.
    server_info: dict[str, Any] | None = None
    # The UTF-8 bytes of each /tokenize prompt (what the gateway asked the tokenizer to read).
    tokenized: list[int] = field(default_factory=list)
    # The next this many /abort_request calls fail with 503 (an engine busy or restarting).
    abort_failures: int = 0
    # Calls of /abort_request, failed ones included.
    abort_calls: int = 0
    # Seconds each /tokenize takes (a tokenizer busy with a long prompt).
    tokenize_delay_s: float = 0.0

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if not self.reachable:
            raise httpx.ConnectError("connection refused", request=request)
        path = request.url.path
        if path == "/health":
            return httpx.Response(200 if self.healthy else 503)
        if path == "/server_info" and self.server_info is not None:
            return httpx.Response(200, json=self.server_info)
        if path == "/tokenize":
            if self.tokenize_delay_s:
                await asyncio.sleep(self.tokenize_delay_s)
            prompt = orjson.loads(await request.aread())["prompt"]
            self.tokenized.append(len(prompt.encode()))
            count = -(-len(prompt.encode()) // 4)
            return httpx.Response(200, json={"tokens": list(range(count)), "count": count})
        if path == "/abort_request":
            self.abort_calls += 1
            if self.abort_failures:
                self.abort_failures -= 1
                return httpx.Response(503, json={"error": {"message": "busy"}})
            self.aborts.append(orjson.loads(request.content)["rid"])
            return httpx.Response(200, json={})
        if path == "/generate":
            body = orjson.loads(await request.aread())
            self.generates.append(body)
            self.request_ids.append(request.headers.get("x-request-id"))
            script = self.script
            if script.status != 200:
                return httpx.Response(script.status, content=script.error_body)
            return httpx.Response(
                200,
                headers={"content-type": "text/event-stream"},
                content=self._one_chunk(body["rid"], script)
                if script.one_chunk
                else self._events(body["rid"], script),
            )
        return httpx.Response(404)

    async def _one_chunk(self, rid: str, script: Script) -> AsyncIterator[bytes]:
        yield b"".join([chunk async for chunk in self._events(rid, script)])

    async def _events(self, rid: str, script: Script) -> AsyncIterator[bytes]:
        if script.first_event_delay_s:
            await asyncio.sleep(script.first_event_delay_s)
        if script.refusal is not None:
            yield b"data: " + orjson.dumps({"error": {"message": script.refusal}}) + b"\n\n"
            yield b"data: [DONE]\n\n"
            return
        texts = script.cumulative
        if texts is None:
            texts, text = [], ""
            for piece in script.pieces:
                text += piece
                texts.append(text)
        for i, text in enumerate(texts):
            if script.error_after is not None and i == script.error_after:
                yield b'data: {"error": {"message": "engine fault"}}\n\n'
                return
            last = i == len(texts) - 1
            meta = {
                "id": rid,
                "finish_reason": script.finish if last else None,
                "prompt_tokens": script.prompt_tokens,
                "completion_tokens": i + 1,
                "cached_tokens": script.cached_tokens,
            }
            yield b"data: " + orjson.dumps({"text": text, "output_ids": [], "meta_info": meta})
            yield b"\n\n"
        if script.send_done:
            yield b"data: [DONE]\n\n"
