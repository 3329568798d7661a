"""POST /v1/messages in-process against the FakeEngine, which records the exact /generate body:
what the engine is asked (prompt text, stops, budgets) for Anthropic requests."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from tests.gateway.fake_engine import FakeEngine, Script
from tests.gateway.parsers.support import render_call
from tests.support.anthropic_events import check_stream, parse_sse

WEATHER = {
    "name": "get_weather",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    },
}
OUTPUT = (
    "Thinking about it:\n  the user wants São Paulo.\n"
    + "</think>"
    + "Checking."
    + render_call("get_weather", {"city": 'São "Paulo"\n\\', "days": 2})
)


def pieces(text: str, size: int = 3) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def body(**fields: Any) -> dict[str, Any]:
    return {
        "model": "claude-opus-4-1",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": "Weather?"}],
        **fields,
    }


async def answer(client: httpx.AsyncClient, payload: dict[str, Any]) -> dict[str, Any]:
    if not payload.get("stream"):
        response = await client.post("/v1/messages?beta=true", json=payload)
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result
    response = await client.post("/v1/messages", json=payload)
    assert response.status_code == 200, response.text
    return check_stream(parse_sse(response.content))


@pytest.mark.parametrize("stream", [False, True], ids=["collected", "streamed"])
async def test_turn_two_is_sent_as_turn_one_prompt_plus_its_output(
    engine: FakeEngine, client: httpx.AsyncClient, stream: bool
) -> None:
    engine.script = Script(pieces=pieces(OUTPUT))
    first = body(
        system=[
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=1.0.0.abc;"},
            {"type": "text", "text": "You help."},
        ],
        tools=[WEATHER],
        stream=stream,
    )
    turn1 = await answer(client, first)
    assert [b["type"] for b in turn1["content"]] == ["thinking", "text", "tool_use"]
    assert turn1["stop_reason"] == "tool_use"
    tool_id = turn1["content"][2]["id"]
    second = {
        **first,
        "messages": [
            *first["messages"],
            {"role": "assistant", "content": turn1["content"]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": "9C"}],
            },
        ],
    }
    engine.script = Script(pieces=["ok", "</think>", "Cold."])
    await answer(client, second)
    prompt1, prompt2 = (generate["text"] for generate in engine.generates)
    assert "x-anthropic-billing-header" not in prompt1
    assert prompt1.endswith("<|assistant|><think>")
    assert prompt2.startswith(prompt1 + OUTPUT)
    assert prompt2.removeprefix(prompt1 + OUTPUT).startswith(
        "<|observation|><tool_response>9C</tool_response>"
    )


async def test_the_generate_body(engine: FakeEngine, client: httpx.AsyncClient) -> None:
    await answer(
        client,
        body(
            messages=[
                {"role": "user", "content": "one"},
                {"role": "system", "content": "<reminder>mid</reminder>"},
            ],
            stop_sequences=["END"],
            max_tokens=10**9,
            temperature=0.3,
            top_k=5,
            output_config={"effort": "low"},
        ),
    )
    (generate,) = engine.generates
    text = generate["text"]
    assert "Reasoning Effort: Low" in text
    assert text.index("<|user|>one") < text.index("<|system|><reminder>mid</reminder>")
    params = generate["sampling_params"]
    assert params["stop"] == ["<|user|>", "<|observation|>", "END"]
    assert params["max_new_tokens"] == 131072
    assert params["temperature"] == 0.3
    assert params["top_k"] == 5
    assert generate["stream"] is True


async def test_thinking_disabled_closes_the_block_in_the_prompt(
    engine: FakeEngine, client: httpx.AsyncClient
) -> None:
    engine.script = Script(pieces=["Hi", " there"])
    message = await answer(client, body(thinking={"type": "disabled"}))
    assert engine.generates[0]["text"].endswith("<|assistant|><think></think>")
    assert message["content"] == [{"type": "text", "text": "Hi there"}]


@pytest.mark.parametrize("stream", [False, True], ids=["collected", "streamed"])
async def test_usage_is_split_as_anthropic_counts_it(
    engine: FakeEngine, client: httpx.AsyncClient, stream: bool
) -> None:
    engine.script = Script(prompt_tokens=1200, cached_tokens=1024)
    message = await answer(client, body(stream=stream))
    usage = message["usage"]
    assert usage["input_tokens"] == 176
    assert usage["cache_read_input_tokens"] == 1024
    assert usage["cache_creation_input_tokens"] == 0
    assert usage["output_tokens"] == len(Script().pieces)


async def test_an_engine_error_after_the_headers_is_an_error_event(
    engine: FakeEngine, client: httpx.AsyncClient
) -> None:
    engine.script = Script(error_after=3)
    response = await client.post("/v1/messages", json=body(stream=True))
    events = parse_sse(response.content)
    check_stream(events, allow_error=True)
    assert events[-1].name == "error"
    assert events[-1].data["error"]["type"] == "api_error"


async def test_an_engine_error_before_the_headers_is_an_envelope(
    engine: FakeEngine, client: httpx.AsyncClient
) -> None:
    engine.script = Script(status=503, error_body=b'{"error": {"message": "full"}}')
    response = await client.post("/v1/messages", json=body())
    assert response.status_code == 529
    error = orjson.loads(response.content)
    assert error["error"]["type"] == "overloaded_error"
    assert response.headers["request-id"] == error["request_id"]


@pytest.mark.parametrize(
    ("change", "where", "says"),
    [
        (
            {"messages": [{"role": "user", "content": [{"type": "video"}]}]},
            "messages.0.content.0",
            "Input tag 'video'",
        ),
        ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content", "valid list"),
        ({"system": [{"type": "text"}]}, "system.0.text", "Field required"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "x"}]}
                        ],
                    }
                ]
            },
            "messages.0.content.0.tool_result.content.0",
            "Input tag 'x'",
        ),
        ({"thinking": {"type": 3}}, "thinking.type", "'enabled', 'disabled'"),
    ],
    ids=["block-type", "content-type", "system-block", "tool-result-part", "thinking-type"],
)
async def test_validation_errors_name_the_field_not_the_union_member(
    client: httpx.AsyncClient, change: dict[str, Any], where: str, says: str
) -> None:
    response = await client.post("/v1/messages", json=body(**change))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert f"'{where}'" in error["message"]
    assert says in error["message"]
    assert ".str" not in error["message"]
    assert "list[" not in error["message"]


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/v1/messages"), ("POST", "/v1/messages/batches")]
)
async def test_unknown_routes_under_messages_answer_in_anthropics_envelope(
    client: httpx.AsyncClient, method: str, path: str
) -> None:
    response = await client.request(method, path)
    assert response.status_code == 404
    body = response.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "not_found_error"
    assert body["request_id"] == response.headers["request-id"]
    other = await client.get("/v1/nothing-here")
    assert other.json()["error"]["code"] == "not_found"  # the OpenAI face's shape elsewhere
