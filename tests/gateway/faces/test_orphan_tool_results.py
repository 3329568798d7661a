"""Tool results whose call the conversation does not show follow one rule on every face
(docs/architecture.md, "Tool results without their call"): a `tool` message where it stands,
rendered by GLM's template as a `<tool_response>` in that turn's observation block, tied to no
call; never a 400. Through the official openai and anthropic clients, in-process against the
FakeEngine, whose recorded /generate text is the prompt."""

from __future__ import annotations

from typing import Any

import httpx

from tests.gateway.conftest import MODEL
from tests.gateway.faces.sdk_clients import anthropic_client, openai_client
from tests.gateway.fake_engine import FakeEngine
from tests.gateway.parsers.support import render_call

HEAD = "[gMASK]<sop><|system|>Reasoning Effort: Max"
# What each face's request below renders to, the same on every face.
ORPHAN = "<|user|>Go on.<|observation|><tool_response>goal: ship it</tool_response>"
CALL = {"city": "Oslo"}
MIXED = (
    "<|user|>W?<|assistant|><think></think>"
    + render_call("get_weather", CALL)
    + "<|observation|><tool_response>-3C</tool_response><tool_response>stray</tool_response>"
    + "<|user|>And?<|assistant|><think>"
)


def openai_sdk(client: httpx.AsyncClient) -> Any:
    """The client, typed loosely: the shapes sent here are the ones its types leave out."""
    return openai_client(client)


def anthropic_sdk(client: httpx.AsyncClient) -> Any:
    return anthropic_client(client)


WEATHER_FN = {
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


async def test_codex_s_output_without_a_call_id(
    engine: FakeEngine, client: httpx.AsyncClient
) -> None:
    # Codex after auto-compaction, in a session with a thread goal.
    orphan = {
        "type": "function_call_output",
        "id": "fco_1",
        "name": "goal_objective",
        "namespace": "agent",
        "output": "goal: ship it",
    }
    response = await openai_sdk(client).responses.create(
        model=MODEL,
        input=[
            {"role": "user", "content": [{"type": "input_text", "text": "Go on."}]},
            orphan,
        ],
        store=False,
    )
    assert response.output_text == "Hello world"
    assert engine.generates[0]["text"] == HEAD + ORPHAN + "<|assistant|><think>"


async def test_an_output_whose_call_id_names_no_call(
    engine: FakeEngine, client: httpx.AsyncClient
) -> None:
    await openai_sdk(client).responses.create(
        model=MODEL,
        input=[
            {"role": "user", "content": "Go on."},
            {"type": "function_call_output", "call_id": "call_gone", "output": "goal: ship it"},
        ],
        store=False,
    )
    assert engine.generates[0]["text"] == HEAD + ORPHAN + "<|assistant|><think>"


async def test_chat_tool_messages_without_their_call(
    engine: FakeEngine, client: httpx.AsyncClient
) -> None:
    sdk = openai_sdk(client)
    for tool in (
        {"role": "tool", "tool_call_id": "call_gone", "content": "goal: ship it"},
        {"role": "tool", "content": "goal: ship it"},
    ):
        answer = await sdk.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Go on."}, tool],
        )
        assert answer.choices[0].message.content == "Hello world"
    assert [g["text"] for g in engine.generates] == [HEAD + ORPHAN + "<|assistant|><think>"] * 2


async def test_messages_tool_result_without_its_tool_use(
    engine: FakeEngine, client: httpx.AsyncClient
) -> None:
    answer = await anthropic_sdk(client).messages.create(
        model=MODEL,
        max_tokens=100,
        messages=[
            {"role": "user", "content": "Go on."},
            {"role": "assistant", "content": "Working."},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_gone", "content": "x"},
                    {"type": "text", "text": "Done?"},
                ],
            },
        ],
    )
    assert answer.stop_reason == "end_turn"
    assert engine.generates[0]["text"] == (
        HEAD
        + "<|user|>Go on.<|assistant|><think></think>Working."
        + "<|observation|><tool_response>x</tool_response><|user|>Done?<|assistant|><think>"
    )


async def test_a_stray_result_beside_a_real_one_keeps_the_received_order(
    engine: FakeEngine, client: httpx.AsyncClient
) -> None:
    """Every face: the run of results is rendered as received, as GLM's own template does."""
    await openai_sdk(client).chat.completions.create(
        model=MODEL,
        tools=[{"type": "function", "function": WEATHER_FN}],
        messages=[
            {"role": "user", "content": "W?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "-3C"},
            {"role": "tool", "tool_call_id": "call_gone", "content": "stray"},
            {"role": "user", "content": "And?"},
        ],
    )
    await openai_sdk(client).responses.create(
        model=MODEL,
        tools=[{"type": "function", **WEATHER_FN}],
        input=[
            {"role": "user", "content": "W?"},
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": '{"city": "Oslo"}',
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "-3C"},
            {"type": "function_call_output", "output": "stray"},
            {"role": "user", "content": "And?"},
        ],
        store=False,
    )
    await anthropic_sdk(client).messages.create(
        model=MODEL,
        max_tokens=100,
        tools=[{"name": "get_weather", "input_schema": WEATHER_FN["parameters"]}],
        messages=[
            {"role": "user", "content": "W?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": CALL}
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "-3C"},
                    {"type": "tool_result", "tool_use_id": "toolu_gone", "content": "stray"},
                    {"type": "text", "text": "And?"},
                ],
            },
        ],
    )
    tails = [g["text"][g["text"].index("<|user|>W?") :] for g in engine.generates]
    assert tails == [MIXED] * 3
