"""OpenAI chat.completion.chunk bytes, and the one-shot message built from the same deltas.

Chunks share everything but the delta, so the constant JSON around it is encoded once per
request and each chunk costs one small orjson.dumps of the delta.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.parsers.base import (
    ContentDelta,
    ParsedDelta,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallStart,
)


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


class ChunkBuilder:
    __slots__ = ("_finish_head", "_head", "_tail", "_usage_head")

    def __init__(self, completion_id: str, created: int, model: str) -> None:
        common = orjson.dumps(
            {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
            }
        )[:-1]
        self._head = b"data: " + common + b',"choices":[{"index":0,"delta":'
        self._tail = b',"logprobs":null,"finish_reason":null}]}\n\n'
        self._finish_head = self._head + b'{},"logprobs":null,"finish_reason":'
        self._usage_head = b"data: " + common + b',"choices":[],"usage":'

    def role(self) -> bytes:
        return self._head + b'{"role":"assistant","content":""}' + self._tail

    def deltas(self, deltas: list[ParsedDelta]) -> bytes:
        head, tail = self._head, self._tail
        if len(deltas) == 1:
            # The usual case, one piece of text per engine event: no dict, no generator.
            delta = deltas[0]
            if type(delta) is ContentDelta:
                return head + b'{"content":' + orjson.dumps(delta.text) + b"}" + tail
            if type(delta) is ReasoningDelta:
                return head + b'{"reasoning_content":' + orjson.dumps(delta.text) + b"}" + tail
        return b"".join(head + orjson.dumps(_delta_obj(d)) + tail for d in merge_text(deltas))

    def finish(self, reason: str) -> bytes:
        return self._finish_head + orjson.dumps(reason) + b"}]}\n\n"

    def usage(self, usage: dict[str, Any]) -> bytes:
        return self._usage_head + orjson.dumps(usage) + b"}\n\n"


class MessageAccumulator:
    """Collects deltas into the assistant message of a non-streaming ChatCompletion."""

    def __init__(self) -> None:
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
