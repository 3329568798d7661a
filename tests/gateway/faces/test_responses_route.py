"""POST/GET/DELETE /v1/responses in-process against the FakeEngine, which records the exact
/generate body: what the engine is asked (prompt text, budgets) for Responses requests, and the
store behind previous_response_id."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.gateway.conftest import gateway_client
from tests.gateway.fake_engine import FakeEngine, Script
from tests.gateway.parsers.support import render_call
from tests.support.responses_events import check_stream, check_usage, parse_sse

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    },
}
DOCS = {
    "type": "namespace",
    "name": "mcp__docs__",
    "tools": [{"type": "function", "name": "search", "parameters": {"type": "object"}}],
}
PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files."}
TOOLS = [WEATHER, DOCS, PATCH, {"type": "web_search"}]
PATCH_TEXT = '*** Begin Patch\n+say "hi" é\n*** End Patch\n'
OUTPUT = (
    "Thinking about it:\n  the user wants São Paulo.\n"
    + "</think>"
    + "Checking."
    + render_call("get_weather", {"city": 'São "Paulo"\n\\', "days": 2})
    + render_call("mcp__docs__search", {"q": "x"})
    + render_call("apply_patch", {"input": PATCH_TEXT})
)


def pieces(text: str, size: int = 3) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def body(**fields: Any) -> dict[str, Any]:
    return {
        "model": "gpt-5.3-codex",
        "instructions": "You help.",
        "input": [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "<rules/>"}],
            },
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "W?"}]},
        ],
        **fields,
    }


async def answer(client: httpx.AsyncClient, payload: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/v1/responses", json=payload)
    assert response.status_code == 200, response.text
    if not payload.get("stream"):
        result: dict[str, Any] = response.json()
        return result
    return check_stream(parse_sse(response.content)).response


def replayed(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Output items as Codex replays them (no ids), and an output for each call."""
    items: list[dict[str, Any]] = [
        {k: v for k, v in item.items() if k not in ("id", "status")} for item in output
    ]
    for item in output:
        if item["type"] == "function_call":
            items.append(
                {"type": "function_call_output", "call_id": item["call_id"], "output": "9C"}
            )
        elif item["type"] == "custom_tool_call":
            items.append(
                {"type": "custom_tool_call_output", "call_id": item["call_id"], "output": "ok"}
            )
    return items


@pytest.mark.parametrize("stream", [False, True], ids=["collected", "streamed"])
async def test_turn_two_is_sent_as_turn_one_prompt_plus_its_output(
    engine: FakeEngine, client: httpx.AsyncClient, stream: bool
) -> None:
    engine.script = Script(pieces=pieces(OUTPUT))
    first = body(tools=TOOLS, stream=stream, store=False, include=["reasoning.encrypted_content"])
    turn1 = await answer(client, first)
    assert [i["type"] for i in turn1["output"]] == [
        "reasoning",
        "message",
        "function_call",
        "function_call",
        "custom_tool_call",
    ]
    second = {**first, "input": [*first["input"], *replayed(turn1["output"])]}
    engine.script = Script(pieces=["ok", "</think>", "Cold."])
    await answer(client, second)
    prompt1, prompt2 = (generate["text"] for generate in engine.generates)
    assert prompt1.endswith("<|assistant|><think>")
    assert "<|system|><rules/>" in prompt1
    assert prompt2.startswith(prompt1 + OUTPUT)
    assert prompt2.removeprefix(prompt1 + OUTPUT).startswith(
        "<|observation|><tool_response>9C</tool_response>"
    )


async def test_previous_response_id_sends_what_a_replay_sends(
    engine: FakeEngine, client: httpx.AsyncClient
) -> None:
    engine.script = Script(pieces=pieces(OUTPUT))
    first = body(tools=TOOLS, stream=True)
    turn1 = await answer(client, first)
    engine.script = Script(pieces=["ok", "</think>", "Cold."])
    outputs = [i for i in replayed(turn1["output"]) if i["type"].endswith("_output")]
    await answer(
        client,
        {**first, "previous_response_id": turn1["id"], "input": outputs},
    )
    await answer(client, {**first, "input": [*first["input"], *replayed(turn1["output"])]})
    prompt1, continued, replay = (generate["text"] for generate in engine.generates)
    assert continued == replay
    assert continued.startswith(prompt1 + OUTPUT)


async def test_the_generate_body(engine: FakeEngine, client: httpx.AsyncClient) -> None:
    await answer(
        client,
        body(
            max_output_tokens=10**9,
            temperature=0.3,
            top_p=0.5,
            reasoning={"effort": "low", "summary": "auto"},
        ),
    )
    (generate,) = engine.generates
    text = generate["text"]
    assert "Reasoning Effort: Low" in text
    assert text.index("<|system|>You help.") < text.index("<|system|><rules/>")
    assert text.index("<|system|><rules/>") < text.index("<|user|>W?")
    params = generate["sampling_params"]
    assert params["stop"] == ["<|user|>", "<|observation|>"]
    assert params["max_new_tokens"] == 131072
    assert params["temperature"] == 0.3
    assert params["top_p"] == 0.5
    assert generate["stream"] is True


async def test_effort_none_closes_the_reasoning_in_the_prompt(
    engine: FakeEngine, client: httpx.AsyncClient
) -> None:
    engine.script = Script(pieces=["Hi", " there"])
    response = await answer(client, body(reasoning={"effort": "none"}))
    assert engine.generates[0]["text"].endswith("<|assistant|><think></think>")
    assert [i["type"] for i in response["output"]] == ["message"]
    assert response["output"][0]["content"][0]["text"] == "Hi there"
    assert response["usage"]["output_tokens_details"]["reasoning_tokens"] == 0


@pytest.mark.parametrize("stream", [False, True], ids=["collected", "streamed"])
async def test_usage_counts_the_whole_prompt(
    engine: FakeEngine, client: httpx.AsyncClient, stream: bool
) -> None:
    engine.script = Script(
        pieces=["Hmm", " more", "</think>", "Hel", "lo"], prompt_tokens=1200, cached_tokens=1024
    )
    usage = (await answer(client, body(stream=stream)))["usage"]
    check_usage(usage)
    assert usage["input_tokens"] == 1200
    assert usage["input_tokens_details"]["cached_tokens"] == 1024
    assert usage["output_tokens"] == 5
    # One token per engine event here: the reasoning ended within the third.
    assert 2 <= usage["output_tokens_details"]["reasoning_tokens"] <= 3
    assert usage["total_tokens"] == 1205


async def test_an_engine_error_after_the_headers_is_response_failed(
    engine: FakeEngine, client: httpx.AsyncClient
) -> None:
    engine.script = Script(error_after=3)
    response = await client.post("/v1/responses", json=body(stream=True, store=True))
    checked = check_stream(parse_sse(response.content))
    assert checked.names[-1] == "response.failed"
    assert checked.response["error"]["code"] == "engine_stream_error"
    gone = await client.get(f"/v1/responses/{checked.response['id']}")
    assert gone.status_code == 404  # a failed response is not kept


async def test_an_engine_error_before_the_headers_is_an_openai_error(
    engine: FakeEngine, client: httpx.AsyncClient
) -> None:
    engine.script = Script(status=503, error_body=b'{"error": {"message": "full"}}')
    for stream in (False, True):
        response = await client.post("/v1/responses", json=body(stream=stream))
        assert response.status_code == 503
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}


async def test_get_and_delete(engine: FakeEngine, client: httpx.AsyncClient) -> None:
    streamed = await answer(client, body(stream=True))
    got = await client.get(f"/v1/responses/{streamed['id']}")
    assert got.status_code == 200
    assert got.json() == streamed
    deleted = await client.delete(f"/v1/responses/{streamed['id']}")
    assert deleted.json() == {"id": streamed["id"], "object": "response.deleted", "deleted": True}
    for method in ("GET", "DELETE"):
        again = await client.request(method, f"/v1/responses/{streamed['id']}")
        assert again.status_code == 404
        error = again.json()["error"]
        assert error["param"] == "response_id"
        assert streamed["id"] in error["message"]
    kept = await answer(client, body(store=False))
    assert (await client.get(f"/v1/responses/{kept['id']}")).status_code == 404


async def test_the_store_keeps_its_bounds(engine: FakeEngine) -> None:
    async with gateway_client(engine, responses={"store_max_entries": 2}) as client:
        ids = [(await answer(client, body(stream=n % 2 == 1)))["id"] for n in range(3)]
        statuses = [(await client.get(f"/v1/responses/{i}")).status_code for i in ids]
        assert statuses == [404, 200, 200]
        refused = await client.post("/v1/responses", json=body(previous_response_id=ids[0]))
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "previous_response_not_found"
        metrics = (await client.get("/metrics")).text
        assert "flashbox_response_store_entries 2.0" in metrics
    async with gateway_client(engine, responses={"store_max_bytes": 100}) as client:
        small = await answer(client, body())
        assert (await client.get(f"/v1/responses/{small['id']}")).status_code == 404


@pytest.mark.parametrize(
    ("change", "where", "says"),
    [
        ({"input": 5}, "input", "valid list"),
        ({"input": [5]}, "input.0", "valid dictionary"),
        ({"tool_choice": 5}, "tool_choice", "valid dictionary"),
        ({"input": [{"type": "message", "role": "user", "content": 5}]}, "input.0.content", ""),
        ({"tools": [{"type": "function"}]}, "tools.0", "name"),
        ({"temperature": "warm"}, "temperature", "valid number"),
    ],
    ids=["input", "input-item", "tool_choice", "content", "tool-name", "temperature"],
)
async def test_validation_errors_name_the_field_not_the_union_member(
    client: httpx.AsyncClient, change: dict[str, Any], where: str, says: str
) -> None:
    response = await client.post("/v1/responses", json=body(**change))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == where
    assert where in error["message"]
    assert says in error["message"]
    assert ".str" not in error["message"]
    assert "list[" not in error["message"]
    assert "dict[" not in error["message"]


async def test_too_many_items_or_tools_are_refused_before_any_work(
    engine: FakeEngine, client: httpx.AsyncClient
) -> None:
    many = [{"role": "user", "content": "x"}] * 4097
    response = await client.post("/v1/responses", json=body(input=many))
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "input"
    members = [{"type": "function", "name": f"t{i}"} for i in range(600)]
    tools = [{"type": "namespace", "name": "big", "tools": members}]
    response = await client.post("/v1/responses", json=body(tools=tools))
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "tools"
    assert engine.generates == []


@pytest.mark.parametrize("stream", [False, True], ids=["collected", "streamed"])
async def test_max_output_tokens_reached_inside_a_call_is_incomplete(
    engine: FakeEngine, client: httpx.AsyncClient, stream: bool
) -> None:
    cut = "plan</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Par"
    engine.script = Script(pieces=pieces(cut, 4), finish={"type": "length", "length": 18})
    response = await answer(client, body(tools=TOOLS, max_output_tokens=18, stream=stream))
    # Not "completed" with a call whose arguments were cut ('{"city": "Par"}'): a client
    # would run it.
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
