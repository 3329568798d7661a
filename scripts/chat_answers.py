"""Answers of the stand-in OpenAI chat completions API in scripts/record_agent_requests.py.

`scripted_choice(body, headers, run)` picks one assistant message for a `POST
/v1/chat/completions` request by the script (scripts/script_answers.py): `reasoning_content`
then `tool_calls`, or text. `stream_chunks(...)` turns it into `chat.completion.chunk` objects
(the role and reasoning first, one chunk per call with its whole arguments, the finish reason,
then a usage chunk when `stream_options.include_usage` asks for one); the caller frames them
as SSE and ends with `data: [DONE]`. `completion_object(...)` is the same when `stream` is
false.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from typing import Any

from scripts import script_answers


def _last_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    texts = [p.get("text") for p in content or [] if isinstance(p, dict) and "text" in p]
    return str(texts[-1]) if texts else ""


def prompt_step(body: Mapping[str, Any]) -> tuple[int, str]:
    """The script step of a request (1 + the last step of our call ids since its prompt) and
    the prompt's last text."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    start = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    prompt = _last_text(messages[start].get("content")) if start >= 0 else ""
    ids = [
        str(call.get("id"))
        for message in messages[start + 1 :]
        if message.get("role") == "assistant"
        for call in message.get("tool_calls") or []
        if isinstance(call, dict)
    ]
    return script_answers.step_after(ids), prompt


def _tool_names(body: Mapping[str, Any]) -> set[str]:
    names = set()
    for tool in body.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.add(function["name"])
    return names


def scripted_message(
    body: Mapping[str, Any], headers: Mapping[str, str], run: script_answers.ScriptRun
) -> tuple[dict[str, Any], str]:
    """The assistant message and finish_reason for one request under a script."""
    names = _tool_names(body)
    plan = run.plan(
        "call_",
        *prompt_step(body),
        lambda call: call.name in names and not isinstance(call.input, str),
        headers,
        body,
        has_tools=bool(names),
    )
    if plan.text is not None:
        return {"role": "assistant", "content": plan.text}, "stop"
    calls = [
        {
            "id": call_id,
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.input)},
        }
        for call_id, call in plan.calls
    ]
    message = {
        "role": "assistant",
        "content": None,
        "reasoning_content": script_answers.REASONING_TEXT,
        "tool_calls": calls,
    }
    return message, "tool_calls"


def usage(prompt_tokens: int, message: Mapping[str, Any]) -> dict[str, Any]:
    """Token counts sized by the JSON length; the prompt counts as uncached."""
    completion = len(json.dumps(message)) // 4
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


def completion_object(
    completion_id: str,
    model: str,
    message: dict[str, Any],
    finish_reason: str,
    prompt_tokens: int,
) -> dict[str, Any]:
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": usage(prompt_tokens, message),
    }


def stream_chunks(
    completion_id: str,
    body: Mapping[str, Any],
    message: dict[str, Any],
    finish_reason: str,
    prompt_tokens: int,
) -> Iterator[dict[str, Any]]:
    base = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": str(body.get("model", "unknown")),
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    first: dict[str, Any] = {"role": "assistant"}
    if message.get("reasoning_content"):
        first["reasoning_content"] = message["reasoning_content"]
    else:
        first["content"] = message.get("content") or ""
    yield chunk(first)
    for index, call in enumerate(message.get("tool_calls") or []):
        yield chunk({"tool_calls": [{"index": index, **call}]})
    yield chunk({}, finish_reason)
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        yield {**base, "choices": [], "usage": usage(prompt_tokens, message)}
