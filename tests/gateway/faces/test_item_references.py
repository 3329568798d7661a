"""Responses `item_reference` items, resolved from the same key's stored responses, as the
Vercel AI SDK's OpenAI provider sends them with `store` at its default: the earlier turn's
reasoning as `{"type": "item_reference", "id": "rs_..."}`, its text as a message carrying its
item id. In-process against the FakeEngine, through the official openai client."""

from __future__ import annotations

from typing import Any

import httpx
import httpx2
import openai
import pytest

from tests.gateway.conftest import MODEL, gateway_client
from tests.gateway.faces.sdk_clients import Bridge, openai_client
from tests.gateway.fake_engine import FakeEngine, Script
from tests.gateway.parsers.support import render_call

ALICE, BOB = "key-alice", "key-bob"
REASONING = "The user greets me.\n  Answer briefly. "
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def sdk(client: httpx.AsyncClient, key: str) -> Any:
    http = httpx2.AsyncClient(transport=Bridge(client))
    return openai.AsyncOpenAI(base_url="http://gw/v1", api_key=key, http_client=http, max_retries=0)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "input_text", "text": text}]}


def as_the_ai_sdk_replays(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Reasoning and calls by reference, text as an assistant message with its item id."""
    items: list[dict[str, Any]] = []
    for item in output:
        if item["type"] == "message":
            text = item["content"][0]["text"]
            content = [{"type": "output_text", "text": text}]
            items.append({"role": "assistant", "content": content, "id": item["id"]})
        else:
            items.append({"type": "item_reference", "id": item["id"]})
    return items


@pytest.mark.parametrize("stream", [False, True], ids=["collected", "streamed"])
async def test_a_referenced_reasoning_item_extends_the_prompt(
    engine: FakeEngine, client: httpx.AsyncClient, stream: bool
) -> None:
    sdk_client: Any = openai_client(client)
    output = REASONING + "</think>" + "Hi." + render_call("get_weather", {"city": "Oslo"})
    engine.script = Script(pieces=[output[i : i + 4] for i in range(0, len(output), 4)])
    first = [user("Hello")]
    if stream:
        async with sdk_client.responses.stream(model=MODEL, input=first, tools=[WEATHER]) as s:
            turn1 = (await s.get_final_response()).model_dump(exclude_none=True)
    else:
        created = await sdk_client.responses.create(model=MODEL, input=first, tools=[WEATHER])
        turn1 = created.model_dump(exclude_none=True)
    assert [item["type"] for item in turn1["output"]] == ["reasoning", "message", "function_call"]
    call_id = turn1["output"][2]["call_id"]

    engine.script = Script(pieces=["ok", "</think>", "Cold."])
    second = [
        *first,
        *as_the_ai_sdk_replays(turn1["output"]),
        {"type": "function_call_output", "call_id": call_id, "output": "-3C"},
    ]
    turn2 = await sdk_client.responses.create(model=MODEL, input=second, tools=[WEATHER])
    assert turn2.output_text == "Cold."

    prompt1, prompt2 = (generate["text"] for generate in engine.generates)
    assert prompt2.startswith(prompt1 + output)
    assert prompt2.removeprefix(prompt1 + output).startswith(
        "<|observation|><tool_response>-3C</tool_response>"
    )
    # What this turn stored is the items themselves: a later turn needs no older response.
    stored = await client.get(f"/v1/responses/{turn2.id}")
    assert stored.status_code == 200


async def test_references_resolve_through_a_chain_of_turns(
    engine: FakeEngine, client: httpx.AsyncClient
) -> None:
    sdk_client: Any = openai_client(client)
    conversation: list[dict[str, Any]] = [user("one")]
    outputs = []
    for turn in range(3):
        engine.script = Script(pieces=[f"think {turn}", "</think>", f"answer {turn}"])
        created = await sdk_client.responses.create(model=MODEL, input=conversation)
        dumped = created.model_dump(exclude_none=True)
        outputs.append(f"think {turn}</think>answer {turn}")
        conversation = [*conversation, *as_the_ai_sdk_replays(dumped["output"]), user("next")]
    prompts = [generate["text"] for generate in engine.generates]
    assert prompts[1].startswith(prompts[0] + outputs[0])
    assert prompts[2].startswith(prompts[1] + outputs[1])


async def test_an_unknown_reference_is_a_400_naming_it(
    engine: FakeEngine, client: httpx.AsyncClient
) -> None:
    missing = "rs_0123456789abcdef0123456789abcdef_0"
    for item_id in (missing, "item_from_elsewhere"):
        response = await client.post(
            "/v1/responses",
            json={
                "model": MODEL,
                "input": [user("q"), {"type": "item_reference", "id": item_id}, user("n")],
            },
        )
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == "input.1.id"
        assert item_id in error["message"]
        assert error["type"] == "invalid_request_error"
    assert engine.generates == []


async def test_a_reference_to_a_response_kept_with_store_false_is_unknown(
    engine: FakeEngine, client: httpx.AsyncClient
) -> None:
    sdk_client: Any = openai_client(client)
    turn1 = await sdk_client.responses.create(model=MODEL, input="hi", store=False)
    reasoning_id = turn1.output[0].id
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk_client.responses.create(
            model=MODEL,
            input=[user("hi"), {"type": "item_reference", "id": reasoning_id}, user("n")],
        )
    assert reasoning_id in str(caught.value)


async def test_another_key_s_items_are_unknown(engine: FakeEngine) -> None:
    async with gateway_client(engine, api_keys=[ALICE, BOB]) as client:
        alice, bob = sdk(client, ALICE), sdk(client, BOB)
        turn1 = await alice.responses.create(model=MODEL, input="hi")
        reasoning_id = turn1.output[0].id
        replay = [user("hi"), {"type": "item_reference", "id": reasoning_id}, user("n")]
        with pytest.raises(openai.BadRequestError) as caught:
            await bob.responses.create(model=MODEL, input=replay)
        body: Any = caught.value.body
        assert body["param"] == "input.1.id"
        assert (await alice.responses.create(model=MODEL, input=replay)).output_text


async def test_input_tokens_resolves_references_too(
    engine: FakeEngine, client: httpx.AsyncClient
) -> None:
    sdk_client: Any = openai_client(client)
    turn1 = await sdk_client.responses.create(model=MODEL, input="hi")
    replay = [user("hi"), {"type": "item_reference", "id": turn1.output[0].id}, user("n")]
    counted = await client.post(
        "/v1/responses/input_tokens", json={"model": MODEL, "input": replay}
    )
    assert counted.status_code == 200, counted.text
    unknown = [user("hi"), {"type": "item_reference", "id": "rs_nope_0"}]
    refused = await client.post(
        "/v1/responses/input_tokens", json={"model": MODEL, "input": unknown}
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "input.1.id"
