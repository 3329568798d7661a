"""A streaming OpenAI chat client that records what a benchmark needs, per request.

Conventions follow sglang.bench_serving (FACTS.md section 5): TTFT is the arrival of the first
chunk that carries a token (reasoning, content or a tool call — not the role-only frame);
ITL is the gap between token-carrying chunks divided by the tokens in the chunk; TPOT is
(latency - TTFT) / (output tokens - 1). Token counts come from the server's usage chunk.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import httpx
import orjson


@dataclass
class StreamRecord:
    """One streamed request: timestamps relative to its start, and the server's usage."""

    ok: bool = False
    error: str | None = None
    ttft: float | None = None
    latency: float = 0.0
    token_chunk_times: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    replica: str | None = None
    # What the server said, kept so multi-turn workloads can send it back as history.
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def itls(self) -> list[float]:
        """Inter-token latencies: gaps between token chunks spread over their tokens."""
        times = self.token_chunk_times
        if len(times) < 2:
            return []
        # Engines may pack several tokens into one chunk; spread them evenly.
        per_chunk = max(self.completion_tokens, len(times)) / len(times)
        return [(b - a) / per_chunk for a, b in itertools.pairwise(times)]

    @property
    def chunk_gaps(self) -> list[float]:
        """Raw gaps between token chunks: their median is the engine's step time."""
        return [b - a for a, b in itertools.pairwise(self.token_chunk_times)]

    @property
    def tpot(self) -> float | None:
        if self.ttft is None or self.completion_tokens < 2:
            return None
        return (self.latency - self.ttft) / (self.completion_tokens - 1)


def _has_token(delta: Mapping[str, Any]) -> bool:
    return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"))


def record_event(record: StreamRecord, payload: Mapping[str, Any], elapsed: float) -> None:
    """Fold one decoded SSE payload into the record (separate for unit tests)."""
    if "error" in payload:
        error = payload["error"]
        record.error = str(error.get("message") if isinstance(error, Mapping) else error)
        return
    for choice in payload.get("choices") or ():
        delta = choice.get("delta") or {}
        if not _has_token(delta):
            continue
        if record.ttft is None:
            record.ttft = elapsed
        record.token_chunk_times.append(elapsed)
        if delta.get("content"):
            record.content.append(delta["content"])
        if delta.get("reasoning_content"):
            record.reasoning.append(delta["reasoning_content"])
        for call in delta.get("tool_calls") or ():
            slot = record.tool_calls.setdefault(
                int(call.get("index", 0)),
                {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
            )
            slot["id"] = call.get("id") or slot["id"]
            function = call.get("function") or {}
            slot["function"]["name"] += function.get("name") or ""
            slot["function"]["arguments"] += function.get("arguments") or ""
    usage = payload.get("usage")
    if usage:
        record.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        record.completion_tokens = int(usage.get("completion_tokens") or 0)
        details = usage.get("prompt_tokens_details") or {}
        record.cached_tokens = int(details.get("cached_tokens") or 0)


# How long to wait for the rest of a response after [DONE], as the openai client does.
DRAIN_S = 0.1


async def _drain(response: httpx.Response) -> None:
    """Read the body to its end after [DONE], as the async openai client does on HTTP/1.1:
    a response closed before its chunked end takes its connection with it, and each request
    would pay a new connection to the server under test, which agentic clients do not."""
    try:
        async with asyncio.timeout(DRAIN_S):
            async for _ in cast(httpx.AsyncByteStream, response.stream):
                await asyncio.sleep(0)  # a stream of buffered bytes must not outrun the bound
    except (httpx.HTTPError, TimeoutError):
        pass  # the answer is complete; only the connection's reuse is lost


async def stream_chat(
    client: httpx.AsyncClient,
    url: str,
    body: Mapping[str, Any],
    headers: Mapping[str, str] | None = None,
) -> StreamRecord:
    """POST a streaming chat completion to url and record it; never raises for HTTP errors."""
    payload = {**body, "stream": True, "stream_options": {"include_usage": True}}
    record = StreamRecord()
    start = time.perf_counter()
    done_at: float | None = None
    try:
        async with client.stream("POST", url, json=payload, headers=headers) as response:
            record.replica = response.headers.get("x-flashbox-replica")
            if response.status_code != 200:
                await response.aread()
                record.error = f"HTTP {response.status_code}: {response.text[:200]}"
                return record
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    record.ok = record.error is None
                    done_at = time.perf_counter()  # the answer's end: the drain is not in it
                    await _drain(response)
                    break
                record_event(record, orjson.loads(data), time.perf_counter() - start)
    except httpx.HTTPError as exc:
        record.error = f"{type(exc).__name__}: {exc}"
    finally:
        record.latency = (done_at if done_at is not None else time.perf_counter()) - start
    return record
