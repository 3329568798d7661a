"""Tool calls end to end: simulator -> gateway -> the official openai client.

The simulator writes GLM markup for the tools the rendered prompt lists; `custom_params.sim`
steers it per request (how many calls, which ones, or a verbatim output), which the gateway
forwards when FLASHBOX_UPSTREAM__FORWARD_CUSTOM_PARAMS is on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionMessageFunctionToolCall
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message_function_tool_call import Function

from tests.support.procs import Proc, start_gateway, start_sim

MODEL = "glm-5.3-flash"
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer", "minimum": 1, "maximum": 14},
                    "metric": {"type": "boolean"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["city", "days"],
            },
        },
    },
    {"type": "function", "function": {"name": "now", "description": "Current time"}},
]
JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "integer": int,
    "boolean": bool,
    "array": list,
}
USER = [{"role": "user", "content": "What is the weather in Oslo?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
OSLO = {"city": "Oslo", "days": 2}


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[Proc, Proc]]:
    sim = start_sim()
    try:
        gateway = start_gateway([sim.url], env={"FLASHBOX_UPSTREAM__FORWARD_CUSTOM_PARAMS": "true"})
    except BaseException:
        sim.stop()
        raise
    try:
        yield sim, gateway
    finally:
        gateway.stop()
        sim.stop()


@pytest.fixture
def client(stack: tuple[Proc, Proc]) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack[1].url + "/v1", api_key="unused", max_retries=0)


def _steer(**sim: Any) -> dict[str, Any]:
    return {"custom_params": {"sim": sim}}


def _rejected(gateway: Proc, reason: str) -> float:
    text = httpx.get(gateway.url + "/metrics", timeout=5).text
    pattern = rf'^flashbox_tool_calls_rejected_total\{{[^}}]*reason="{reason}"[^}}]*\}} (\S+)$'
    return sum(float(v) for v in re.findall(pattern, text, flags=re.MULTILINE))


def _stream(client: openai.OpenAI, **kwargs: Any) -> dict[str, Any]:
    """Assemble a streamed answer the way OpenAI clients do (tool calls by index)."""
    out: dict[str, Any] = {"content": "", "reasoning": "", "calls": {}, "finish": None}
    for chunk in client.chat.completions.create(model=MODEL, stream=True, **kwargs):
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        delta = choice.delta
        out["content"] += delta.content or ""
        out["reasoning"] += (delta.model_extra or {}).get("reasoning_content") or ""
        for call in delta.tool_calls or []:
            slot = out["calls"].setdefault(call.index, {"id": None, "name": "", "arguments": ""})
            if call.id:
                assert slot["id"] is None, "a call's id is sent once"
                slot["id"] = call.id
            if call.function is not None:
                slot["name"] += call.function.name or ""
                slot["arguments"] += call.function.arguments or ""
        out["finish"] = choice.finish_reason or out["finish"]
    return out


def _complete(client: openai.OpenAI, **kwargs: Any) -> Choice:
    response: ChatCompletion = client.chat.completions.create(model=MODEL, stream=False, **kwargs)
    return response.choices[0]


def _function_calls(choice: Choice) -> list[Function]:
    calls = choice.message.tool_calls or []
    assert all(isinstance(c, ChatCompletionMessageFunctionToolCall) for c in calls)
    return [c.function for c in calls if isinstance(c, ChatCompletionMessageFunctionToolCall)]


def _check_weather_arguments(arguments: str) -> dict[str, Any]:
    decoded = json.loads(arguments)
    assert isinstance(decoded, dict)
    properties = TOOLS[0]["function"]["parameters"]["properties"]
    for key, value in decoded.items():
        expected = JSON_TYPES[properties[key]["type"]]
        assert isinstance(value, expected), (key, value)
        assert not (expected is int and isinstance(value, bool))
    return decoded


def test_streamed_tool_calls_assemble_like_the_one_shot_answer(client: openai.OpenAI) -> None:
    request: dict[str, Any] = {
        "messages": USER,
        "tools": TOOLS,
        "seed": 7,
        "max_tokens": 400,
        "extra_body": _steer(tool_calls=3),
    }
    streamed = _stream(client, **request)
    whole = _complete(client, **request)
    assert streamed["finish"] == whole.finish_reason == "tool_calls"
    calls = [streamed["calls"][i] for i in sorted(streamed["calls"])]
    assert sorted(streamed["calls"]) == list(range(3))
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [
        (f.name, json.loads(f.arguments)) for f in _function_calls(whole)
    ]
    assert streamed["content"] == (whole.message.content or "")
    assert len({c["id"] for c in calls}) == 3
    for call in calls:
        assert call["id"].startswith("call_")
        if call["name"] == "get_weather":
            _check_weather_arguments(call["arguments"])
        else:
            assert json.loads(call["arguments"]) == {}


def test_follow_up_turn_with_tool_results_renders_and_continues(client: openai.OpenAI) -> None:
    first = _complete(
        client,
        messages=USER,
        tools=TOOLS,
        max_tokens=300,
        extra_body=_steer(tool_call_list=[{"name": "get_weather", "arguments": OSLO}] * 2),
    )
    assert first.finish_reason == "tool_calls"
    calls = first.message.tool_calls or []
    assert [json.loads(f.arguments) for f in _function_calls(first)] == [OSLO] * 2
    assistant = first.message.model_dump(exclude_none=True)
    results = [
        {"role": "tool", "tool_call_id": call.id, "content": f"sunny, {n} C"}
        for n, call in enumerate(reversed(calls))
    ]
    second = _complete(
        client,
        messages=[*USER, assistant, *results],
        tools=TOOLS,
        max_tokens=100,
        extra_body=_steer(tool_calls=0),
    )
    assert second.finish_reason in ("stop", "length")
    assert second.message.tool_calls is None
    assert second.message.content


def test_tool_choice_none_parses_nothing_as_a_call(
    client: openai.OpenAI, stack: tuple[Proc, Proc]
) -> None:
    markup = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>"
    for stream in (False, True):
        request: dict[str, Any] = {
            "messages": USER,
            "tools": TOOLS,
            "tool_choice": "none",
            "max_tokens": 200,
            "extra_body": _steer(output="plan</think>Calling it: " + markup),
        }
        if stream:
            answer = _stream(client, **request)
            assert (answer["calls"], answer["finish"]) == ({}, "stop")
            assert answer["content"] == "Calling it: " + markup
        else:
            choice = _complete(client, **request)
            assert (choice.message.tool_calls, choice.finish_reason) == (None, "stop")
            assert choice.message.content == "Calling it: " + markup


def test_tool_choice_none_does_not_offer_the_tools(client: openai.OpenAI) -> None:
    # The simulator calls tools only when the prompt lists them.
    choice = _complete(
        client,
        messages=USER,
        tools=TOOLS,
        tool_choice="none",
        max_tokens=300,
        extra_body=_steer(tool_calls=2),
    )
    assert (choice.message.tool_calls, choice.finish_reason) == (None, "stop")
    assert "<tool_call>" not in (choice.message.content or "")


def test_tool_choice_required_makes_calls(client: openai.OpenAI) -> None:
    answer = _stream(
        client,
        messages=USER,
        tools=TOOLS,
        tool_choice="required",
        max_tokens=300,
        extra_body=_steer(tool_calls=2),
    )
    assert answer["finish"] == "tool_calls"
    assert len(answer["calls"]) == 2


def test_tool_choice_required_forces_a_call_the_model_did_not_plan(
    client: openai.OpenAI,
) -> None:
    answer = _stream(
        client,
        messages=USER,
        tools=TOOLS,
        tool_choice="required",
        max_tokens=300,
        extra_body=_steer(tool_calls=0),
    )
    assert answer["finish"] == "tool_calls"
    assert answer["calls"]


def test_named_tool_choice_keeps_only_that_function(
    client: openai.OpenAI, stack: tuple[Proc, Proc]
) -> None:
    gateway = stack[1]
    before = _rejected(gateway, "not_chosen")
    steer = _steer(
        tool_call_list=[
            {"name": "now", "arguments": {}},
            {"name": "get_weather", "arguments": {"city": "Lima", "days": 1}},
        ]
    )
    answer = _stream(
        client, messages=USER, tools=TOOLS, tool_choice=NAMED, max_tokens=300, extra_body=steer
    )
    assert answer["finish"] == "tool_calls"
    assert [c["name"] for c in answer["calls"].values()] == ["get_weather"]
    assert _check_weather_arguments(answer["calls"][0]["arguments"]) == {"city": "Lima", "days": 1}
    assert "<tool_call>now</tool_call>" in answer["content"]
    assert _rejected(gateway, "not_chosen") == before + 1


def test_undeclared_tool_is_content_and_counted(
    client: openai.OpenAI, stack: tuple[Proc, Proc]
) -> None:
    gateway = stack[1]
    before = _rejected(gateway, "undeclared")
    choice = _complete(
        client,
        messages=USER,
        tools=TOOLS,
        max_tokens=300,
        extra_body=_steer(tool_call_list=[{"name": "delete_everything", "arguments": {}}]),
    )
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    assert "<tool_call>delete_everything</tool_call>" in (choice.message.content or "")
    assert _rejected(gateway, "undeclared") == before + 1


def test_unknown_named_tool_is_a_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        _complete(
            client,
            messages=USER,
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "nope"}},
            max_tokens=50,
        )
    assert "tool_choice" in str(caught.value)


TWO_CALLS = [{"name": "get_weather", "arguments": OSLO}, {"name": "now", "arguments": {}}]


@pytest.mark.parametrize("stream", [False, True])
def test_parallel_tool_calls_false_gives_one_call_on_every_face(
    stack: tuple[Proc, Proc], stream: bool
) -> None:
    """The model would make two calls; a client that turned parallel calls off gets the first,
    whole, and a finish that asks for its result (the engine stops where that call closes)."""
    url = stack[1].url
    steer = _steer(tool_call_list=TWO_CALLS)
    chat = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    for parallel, expected in ((True, 2), (False, 1)):
        kwargs: dict[str, Any] = {"model": MODEL, "messages": USER, "tools": TOOLS}
        answer = chat.chat.completions.create(
            **kwargs, parallel_tool_calls=parallel, max_tokens=300, extra_body=steer
        )
        calls = answer.choices[0].message.tool_calls or []
        assert len(calls) == expected
        assert answer.choices[0].finish_reason == "tool_calls"
    responses_tools = [{"type": "function", **t["function"]} for t in TOOLS]
    body = {"model": MODEL, "input": "Weather?", "tools": responses_tools, "stream": stream}
    one = _post(url + "/v1/responses", {**body, "parallel_tool_calls": False, **steer})
    calls = [i for i in one["output"] if i["type"] == "function_call"]
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("get_weather", OSLO)]
    anthropic_tools = [
        {"name": t["function"]["name"], "input_schema": t["function"].get("parameters", {})}
        for t in TOOLS
    ]
    message = {
        "model": MODEL,
        "max_tokens": 300,
        "messages": USER,
        "tools": anthropic_tools,
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
        "stream": stream,
        **steer,
    }
    answer_one = _post(url + "/v1/messages", message)
    uses = [b for b in answer_one["content"] if b["type"] == "tool_use"]
    assert [(u["name"], u["input"]) for u in uses] == [("get_weather", OSLO)]
    assert answer_one["stop_reason"] == "tool_use"


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """A non-streamed answer, or a streamed one's final object (response.completed's response,
    or an Anthropic message rebuilt from its content blocks)."""
    response = httpx.post(url, json=body, timeout=30)
    assert response.status_code == 200, response.text
    if not body.get("stream"):
        return dict(response.json())
    events = [
        json.loads(line[len("data: ") :])
        for line in response.text.splitlines()
        if line.startswith("data: {")
    ]
    for event in events:
        if event.get("type") == "response.completed":
            return dict(event["response"])
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    stop_reason = None
    for event in events:
        if event["type"] == "content_block_start":
            blocks[event["index"]] = dict(event["content_block"])
        elif (
            event["type"] == "content_block_delta" and event["delta"]["type"] == "input_json_delta"
        ):
            partial[event["index"]] = (
                partial.get(event["index"], "") + event["delta"]["partial_json"]
            )
        elif event["type"] == "message_delta":
            stop_reason = event["delta"].get("stop_reason")
    for index, text in partial.items():
        blocks[index]["input"] = json.loads(text)
    return {"content": [blocks[i] for i in sorted(blocks)], "stop_reason": stop_reason}
