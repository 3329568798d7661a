"""Answers of the stand-in OpenAI Responses API in scripts/record_agent_requests.py.

`answer_items(body, tool_call)` picks the finished output items for one `POST /v1/responses`
request; `stream_events(...)` turns them into the streaming event sequence, in the order the
official openai SDK's `responses.stream()` accepts: `response.created`, `response.in_progress`,
then per item `output_item.added`, its content events, `output_item.done`, and last
`response.completed` with usage. Every event has `type` and a strictly increasing
`sequence_number`; `response_object(...)` is the same response when `stream` is false.

The configured tool call is `{"name", "input", "namespace"?}`: an object `input` makes a
`function_call` (the object as its JSON `arguments`), a string `input` a `custom_tool_call`
(free-form input, as Codex's `apply_patch`). A request that offers that tool (by name at the
top level, or inside the `namespace` tool the call names) and carries no output for our call
gets a reasoning item (summary and reasoning_text content, plus `encrypted_content` when
`include` asks for `reasoning.encrypted_content`) and the call; the request carrying our call's
`function_call_output` or `custom_tool_call_output` gets one assistant message, and so does
every other request.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from typing import Any

from scripts import script_answers

REASONING_ID = "rs_recorder0001"
REASONING_SUMMARY = "Reading the file first."
REASONING_TEXT = "The user wants the file read first; I will run a command that prints it."
ENCRYPTED_CONTENT = "recorder-encrypted-content-0001"
FUNCTION_CALL_ID = "fc_recorder0001"
CUSTOM_CALL_ID = "ctc_recorder0001"
CALL_ID = "call_recorder0001"
FINAL_TEXT = "Done: I read the file."
AUX_TEXT = "Recorded answer."
ENCRYPTED_REASONING = "reasoning.encrypted_content"


def _message(item_id: str, text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def _reasoning(encrypted: bool) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "reasoning",
        "id": REASONING_ID,
        "summary": [{"type": "summary_text", "text": REASONING_SUMMARY}],
        "content": [{"type": "reasoning_text", "text": REASONING_TEXT}],
    }
    if encrypted:
        item["encrypted_content"] = ENCRYPTED_CONTENT
    return item


def _tool_call(tool_call: Mapping[str, Any]) -> dict[str, Any]:
    """A function_call (input given as an object) or a custom_tool_call (input as a string)."""
    named = {"call_id": CALL_ID, "name": tool_call["name"]}
    item: dict[str, Any]
    if isinstance(tool_call["input"], str):
        item = {"type": "custom_tool_call", "id": CUSTOM_CALL_ID, **named}
        item["input"] = tool_call["input"]
    else:
        item = {"type": "function_call", "id": FUNCTION_CALL_ID, **named}
        item["arguments"] = json.dumps(tool_call["input"])
    item["status"] = "completed"
    if tool_call.get("namespace"):
        item["namespace"] = tool_call["namespace"]
    return item


def _offers_tool(body: Mapping[str, Any], tool_call: Mapping[str, Any]) -> bool:
    tools = body.get("tools") or []
    namespace = tool_call.get("namespace")
    if namespace:
        groups = [t for t in tools if t.get("type") == "namespace" and t.get("name") == namespace]
        tools = [tool for group in groups for tool in group.get("tools") or []]
    return any(isinstance(tool, dict) and tool.get("name") == tool_call["name"] for tool in tools)


def _answered_call(body: Mapping[str, Any]) -> bool:
    items = body.get("input")
    return isinstance(items, list) and any(
        isinstance(item, dict)
        and item.get("type") in ("function_call_output", "custom_tool_call_output")
        and item.get("call_id") == CALL_ID
        for item in items
    )


def answer_items(body: Mapping[str, Any], tool_call: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The finished output items for one /v1/responses request."""
    if _answered_call(body):
        return [_message("msg_recorder0002", FINAL_TEXT)]
    if _offers_tool(body, tool_call):
        encrypted = ENCRYPTED_REASONING in (body.get("include") or [])
        return [_reasoning(encrypted), _tool_call(tool_call)]
    return [_message("msg_recorder0001", AUX_TEXT)]


def response_usage(input_tokens: int, items: list[dict[str, Any]]) -> dict[str, Any]:
    """Token counts sized by the JSON length; input counts as uncached."""
    output_tokens = sum(len(json.dumps(item)) // 4 for item in items)
    reasoning = sum(len(json.dumps(i)) // 4 for i in items if i["type"] == "reasoning")
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input_tokens + output_tokens,
    }


def response_object(
    response_id: str,
    body: Mapping[str, Any],
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
) -> dict[str, Any]:
    """The Response object: lifecycle events carry it, and so does a non-streamed answer."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": str(body.get("model", "unknown")),
        "output": output,
        "usage": usage,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "parallel_tool_calls": bool(body.get("parallel_tool_calls", True)),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": [],
        "temperature": None,
        "top_p": None,
        "store": bool(body.get("store", True)),
    }


def _item_events(index: int, item: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The events from output_item.added to output_item.done for one finished item."""
    item_id = item["id"]
    at = {"item_id": item_id, "output_index": index}
    kind = item["type"]
    if kind == "reasoning":
        added: dict[str, Any] = {**item, "summary": [], "content": []}
        added.pop("encrypted_content", None)
        yield {"type": "response.output_item.added", "output_index": index, "item": added}
        for n, part in enumerate(item.get("summary") or []):
            blank = {"type": "summary_text", "text": ""}
            yield {
                "type": "response.reasoning_summary_part.added",
                **at,
                "summary_index": n,
                "part": blank,
            }
            yield {
                "type": "response.reasoning_summary_text.delta",
                **at,
                "summary_index": n,
                "delta": part["text"],
            }
            yield {
                "type": "response.reasoning_summary_text.done",
                **at,
                "summary_index": n,
                "text": part["text"],
            }
            yield {
                "type": "response.reasoning_summary_part.done",
                **at,
                "summary_index": n,
                "part": part,
            }
        for n, part in enumerate(item.get("content") or []):
            yield {
                "type": "response.reasoning_text.delta",
                **at,
                "content_index": n,
                "delta": part["text"],
            }
            yield {
                "type": "response.reasoning_text.done",
                **at,
                "content_index": n,
                "text": part["text"],
            }
    elif kind == "function_call":
        added = {**item, "arguments": "", "status": "in_progress"}
        yield {"type": "response.output_item.added", "output_index": index, "item": added}
        yield {"type": "response.function_call_arguments.delta", **at, "delta": item["arguments"]}
        yield {
            "type": "response.function_call_arguments.done",
            **at,
            "arguments": item["arguments"],
        }
    elif kind == "custom_tool_call":
        added = {**item, "input": "", "status": "in_progress"}
        yield {"type": "response.output_item.added", "output_index": index, "item": added}
        yield {"type": "response.custom_tool_call_input.delta", **at, "delta": item["input"]}
        yield {"type": "response.custom_tool_call_input.done", **at, "input": item["input"]}
    else:
        added = {**item, "status": "in_progress", "content": []}
        yield {"type": "response.output_item.added", "output_index": index, "item": added}
        for n, part in enumerate(item["content"]):
            empty: dict[str, Any] = {
                "type": "output_text",
                "text": "",
                "annotations": [],
                "logprobs": [],
            }
            yield {"type": "response.content_part.added", **at, "content_index": n, "part": empty}
            yield {
                "type": "response.output_text.delta",
                **at,
                "content_index": n,
                "delta": part["text"],
                "logprobs": [],
            }
            yield {
                "type": "response.output_text.done",
                **at,
                "content_index": n,
                "text": part["text"],
                "logprobs": [],
            }
            yield {"type": "response.content_part.done", **at, "content_index": n, "part": part}
    yield {"type": "response.output_item.done", "output_index": index, "item": item}


def stream_events(
    response_id: str, body: Mapping[str, Any], items: list[dict[str, Any]], input_tokens: int
) -> Iterator[dict[str, Any]]:
    """The whole event sequence of one streamed response, numbered from 0."""

    def unnumbered() -> Iterator[dict[str, Any]]:
        started = response_object(response_id, body, "in_progress", [], None)
        yield {"type": "response.created", "response": started}
        yield {"type": "response.in_progress", "response": started}
        for index, item in enumerate(items):
            yield from _item_events(index, item)
        done = response_object(
            response_id, body, "completed", items, response_usage(input_tokens, items)
        )
        yield {"type": "response.completed", "response": done}

    for number, event in enumerate(unnumbered()):
        yield {**event, "sequence_number": number}


def _is_prompt(item: Any) -> bool:
    """A user message that a person typed. Codex also puts its own context into user messages
    (`<environment_context>`, `<subagent_notification>` when a spawned agent finishes): those
    are all tagged text and do not start a new user turn."""
    if not (
        isinstance(item, dict)
        and item.get("type", "message") == "message"
        and item.get("role") == "user"
    ):
        return False
    content = item.get("content")
    parts = [content] if isinstance(content, str) else content or []
    texts = [p if isinstance(p, str) else p.get("text", "") for p in parts if p]
    return not all(str(text).lstrip().startswith("<") for text in texts)


def _last_text(item: Any) -> str:
    content = item.get("content") if isinstance(item, dict) else None
    if isinstance(content, str):
        return content
    texts = [p.get("text") for p in content or [] if isinstance(p, dict) and "text" in p]
    return str(texts[-1]) if texts else ""


def prompt_step(body: Mapping[str, Any]) -> tuple[int, str]:
    """The script step of a request (1 + the last step of our call ids since its prompt) and
    the prompt's last text."""
    items = body.get("input")
    if not isinstance(items, list):
        return 0, str(items or "")
    start = max((i for i, item in enumerate(items) if _is_prompt(item)), default=-1)
    prompt = _last_text(items[start]) if start >= 0 else ""
    ids = [
        str(item.get("call_id"))
        for item in items[start + 1 :]
        if isinstance(item, dict) and item.get("type") in ("function_call", "custom_tool_call")
    ]
    return script_answers.step_after(ids), prompt


def _offers(body: Mapping[str, Any], call: script_answers.Call) -> bool:
    return _offers_tool(body, {"name": call.name, "namespace": call.namespace})


def scripted_items(
    body: Mapping[str, Any], headers: Mapping[str, str], run: script_answers.ScriptRun
) -> list[dict[str, Any]]:
    """The finished output items for one /v1/responses request under a script."""
    plan = run.plan(
        "call_",
        *prompt_step(body),
        lambda call: _offers(body, call),
        headers,
        body,
        has_tools=bool(body.get("tools")),
    )
    if plan.text is not None:
        return [_message(f"msg_recorder{time.time_ns()}", plan.text)]
    encrypted = ENCRYPTED_REASONING in (body.get("include") or [])
    first_id = plan.calls[0][0]
    reasoning = {**_reasoning(encrypted), "id": f"rs_{first_id}"}
    reasoning["content"] = [{"type": "reasoning_text", "text": script_answers.REASONING_TEXT}]
    items = [reasoning]
    for call_id, call in plan.calls:
        spec = {"name": call.name, "input": call.input, "namespace": call.namespace}
        item = {**_tool_call(spec), "call_id": call_id}
        item["id"] = f"{'ctc' if isinstance(call.input, str) else 'fc'}_{call_id}"
        items.append(item)
    return items
