"""Hop 6 of the OpenAI chat face: chat.completion.chunk bytes, and the one-shot ChatCompletion
built from the same deltas.

Chunks share everything but the delta, so the constant JSON around it is encoded once per
request and each chunk costs one small orjson.dumps of the delta.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from gateway.core.answer import Finish, Usage
from gateway.errors import GatewayError
from gateway.parsers.base import (
    ContentDelta,
    ParsedDelta,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallStart,
)
from gateway.stream import sse


def _delta_obj(delta: ParsedDelta) -> dict[str, Any]:
    if isinstance(delta, ContentDelta):
        return {"content": delta.text}
    if isinstance(delta, ReasoningDelta):
        return {"reasoning_content": delta.text}
    if isinstance(delta, ToolCallStart):
        call = {
            "index": delta.index,
            "id": delta.id,
            "type": "function",
            "function": {"name": delta.name, "arguments": ""},
        }
        return {"tool_calls": [call]}
    return {"tool_calls": [{"index": delta.index, "function": {"arguments": delta.fragment}}]}


def merge_text(deltas: list[ParsedDelta]) -> list[ParsedDelta]:
    """Joins runs of content (or reasoning) deltas so one engine event makes few chunks."""
    if len(deltas) < 2:
        return deltas
    merged: list[ParsedDelta] = []
    for delta in deltas:
        last = merged[-1] if merged else None
        if isinstance(delta, ContentDelta) and isinstance(last, ContentDelta):
            merged[-1] = ContentDelta(last.text + delta.text)
        elif isinstance(delta, ReasoningDelta) and isinstance(last, ReasoningDelta):
            merged[-1] = ReasoningDelta(last.text + delta.text)
        else:
            merged.append(delta)
    return merged


def usage_body(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def finish_reason(finish: Finish) -> str:
    """OpenAI's: "length" whenever max_tokens cut the answer, tool calls or not (OpenAI says
    so for a call it cut; its arguments are then unfinished and must not be run)."""
    if finish.reason == "length":
        return "length"
    return "tool_calls" if finish.made_tool_calls else "stop"


class ChunkBuilder:
    """The face's StreamEncoder: the role chunk goes out with the first output, as SGLang's
    own server sends it (one write and one client wake-up fewer per request)."""

    __slots__ = (
        "_finish_head",
        "_finish_tail",
        "_head",
        "_include_usage",
        "_pending",
        "_tail",
        "_usage_head",
    )

    def __init__(
        self, completion_id: str, created: int, model: str, *, include_usage: bool = False
    ) -> None:
        common = orjson.dumps(
            {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
            }
        )[:-1]
        self._head = b"data: " + common + b',"choices":[{"index":0,"delta":'
        # Under include_usage every chunk but the usage chunk says "usage": null, OpenAI's
        # documented format (clients may read the field on each chunk).
        end = b'}],"usage":null}\n\n' if include_usage else b"}]}\n\n"
        self._tail = b',"logprobs":null,"finish_reason":null' + end
        self._finish_tail = end
        self._finish_head = self._head + b'{},"logprobs":null,"finish_reason":'
        self._usage_head = b"data: " + common + b',"choices":[],"usage":'
        self._include_usage = include_usage
        # The role chunk, until the first output takes it along.
        self._pending = self._head + b'{"role":"assistant","content":""}' + self._tail

    def start(self, prompt_tokens: int | None = None) -> bytes:
        return b""  # the headers went out; the role chunk waits for the first output

    @property
    def sends_keepalive(self) -> bool:
        return False

    def keepalive(self) -> bytes | None:
        return None

    def deltas(self, deltas: list[ParsedDelta]) -> bytes:
        head, tail, pending = self._head, self._tail, self._pending
        if pending:
            self._pending = b""
        if len(deltas) == 1:
            # The usual case, one piece of text per engine event: no dict, no generator.
            delta = deltas[0]
            if type(delta) is ContentDelta:
                return pending + head + b'{"content":' + orjson.dumps(delta.text) + b"}" + tail
            if type(delta) is ReasoningDelta:
                return (
                    pending
                    + head
                    + b'{"reasoning_content":'
                    + orjson.dumps(delta.text)
                    + b"}"
                    + tail
                )
        return pending + b"".join(
            head + orjson.dumps(_delta_obj(d)) + tail for d in merge_text(deltas)
        )

    def finish(self, finish: Finish) -> bytes:
        pending, self._pending = self._pending, b""
        reason = orjson.dumps(finish_reason(finish))
        out = pending + self._finish_head + reason + self._finish_tail
        if self._include_usage:
            out += self._usage_head + orjson.dumps(usage_body(finish.usage)) + b"}\n\n"
        return out + sse.DONE

    def error(self, error: GatewayError) -> bytes:
        """What the openai client raises as APIError mid-stream, then [DONE]."""
        pending, self._pending = self._pending, b""
        return pending + sse.error_event(error) + sse.DONE


class MessageAccumulator:
    """The face's Collector: deltas into the assistant message of a ChatCompletion."""

    def __init__(self, completion_id: str = "", created: int = 0, model: str = "") -> None:
        self._id = completion_id
        self._created = created
        self._model = model
        self._content: list[str] = []
        self._reasoning: list[str] = []
        # By tool-call index (the parser numbers calls 0, 1, ... in order).
        self._calls: dict[int, dict[str, Any]] = {}
        self._arguments: dict[int, list[str]] = {}

    def add(self, deltas: list[ParsedDelta]) -> None:
        for delta in deltas:
            if isinstance(delta, ContentDelta):
                self._content.append(delta.text)
            elif isinstance(delta, ReasoningDelta):
                self._reasoning.append(delta.text)
            elif isinstance(delta, ToolCallStart):
                self._calls[delta.index] = {"id": delta.id, "name": delta.name}
                self._arguments[delta.index] = []
            elif isinstance(delta, ToolCallArgumentsDelta) and delta.index in self._arguments:
                self._arguments[delta.index].append(delta.fragment)

    def message(self) -> dict[str, Any]:
        content = "".join(self._content)
        # OpenAI sends null content next to tool calls, and a string otherwise.
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None if self._calls and not content else content,
        }
        if self._reasoning:
            message["reasoning_content"] = "".join(self._reasoning)
        if self._calls:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": "".join(args) or "{}"},
                }
                for index, call in sorted(self._calls.items())
                for args in (self._arguments[index],)
            ]
        return message

    def body(self, finish: Finish) -> bytes:
        return orjson.dumps(
            {
                "id": self._id,
                "object": "chat.completion",
                "created": self._created,
                "model": self._model,
                "choices": [
                    {
                        "index": 0,
                        "message": self.message(),
                        "logprobs": None,
                        "finish_reason": finish_reason(finish),
                    }
                ],
                "usage": usage_body(finish.usage),
            }
        )


class ChatAnswer:
    """One chat request's encoders (gateway.core.answer.Answer)."""

    headers: Mapping[str, str] = {}

    def __init__(self, rid: str, model: str, created: int, *, include_usage: bool) -> None:
        self._id = f"chatcmpl-{rid}"
        self._model = model
        self._created = created
        self._include_usage = include_usage

    def stream_encoder(self) -> ChunkBuilder:
        return ChunkBuilder(self._id, self._created, self._model, include_usage=self._include_usage)

    def collector(self) -> MessageAccumulator:
        return MessageAccumulator(self._id, self._created, self._model)
