"""Chat completions through the app, with the engine side a FakeEngine."""

from __future__ import annotations

import re

import httpx
import orjson

from tests.gateway.conftest import MODEL, chat_body, gateway_client
from tests.gateway.fake_engine import FakeEngine, Script


def sse_payloads(text: str) -> list[object]:
    events = [block for block in text.split("\n\n") if block]
    assert events[-1] == "data: [DONE]"
    return [orjson.loads(e.removeprefix("data: ")) for e in events[:-1]]


async def test_stream_relays_deltas_usage_and_done(
    client: httpx.AsyncClient, engine: FakeEngine
) -> None:
    body = chat_body(stream=True, stream_options={"include_usage": True})
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-flashbox-replica"] == "engine-a:30000"
    chunks = sse_payloads(response.text)
    assert isinstance(chunks[0], dict)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(
        c["choices"][0]["delta"].get("content", "")
        for c in chunks
        if isinstance(c, dict) and c["choices"]
    )
    assert text == "Hello world"
    reasoning = "".join(
        c["choices"][0]["delta"].get("reasoning_content", "")
        for c in chunks
        if isinstance(c, dict) and c["choices"]
    )
    assert reasoning == "Hmm"
    finish = [c for c in chunks if isinstance(c, dict) and c["choices"]][-1]
    assert finish["choices"][0]["finish_reason"] == "stop"
    usage = chunks[-1]
    assert isinstance(usage, dict)
    assert usage["choices"] == []
    assert usage["usage"] == {
        "prompt_tokens": 12,
        "completion_tokens": 5,
        "total_tokens": 17,
        "prompt_tokens_details": {"cached_tokens": 5},
        "completion_tokens_details": {"reasoning_tokens": 1},
    }
    rid = response.headers["x-request-id"]
    assert engine.generates[0]["rid"] == rid
    assert all(c["id"] == f"chatcmpl-{rid}" for c in chunks if isinstance(c, dict))


async def test_stream_without_include_usage_has_no_usage_chunk(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/chat/completions", json=chat_body(stream=True))
    chunks = sse_payloads(response.text)
    assert all(isinstance(c, dict) and c["choices"] for c in chunks)


async def test_non_streaming_completion(client: httpx.AsyncClient, engine: FakeEngine) -> None:
    engine.script = Script(pieces=["</think>a", "b"], finish={"type": "length", "length": 2})
    response = await client.post("/v1/chat/completions", json=chat_body(max_tokens=2))
    assert response.status_code == 200
    data = response.json()
    assert data["object"] == "chat.completion"
    assert data["model"] == MODEL
    assert data["choices"][0]["message"] == {"role": "assistant", "content": "ab"}
    assert data["choices"][0]["finish_reason"] == "length"
    assert data["usage"]["prompt_tokens_details"] == {"cached_tokens": 5}


async def test_generate_body_maps_sampling(client: httpx.AsyncClient, engine: FakeEngine) -> None:
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    body = chat_body(
        temperature=0.3,
        top_p=0.9,
        seed=7,
        stop=["END", "<|user|>"],
        presence_penalty=0.5,
        frequency_penalty=0.25,
        max_completion_tokens=77,
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
    )
    response = await client.post(
        "/v1/chat/completions", json=body, headers={"x-request-id": "my-req.1"}
    )
    assert response.status_code == 200
    assert response.headers["x-request-id"] == "my-req.1"
    sent = engine.generates[0]
    # The rid is the gateway's own (SGLang aborts by rid prefix: a client must not pick it);
    # the client's id goes along as a header.
    assert re.fullmatch(r"[0-9a-f]{32}", sent["rid"])
    assert engine.request_ids == ["my-req.1"]
    assert sent["stream"] is True
    assert sent["text"].startswith("[gMASK]<sop>")
    params = sent["sampling_params"]
    assert params["max_new_tokens"] == 77
    assert params["stop"] == ["<|user|>", "<|observation|>", "END"]
    assert params["skip_special_tokens"] is False
    assert params["temperature"] == 0.3
    assert params["top_p"] == 0.9
    assert params["sampling_seed"] == 7
    assert params["presence_penalty"] == 0.5
    assert params["frequency_penalty"] == 0.25
    assert orjson.loads(params["json_schema"]) == schema


async def test_max_new_tokens_always_set(client: httpx.AsyncClient, engine: FakeEngine) -> None:
    await client.post("/v1/chat/completions", json=chat_body())
    assert engine.generates[0]["sampling_params"]["max_new_tokens"] == 32768


async def test_odd_request_id_is_replaced(client: httpx.AsyncClient, engine: FakeEngine) -> None:
    response = await client.post(
        "/v1/chat/completions", json=chat_body(), headers={"x-request-id": "bad id/with spaces"}
    )
    rid = response.headers["x-request-id"]
    assert rid != "bad id/with spaces"
    assert engine.generates[0]["rid"] == rid


async def test_parts_content_is_accepted(client: httpx.AsyncClient, engine: FakeEngine) -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "part one"}]}]
    response = await client.post("/v1/chat/completions", json=chat_body(messages=messages))
    assert response.status_code == 200
    assert "part one" in engine.generates[0]["text"]


async def test_large_conversation_renders_in_a_thread(engine: FakeEngine) -> None:
    messages = [{"role": "user", "content": f"m{i}"} for i in range(100)]
    async with gateway_client(engine) as client:
        response = await client.post("/v1/chat/completions", json=chat_body(messages=messages))
    assert response.status_code == 200
    assert "m99" in engine.generates[0]["text"]


async def test_shrinking_cumulative_text_never_resends(
    client: httpx.AsyncClient, engine: FakeEngine
) -> None:
    engine.script = Script(
        cumulative=["</think>abc", "</think>ab", "</think>abXd", "</think>abXde"]
    )
    response = await client.post("/v1/chat/completions", json=chat_body())
    # Sent text cannot be taken back: the relay goes on from where it was.
    assert response.json()["choices"][0]["message"]["content"] == "abcde"


async def test_events_arriving_together_are_coalesced(
    client: httpx.AsyncClient, engine: FakeEngine
) -> None:
    engine.script = Script(one_chunk=True)
    response = await client.post("/v1/chat/completions", json=chat_body(stream=True))
    chunks = [c for c in sse_payloads(response.text) if isinstance(c, dict)]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert "".join(d.get("content", "") for d in deltas) == "Hello world"
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "Hmm"
    # role, then everything the one read carried, then the finish chunk
    assert len(chunks) <= 4
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


async def test_error_inside_a_coalesced_read(client: httpx.AsyncClient, engine: FakeEngine) -> None:
    engine.script = Script(one_chunk=True, error_after=3)
    response = await client.post("/v1/chat/completions", json=chat_body(stream=True))
    events = [e for e in response.text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    assert "engine fault" in orjson.loads(events[-2].removeprefix("data: "))["error"]["message"]


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


async def test_required_tool_choice_sends_the_grammar(
    client: httpx.AsyncClient, engine: FakeEngine
) -> None:
    body = chat_body(tools=[WEATHER_TOOL], tool_choice="required")
    assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
    sent = engine.generates[0]
    assert "get_weather" in sent["sampling_params"]["ebnf"]
    assert sent["require_reasoning"] is True  # the prompt ends inside <think>
    auto = chat_body(tools=[WEATHER_TOOL], tool_choice="auto")
    assert (await client.post("/v1/chat/completions", json=auto)).status_code == 200
    assert "ebnf" not in engine.generates[1]["sampling_params"]


async def test_grammar_and_response_format_conflict(client: httpx.AsyncClient) -> None:
    body = chat_body(
        tools=[WEATHER_TOOL],
        tool_choice="required",
        response_format={"type": "json_object"},
    )
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "response_format"
