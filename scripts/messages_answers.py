"""Answers of the stand-in Anthropic Messages API in scripts/record_agent_requests.py.

`answer_blocks(body, tool_call)` picks the content blocks and stop_reason for one
`POST /v1/messages` request; `stream_events(...)` turns them into the streaming event sequence
and `message_object(...)` into one message. A request that offers the configured tool and whose
last message carries no `tool_result` gets a `thinking` block (signature THINKING_SIGNATURE)
then a `tool_use` of that tool; every other request gets one `text` block.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from scripts import script_answers

THINKING_TEXT = "The user wants the file read first; I will call Read on it."
THINKING_SIGNATURE = "recorder-signature-0001"
TOOL_USE_ID = "toolu_01RecorderReadCall0001"
FINAL_TEXT = "Done: I read the file."
AUX_TEXT = "Recorded answer."


def _usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
    }


def _last_message_has_tool_result(body: Mapping[str, Any]) -> bool:
    messages = body.get("messages") or []
    if not messages:
        return False
    content = messages[-1].get("content")
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content
    )


def _offers_tool(body: Mapping[str, Any], name: str) -> bool:
    return any(
        isinstance(tool, dict) and tool.get("name") == name for tool in body.get("tools") or []
    )


def answer_blocks(
    body: Mapping[str, Any], tool_call: Mapping[str, Any]
) -> tuple[list[dict[str, Any]], str]:
    """The content blocks and stop_reason for one /v1/messages request."""
    if _offers_tool(body, tool_call["name"]) and not _last_message_has_tool_result(body):
        return [
            {"type": "thinking", "thinking": THINKING_TEXT, "signature": THINKING_SIGNATURE},
            {"type": "tool_use", "id": TOOL_USE_ID, **tool_call},
        ], "tool_use"
    text = FINAL_TEXT if _last_message_has_tool_result(body) else AUX_TEXT
    return [{"type": "text", "text": text}], "end_turn"


def message_object(
    message_id: str, model: str, blocks: list[dict[str, Any]], stop_reason: str, input_tokens: int
) -> dict[str, Any]:
    """The whole message, for a request whose `stream` is false."""
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": _usage(input_tokens, _output_tokens(blocks)),
    }


def _output_tokens(blocks: list[dict[str, Any]]) -> int:
    return sum(len(json.dumps(block)) // 4 for block in blocks)


def stream_events(
    message_id: str, model: str, blocks: list[dict[str, Any]], stop_reason: str, input_tokens: int
) -> Iterator[dict[str, Any]]:
    """The Messages streaming event sequence for a finished list of content blocks."""
    output_tokens = _output_tokens(blocks)
    yield {
        "type": "message_start",
        "message": {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": _usage(input_tokens, 1),
        },
    }
    yield {"type": "ping"}
    for index, block in enumerate(blocks):
        kind = block["type"]
        if kind == "thinking":
            start: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
            deltas: list[dict[str, Any]] = [
                {"type": "thinking_delta", "thinking": block["thinking"]},
                {"type": "signature_delta", "signature": block["signature"]},
            ]
        elif kind == "tool_use":
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": ""},
                {"type": "input_json_delta", "partial_json": json.dumps(block["input"])},
            ]
        else:
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block["text"]}]
        yield {"type": "content_block_start", "index": index, "content_block": start}
        for delta in deltas:
            yield {"type": "content_block_delta", "index": index, "delta": delta}
        yield {"type": "content_block_stop", "index": index}
    yield {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        "usage": {"output_tokens": output_tokens},
    }
    yield {"type": "message_stop"}


def _is_prompt(message: Mapping[str, Any]) -> bool:
    """A user message that is not only carrying tool results: the start of a user turn."""
    content = message.get("content")
    return message.get("role") == "user" and not (
        isinstance(content, list)
        and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    )


def _last_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    texts = [
        b.get("text") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"
    ]
    return str(texts[-1]) if texts else ""


def prompt_step(body: Mapping[str, Any]) -> tuple[int, str]:
    """The script step of a request (1 + the last step of our tool_use ids since its prompt)
    and the prompt's last text."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    start = max((i for i, m in enumerate(messages) if _is_prompt(m)), default=-1)
    prompt = _last_text(messages[start].get("content")) if start >= 0 else ""
    ids = [
        str(block.get("id"))
        for message in messages[start + 1 :]
        if message.get("role") == "assistant" and isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "tool_use"
    ]
    return script_answers.step_after(ids), prompt


def scripted_blocks(
    body: Mapping[str, Any], headers: Mapping[str, str], run: script_answers.ScriptRun
) -> tuple[list[dict[str, Any]], str]:
    """The content blocks and stop_reason for one /v1/messages request under a script."""
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict)]
    names = {tool.get("name") for tool in tools}
    plan = run.plan(
        "toolu_",
        *prompt_step(body),
        lambda call: call.name in names,
        headers,
        body,
        has_tools=bool(tools),
    )
    if plan.text is not None:
        return [{"type": "text", "text": plan.text}], "end_turn"
    thinking = {
        "type": "thinking",
        "thinking": script_answers.REASONING_TEXT,
        "signature": THINKING_SIGNATURE,
    }
    uses = [
        {"type": "tool_use", "id": call_id, "name": call.name, "input": dict(call.input)}
        for call_id, call in plan.calls
        if not isinstance(call.input, str)
    ]
    return [thinking, *uses], "tool_use"
