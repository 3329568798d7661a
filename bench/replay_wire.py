"""What a replayed request says, per API: the three wire formats.

A root request sends its head (bench/replay_text.py) and a user message; a request that extends
a turn sends exactly that turn's body, the answer that came back (in the API's own shape:
Anthropic content blocks with their thinking signatures, Responses output items with their
encrypted reasoning, chat completions' assistant message) and new text: tool results for the
answer's tool calls, else a user message.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from bench.client import StreamRecord, stream_chat, stream_messages, stream_responses
from bench.replay_text import Head, split_text
from bench.shapes import Api, ShapeRequest

# What the simulator's tool-call markup and arguments take, per call, in its 4-byte tokens.
TOOL_CALL_TOKENS = 20
# The share of a reasoning answer's tokens steered into reasoning.
REASONING_SHARE = 0.25
# Anthropic's max_tokens is required; a shape that recorded none (0) gets Claude Code's own.
ANTHROPIC_DEFAULT_MAX_TOKENS = 32_000


def sim_steer(req: ShapeRequest, reasoning: bool, tools: bool) -> dict[str, Any]:
    """custom_params for the simulator: an answer of the recorded size and tool calls."""
    calls = req.tool_calls if tools else 0
    thought = int(req.output_tokens * REASONING_SHARE) if reasoning else 0
    content = max(1, req.output_tokens - thought - TOOL_CALL_TOKENS * calls)
    return {"sim": {"reasoning_tokens": thought, "content_tokens": content, "tool_calls": calls}}


def chat_assistant_message(record: StreamRecord) -> dict[str, Any]:
    """A chat completion's answer as the assistant message of the next turn."""
    message: dict[str, Any] = {"role": "assistant", "content": "".join(record.content)}
    if record.reasoning:
        message["reasoning_content"] = "".join(record.reasoning)
    if record.tool_calls:
        message["tool_calls"] = [record.tool_calls[i] for i in sorted(record.tool_calls)]
    return message


def chat_follow_up(record: StreamRecord, text: str) -> list[dict[str, Any]]:
    """Tool results for the answer's calls (the text split among them), else a user message."""
    if not record.tool_calls:
        return [{"role": "user", "content": text}]
    calls = [record.tool_calls[i] for i in sorted(record.tool_calls)]
    return [
        {"role": "tool", "tool_call_id": call["id"], "content": part}
        for call, part in zip(calls, split_text(text, len(calls)), strict=True)
    ]


Body = dict[str, Any]


class Wire(Protocol):
    """One API's requests: a root from a head, a turn that extends an answered one."""

    @property
    def api(self) -> Api: ...

    def root(self, head: Head, req: ShapeRequest, text: str, cache_key: str) -> Body: ...

    def extend(
        self, parent: Body, answer: StreamRecord, head: Head, req: ShapeRequest, text: str
    ) -> Body: ...

    async def send(
        self, client: httpx.AsyncClient, url: str, body: Body, headers: Mapping[str, str]
    ) -> StreamRecord: ...


@dataclass(frozen=True)
class AnthropicWire:
    """Anthropic Messages, as Claude Code sends them: system blocks, tools, thinking."""

    model: str
    steer: bool
    api: Api = "anthropic"
    path: str = "/messages"

    def _fields(self, head: Head, req: ShapeRequest) -> Body:
        # Claude Code reasons in its conversations and not in its side queries.
        reasoning = req.kind != "side"
        fields: Body = {
            "model": self.model,
            "max_tokens": req.max_tokens or ANTHROPIC_DEFAULT_MAX_TOKENS,
            "thinking": {"type": "adaptive" if reasoning else "disabled"},
        }
        if self.steer:
            fields["custom_params"] = sim_steer(req, reasoning, bool(head.tools))
        return fields

    def root(self, head: Head, req: ShapeRequest, text: str, cache_key: str) -> Body:
        body: Body = {
            **self._fields(head, req),
            "system": [{"type": "text", "text": head.system}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
        }
        if head.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in head.tools
            ]
        return body

    def extend(
        self, parent: Body, answer: StreamRecord, head: Head, req: ShapeRequest, text: str
    ) -> Body:
        calls = [b for b in answer.answer if b.get("type") == "tool_use"]
        follow: list[Body] = (
            [
                {"type": "tool_result", "tool_use_id": b["id"], "content": part}
                for b, part in zip(calls, split_text(text, len(calls)), strict=True)
            ]
            if calls
            else [{"type": "text", "text": text}]
        )
        messages = [
            *parent["messages"],
            {"role": "assistant", "content": answer.answer},
            {"role": "user", "content": follow},
        ]
        return {**parent, **self._fields(head, req), "messages": messages}

    async def send(
        self, client: httpx.AsyncClient, url: str, body: Body, headers: Mapping[str, str]
    ) -> StreamRecord:
        return await stream_messages(client, url + self.path, body, headers)


@dataclass(frozen=True)
class ResponsesWire:
    """OpenAI Responses, as Codex sends them: instructions, stateless (store: false) with the
    encrypted reasoning sent back, prompt_cache_key."""

    model: str
    steer: bool
    api: Api = "responses"
    path: str = "/responses"

    def _fields(self, head: Head, req: ShapeRequest) -> Body:
        reasoning = req.kind != "side"
        fields: Body = {
            "model": self.model,
            "reasoning": {"effort": "medium" if reasoning else "none"},
            "store": False,
            "include": ["reasoning.encrypted_content"],
        }
        if req.max_tokens:  # 0: the client sent none (Codex sends none)
            fields["max_output_tokens"] = req.max_tokens
        if self.steer:
            fields["custom_params"] = sim_steer(req, reasoning, bool(head.tools))
        return fields

    def root(self, head: Head, req: ShapeRequest, text: str, cache_key: str) -> Body:
        body: Body = {
            **self._fields(head, req),
            "instructions": head.system,
            "input": [
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": text}],
                }
            ],
            "prompt_cache_key": cache_key,
        }
        if head.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                }
                for t in head.tools
            ]
            body["tool_choice"] = "auto"
            body["parallel_tool_calls"] = True
        return body

    def extend(
        self, parent: Body, answer: StreamRecord, head: Head, req: ShapeRequest, text: str
    ) -> Body:
        calls = [item for item in answer.answer if item.get("type") == "function_call"]
        follow: list[Body] = (
            [
                {"type": "function_call_output", "call_id": item["call_id"], "output": part}
                for item, part in zip(calls, split_text(text, len(calls)), strict=True)
            ]
            if calls
            else [
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": text}],
                }
            ]
        )
        inputs = [*parent["input"], *answer.answer, *follow]
        return {**parent, **self._fields(head, req), "input": inputs}

    async def send(
        self, client: httpx.AsyncClient, url: str, body: Body, headers: Mapping[str, str]
    ) -> StreamRecord:
        return await stream_responses(client, url + self.path, body, headers)


@dataclass(frozen=True)
class ChatWire:
    """OpenAI chat completions. `tools_in_system`: for routers in front of engines whose chat
    route ignores `tools` (the simulator's, behind smg), the definitions go into the system
    message as text, so the prompt has the same size and the same head bytes."""

    model: str
    steer: bool
    tools_in_system: bool
    api: Api = "openai"
    path: str = "/chat/completions"

    def _fields(self, head: Head, req: ShapeRequest) -> Body:
        fields: Body = {"model": self.model}
        if req.max_tokens:  # 0: the client sent none
            fields["max_tokens"] = req.max_tokens
        if self.steer:
            reasoning = req.kind != "side" and not self.tools_in_system
            tools = bool(head.tools) and not self.tools_in_system
            fields["custom_params"] = sim_steer(req, reasoning, tools)
        return fields

    def root(self, head: Head, req: ShapeRequest, text: str, cache_key: str) -> Body:
        definitions = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in head.tools
        ]
        system = head.system
        if self.tools_in_system and definitions:
            system += "\n\n# Tools\n" + "\n".join(json.dumps(d) for d in definitions)
        body: Body = {
            **self._fields(head, req),
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": text},
            ],
        }
        if definitions and not self.tools_in_system:
            body["tools"] = definitions
        return body

    def extend(
        self, parent: Body, answer: StreamRecord, head: Head, req: ShapeRequest, text: str
    ) -> Body:
        messages = [
            *parent["messages"],
            chat_assistant_message(answer),
            *chat_follow_up(answer, text),
        ]
        return {**parent, **self._fields(head, req), "messages": messages}

    async def send(
        self, client: httpx.AsyncClient, url: str, body: Body, headers: Mapping[str, str]
    ) -> StreamRecord:
        return await stream_chat(client, url + self.path, body, headers)


def wire_for(api: Api, model: str, *, steer: bool, chat_only: bool) -> Wire:
    """The wire for a shape's API; `chat_only` replays any shape as chat completions."""
    if chat_only:
        return ChatWire(model, steer, tools_in_system=True)
    if api == "anthropic":
        return AnthropicWire(model, steer)
    if api == "responses":
        return ResponsesWire(model, steer)
    return ChatWire(model, steer, tools_in_system=False)
