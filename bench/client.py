"""Streaming clients (OpenAI chat completions, Anthropic Messages, OpenAI Responses) that record
what a benchmark needs, per request.

Conventions follow sglang.bench_serving (FACTS.md section 5): TTFT is the arrival of the first
chunk that carries a token (reasoning, content or a tool call — not the role-only frame; for
Messages, the first `content_block_delta` with text, thinking or tool input; for Responses, the
first output text, reasoning text or function-call arguments delta);
ITL is the gap between token-carrying chunks divided by the tokens in the chunk; TPOT is
(latency - TTFT) / (output tokens - 1). Token counts come from the server's usage chunk
(for Messages, `message_delta`'s usage; for Responses, the terminal event's response.usage).
Latency ends at `[DONE]` (Messages: `message_stop`; Responses: `response.completed`,
`response.incomplete` or `response.failed`).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Mapping
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
    # The answer in its API's own shape, for replays that send it back as history byte for
    # byte: Anthropic content blocks (thinking with its signature, text, tool_use with its
    # parsed input), in stream order; the Responses API's output items (from the terminal
    # event). Empty for chat completions, whose history is built from the fields above.
    answer: list[dict[str, Any]] = field(default_factory=list)

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
        record.error = _error_message(payload["error"])
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


# Folds one SSE `data:` payload into the record; True when it ends the answer.
_Fold = Callable[[StreamRecord, str, float], bool]


async def _stream(
    client: httpx.AsyncClient,
    url: str,
    payload: Mapping[str, Any],
    headers: Mapping[str, str] | None,
    fold: _Fold,
) -> StreamRecord:
    """POST `payload`, fold each SSE data line until `fold` says the answer is done, then
    read the response to its end (keeping the connection); never raises for HTTP errors."""
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
                if fold(record, line[5:].strip(), start):
                    record.ok = record.error is None
                    done_at = time.perf_counter()  # the answer's end: the drain is not in it
                    await _drain(response)
                    break
    except httpx.HTTPError as exc:
        record.error = f"{type(exc).__name__}: {exc}"
    finally:
        record.latency = (done_at if done_at is not None else time.perf_counter()) - start
    return record


def _fold_chat(record: StreamRecord, data: str, start: float) -> bool:
    if data == "[DONE]":
        return True
    record_event(record, orjson.loads(data), time.perf_counter() - start)
    return False


async def stream_chat(
    client: httpx.AsyncClient,
    url: str,
    body: Mapping[str, Any],
    headers: Mapping[str, str] | None = None,
) -> StreamRecord:
    """POST a streaming chat completion to url and record it; never raises for HTTP errors."""
    payload = {**body, "stream": True, "stream_options": {"include_usage": True}}
    return await _stream(client, url, payload, headers, _fold_chat)


def _token(record: StreamRecord, kind: str, text: str, index: int, elapsed: float) -> None:
    """An output chunk of `kind` (content, reasoning, or a tool call's arguments at `index`),
    as the Anthropic and Responses recorders see one: TTFT is the first."""
    if record.ttft is None:
        record.ttft = elapsed
    record.token_chunk_times.append(elapsed)
    if kind == "content":
        record.content.append(text)
    elif kind == "reasoning":
        record.reasoning.append(text)
    else:
        slot = record.tool_calls.get(index)
        if slot is not None:
            slot["function"]["arguments"] += text


def _call_started(record: StreamRecord, index: int, call_id: object, name: object) -> None:
    record.tool_calls[index] = {
        "id": call_id or "",
        "type": "function",
        "function": {"name": name or "", "arguments": ""},
    }


def _error_message(error: Any) -> str:
    return str(error.get("message") if isinstance(error, Mapping) else error)


# The content_block_delta types that carry output tokens, and the key of their text (a
# signature_delta carries none).
_TOKEN_DELTAS = {
    "text_delta": ("text", "content"),
    "thinking_delta": ("thinking", "reasoning"),
    "input_json_delta": ("partial_json", "arguments"),
}


# Where each content_block_delta type's text goes in the block it extends (record.answer).
_BLOCK_FIELDS = {
    "text_delta": ("text", "text"),
    "thinking_delta": ("thinking", "thinking"),
    "signature_delta": ("signature", "signature"),
}


def _block_delta(record: StreamRecord, index: int, delta: Mapping[str, Any]) -> None:
    """Extend block `index` of record.answer with a delta (tool input is parsed at its stop)."""
    found = _BLOCK_FIELDS.get(str(delta.get("type")))
    if found is None or not 0 <= index < len(record.answer):
        return
    source, target = found
    block = record.answer[index]
    block[target] = str(block.get(target) or "") + str(delta.get(source) or "")


def _block_stop(record: StreamRecord, index: int) -> None:
    if not 0 <= index < len(record.answer) or record.answer[index].get("type") != "tool_use":
        return
    arguments = record.tool_calls.get(index, {}).get("function", {}).get("arguments") or "{}"
    try:
        record.answer[index]["input"] = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        record.error = f"tool_use block {index} has input that is not JSON: {arguments[:80]!r}"


def record_message_event(record: StreamRecord, payload: Mapping[str, Any], elapsed: float) -> None:
    """Fold one decoded Anthropic Messages SSE payload into the record (separate for unit
    tests). Tool calls are kept under their content block's index, in OpenAI's shape."""
    kind = payload.get("type")
    if kind == "content_block_delta":
        delta = payload.get("delta") or {}
        delta_type = delta.get("type")
        found = _TOKEN_DELTAS.get(delta_type) if isinstance(delta_type, str) else None
        text = delta.get(found[0]) if found is not None else None
        if found is not None and text:
            _token(record, found[1], text, int(payload.get("index", 0)), elapsed)
        _block_delta(record, int(payload.get("index", 0)), delta)
    elif kind == "content_block_start":
        block = payload.get("content_block") or {}
        index = int(payload.get("index", 0))
        if block.get("type") == "tool_use":
            _call_started(record, index, block.get("id"), block.get("name"))
        # Blocks are contiguous from 0 and never interleave (the Messages stream's rule).
        if index == len(record.answer):
            record.answer.append(dict(block))
    elif kind == "content_block_stop":
        _block_stop(record, int(payload.get("index", 0)))
    elif kind == "message_delta":
        usage = payload.get("usage") or {}
        cached = int(usage.get("cache_read_input_tokens") or 0)
        created = int(usage.get("cache_creation_input_tokens") or 0)
        record.prompt_tokens = int(usage.get("input_tokens") or 0) + cached + created
        record.completion_tokens = int(usage.get("output_tokens") or 0)
        record.cached_tokens = cached
    elif kind == "error":
        record.error = _error_message(payload.get("error"))


def _fold_message(record: StreamRecord, data: str, start: float) -> bool:
    payload = orjson.loads(data)
    record_message_event(record, payload, time.perf_counter() - start)
    return bool(payload.get("type") == "message_stop")


# What the anthropic SDK sends with every request.
ANTHROPIC_VERSION = "2023-06-01"


async def stream_messages(
    client: httpx.AsyncClient,
    url: str,
    body: Mapping[str, Any],
    headers: Mapping[str, str] | None = None,
) -> StreamRecord:
    """POST a streaming Anthropic Messages request (body: model, max_tokens, messages, ...)
    to url and record it as stream_chat does; never raises for HTTP errors."""
    payload = {**body, "stream": True}
    sent = {"anthropic-version": ANTHROPIC_VERSION, **(headers or {})}
    return await _stream(client, url, payload, sent, _fold_message)


# The Responses events that carry output tokens, and what the record keeps them as.
_RESPONSE_TOKEN_EVENTS = {
    "response.output_text.delta": "content",
    "response.reasoning_text.delta": "reasoning",
    "response.function_call_arguments.delta": "arguments",
}
# The events that end a Responses stream (the SDK stops at each of them).
_RESPONSE_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


def record_response_event(record: StreamRecord, payload: Mapping[str, Any], elapsed: float) -> None:
    """Fold one decoded OpenAI Responses SSE payload into the record (separate for unit tests).
    Function calls are kept under their output item's index, in the chat completions' shape."""
    kind = payload.get("type")
    token = _RESPONSE_TOKEN_EVENTS.get(kind) if isinstance(kind, str) else None
    if token is not None:
        text = payload.get("delta")
        if text:
            _token(record, token, text, int(payload.get("output_index", 0)), elapsed)
    elif kind == "response.output_item.added":
        item = payload.get("item") or {}
        if item.get("type") == "function_call":
            index = int(payload.get("output_index", 0))
            _call_started(record, index, item.get("call_id"), item.get("name"))
    elif kind in _RESPONSE_TERMINAL:
        response = payload.get("response") or {}
        usage = response.get("usage") or {}
        details = usage.get("input_tokens_details") or {}
        # Unlike Anthropic's, the Responses API's input_tokens includes what the cache served.
        record.prompt_tokens = int(usage.get("input_tokens") or 0)
        record.completion_tokens = int(usage.get("output_tokens") or 0)
        record.cached_tokens = int(details.get("cached_tokens") or 0)
        record.answer = [dict(item) for item in response.get("output") or ()]
        if kind == "response.failed":
            record.error = _error_message(response.get("error") or "response.failed")
    elif kind == "error":
        record.error = _error_message(payload.get("error") or payload)


def _fold_response(record: StreamRecord, data: str, start: float) -> bool:
    payload = orjson.loads(data)
    record_response_event(record, payload, time.perf_counter() - start)
    return payload.get("type") in _RESPONSE_TERMINAL


async def stream_responses(
    client: httpx.AsyncClient,
    url: str,
    body: Mapping[str, Any],
    headers: Mapping[str, str] | None = None,
) -> StreamRecord:
    """POST a streaming OpenAI Responses request (body: model, input, max_output_tokens, ...)
    to url and record it as stream_chat does; never raises for HTTP errors."""
    payload = {**body, "stream": True}
    return await _stream(client, url, payload, headers, _fold_response)
