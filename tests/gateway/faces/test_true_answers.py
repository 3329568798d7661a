"""Every face tells why generation stopped, apart from whether it made tool calls, and reports
the counts each API has a place for; read with the official `openai` and `anthropic` clients
against the in-process gateway, streamed and one-shot alike.

A tool call that max_tokens cuts is still sent (the client sees what was generated, as OpenAI
and Anthropic send it), but the answer says it was cut off (chat `length`, Messages
`max_tokens`, Responses `incomplete` with the unfinished item `incomplete`), so an agent does
not run a call whose arguments end mid-value.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from tests.gateway.conftest import MODEL
from tests.gateway.faces.sdk_clients import anthropic_client, openai_client
from tests.gateway.fake_engine import FakeEngine, Script
from tests.gateway.parsers.support import render_call
from tests.support.anthropic_events import check_stream as check_messages
from tests.support.anthropic_events import parse_sse
from tests.support.responses_events import check_stream as check_responses

PARAMETERS = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
}
# Cut inside the value of "content": the arguments as sent are valid JSON, and wrong.
CUT = (
    "plan</think><tool_call>write_file<arg_key>path</arg_key><arg_value>a.py</arg_value>"
    "<arg_key>content</arg_key><arg_value>def f():\n    ret"
)
LENGTH = {"type": "length", "length": 40}
STREAMED = pytest.mark.parametrize("stream", [False, True], ids=["one-shot", "streamed"])


def pieces(text: str, size: int = 5) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


# -- chat ---------------------------------------------------------------------------------


def chat_tools() -> Any:
    return [{"type": "function", "function": {"name": "write_file", "parameters": PARAMETERS}}]


async def chat(client: httpx.AsyncClient, stream: bool, **extra: Any) -> tuple[str | None, Any]:
    """(finish_reason, the message's tool calls or the streamed call deltas, usage)."""
    sdk = openai_client(client)
    messages: Any = [{"role": "user", "content": "write it"}]
    if not stream:
        reply = await sdk.chat.completions.create(
            model=MODEL, messages=messages, tools=chat_tools(), **extra
        )
        choice = reply.choices[0]
        return choice.finish_reason, (choice.message.tool_calls, reply.usage)
    finish, usage = None, None
    calls: list[Any] = []
    chunks = await sdk.chat.completions.create(
        model=MODEL,
        messages=messages,
        tools=chat_tools(),
        stream=True,
        stream_options={"include_usage": True},
        **extra,
    )
    async for chunk in chunks:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            calls += choice.delta.tool_calls or []
    return finish, (calls, usage)


@STREAMED
async def test_chat_says_length_for_a_tool_call_cut_by_max_tokens(
    engine: FakeEngine, client: httpx.AsyncClient, stream: bool
) -> None:
    engine.script = Script(pieces=pieces(CUT), finish=LENGTH)
    finish, (calls, _) = await chat(client, stream, max_tokens=40)
    assert finish == "length"
    # What was generated is still sent: the client can show it or retry with more tokens.
    assert calls
    assert calls[0].function.name == "write_file"


@STREAMED
async def test_chat_says_tool_calls_for_a_finished_call(
    engine: FakeEngine, client: httpx.AsyncClient, stream: bool
) -> None:
    output = "plan</think>" + render_call("write_file", {"path": "a.py", "content": "x"})
    engine.script = Script(pieces=pieces(output), finish={"type": "stop", "matched": 151338})
    finish, _ = await chat(client, stream)
    assert finish == "tool_calls"


@STREAMED
async def test_chat_reports_reasoning_tokens(
    engine: FakeEngine, client: httpx.AsyncClient, stream: bool
) -> None:
    # Default script: "Hmm" (completion token 1), "</think>", then the answer: 5 tokens.
    finish, (_, usage) = await chat(client, stream)
    assert finish == "stop"
    assert usage.completion_tokens == 5
    assert usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == 1


async def test_chat_chunks_carry_usage_null_under_include_usage(
    client: httpx.AsyncClient,
) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    frames = [f for f in response.text.split("\n\n") if f]
    assert frames[-1] == "data: [DONE]"
    chunks = [orjson.loads(f.removeprefix("data: ")) for f in frames[:-1]]
    assert len(chunks) >= 3
    # OpenAI's documented format: every chunk has "usage", null but on the last one.
    *others, last = chunks
    for chunk in others:
        assert "usage" in chunk, chunk
        assert chunk["usage"] is None, chunk
    assert last["choices"] == []
    assert last["usage"]["total_tokens"] == 17


async def test_chat_chunks_have_no_usage_without_include_usage(
    client: httpx.AsyncClient,
) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    response = await client.post("/v1/chat/completions", json=body)
    frames = [f for f in response.text.split("\n\n") if f]
    chunks = [orjson.loads(f.removeprefix("data: ")) for f in frames[:-1]]
    assert chunks
    assert all("usage" not in chunk for chunk in chunks)


# -- Messages -----------------------------------------------------------------------------


def messages_body(**extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-opus-4-1",
        "max_tokens": 40,
        "messages": [{"role": "user", "content": "write it"}],
        "tools": [{"name": "write_file", "input_schema": PARAMETERS}],
        **extra,
    }


async def message(client: httpx.AsyncClient, stream: bool, **extra: Any) -> Any:
    sdk = anthropic_client(client)
    if not stream:
        return await sdk.messages.create(**messages_body(**extra))
    async with sdk.messages.stream(**messages_body(**extra)) as events:
        return await events.get_final_message()


@STREAMED
async def test_messages_says_max_tokens_for_a_tool_call_cut_by_max_tokens(
    engine: FakeEngine, client: httpx.AsyncClient, stream: bool
) -> None:
    engine.script = Script(pieces=pieces(CUT), finish=LENGTH)
    reply = await message(client, stream)
    assert reply.stop_reason == "max_tokens"
    # The block is still sent, as Anthropic sends an unfinished tool_use block.
    assert [block.type for block in reply.content] == ["thinking", "tool_use"]


async def test_the_raw_messages_stream_of_a_cut_call_keeps_its_grammar(
    engine: FakeEngine, client: httpx.AsyncClient
) -> None:
    engine.script = Script(pieces=pieces(CUT), finish=LENGTH)
    response = await client.post("/v1/messages", json=messages_body(stream=True))
    assert response.status_code == 200
    streamed = check_messages(parse_sse(response.content))
    assert streamed["stop_reason"] == "max_tokens"
    assert streamed["content"][-1]["type"] == "tool_use"


@STREAMED
async def test_messages_reports_thinking_tokens(
    engine: FakeEngine, client: httpx.AsyncClient, stream: bool
) -> None:
    reply = await message(client, stream)
    assert reply.stop_reason == "end_turn"
    assert reply.usage.output_tokens == 5
    assert reply.usage.output_tokens_details is not None
    assert reply.usage.output_tokens_details.thinking_tokens == 1


# -- Responses ----------------------------------------------------------------------------


def responses_tools() -> list[Any]:
    return [{"type": "function", "name": "write_file", "parameters": PARAMETERS}]


@STREAMED
async def test_responses_marks_a_cut_call_incomplete(
    engine: FakeEngine, client: httpx.AsyncClient, stream: bool
) -> None:
    engine.script = Script(pieces=pieces(CUT), finish=LENGTH)
    sdk = openai_client(client)
    request: Any = {
        "model": "m",
        "input": "write it",
        "tools": responses_tools(),
        "max_output_tokens": 40,
    }
    if stream:
        done, final = [], None
        async for event in await sdk.responses.create(**request, stream=True):
            if event.type == "response.output_item.done":
                done.append(event.item)
            elif event.type in ("response.completed", "response.incomplete"):
                final = event.response
        assert final is not None
        assert [item.status for item in done if item.type == "function_call"] == ["incomplete"]
    else:
        final = await sdk.responses.create(**request)
    assert final.status == "incomplete"
    assert final.incomplete_details is not None
    assert final.incomplete_details.reason == "max_output_tokens"
    (call,) = [item for item in final.output if item.type == "function_call"]
    assert call.status == "incomplete"
    assert call.name == "write_file"


async def test_the_raw_responses_stream_of_a_cut_call_keeps_its_grammar(
    engine: FakeEngine, client: httpx.AsyncClient
) -> None:
    engine.script = Script(pieces=pieces(CUT), finish=LENGTH)
    body = {"model": "m", "input": "write it", "tools": responses_tools(), "stream": True}
    response = await client.post("/v1/responses", json=body)
    assert response.status_code == 200
    checked = check_responses(parse_sse(response.content))
    assert checked.response["status"] == "incomplete"
    assert checked.response["output"][-1]["status"] == "incomplete"


@STREAMED
async def test_responses_items_finished_before_the_cut_stay_completed(
    engine: FakeEngine, client: httpx.AsyncClient, stream: bool
) -> None:
    whole = render_call("write_file", {"path": "a.py", "content": "x"})
    engine.script = Script(pieces=pieces("plan</think>Here." + whole + CUT[12:]), finish=LENGTH)
    body = {"model": "m", "input": "write it", "tools": responses_tools(), "stream": stream}
    response = await client.post("/v1/responses", json=body)
    assert response.status_code == 200
    final = check_responses(parse_sse(response.content)).response if stream else response.json()
    assert final["status"] == "incomplete"
    statuses = [(item["type"], item.get("status")) for item in final["output"]]
    assert statuses == [
        ("reasoning", None),
        ("message", "completed"),
        ("function_call", "completed"),
        ("function_call", "incomplete"),
    ]
