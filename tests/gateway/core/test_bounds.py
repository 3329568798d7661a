"""The input bounds (gateway/core/bounds.py), checked once on the core request every face makes:
the same limits on every face, on what the model would see (Responses' stored history and
Anthropic's split-out tool results included), each refused in the face's own error shape."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest

from gateway.core.bounds import Params, check_bounds
from gateway.core.request import CoreRequest, Sampling, SessionHints
from gateway.errors import InvalidRequestError
from gateway.settings import LimitSettings
from tests.gateway.conftest import MODEL, chat_body, gateway_client
from tests.gateway.faces.sdk_clients import Bridge
from tests.gateway.fake_engine import FakeEngine

HELLO = [{"role": "user", "content": "hi"}]


def sdk_anthropic(client: httpx.AsyncClient) -> anthropic.AsyncAnthropic:
    http = httpx2.AsyncClient(transport=Bridge(client))
    return anthropic.AsyncAnthropic(
        base_url="http://gw", api_key="k", http_client=http, max_retries=0
    )


def sdk_openai(client: httpx.AsyncClient) -> openai.AsyncOpenAI:
    http = httpx2.AsyncClient(transport=Bridge(client))
    return openai.AsyncOpenAI(base_url="http://gw/v1", api_key="k", http_client=http, max_retries=0)


def core(**sampling: Any) -> CoreRequest:
    return CoreRequest(
        api="test",
        model=MODEL,
        messages=list(HELLO),
        tools=None,
        tool_choice=None,
        template_kwargs={},
        sampling=Sampling(**sampling),
        stream=False,
        session=SessionHints(),
        body_bytes=10,
    )


def test_each_bound_names_the_face_s_field() -> None:
    limits = LimitSettings(max_stop_sequences=2, max_tokens=100)
    check_bounds(core(stop=("a", "b"), max_tokens=100), limits)  # exactly at the limits
    with pytest.raises(InvalidRequestError) as info:
        check_bounds(core(stop=("a", "b", "c")), limits, Params(stop="stop_sequences"))
    assert info.value.param == "stop_sequences"
    assert "3 > 2" in info.value.message
    with pytest.raises(InvalidRequestError) as info:
        check_bounds(core(max_tokens=101), limits, Params(max_tokens="max_completion_tokens"))
    assert info.value.param == "max_completion_tokens"
    assert info.value.status_code == 400


async def test_messages_stop_sequences_are_bounded_as_chat_s_are(engine: FakeEngine) -> None:
    """Issue #38: the Messages face passed 20,000 stop sequences to the engine."""
    async with gateway_client(engine) as client:
        sdk = sdk_anthropic(client)
        with pytest.raises(anthropic.BadRequestError) as info:
            await sdk.messages.create(
                model=MODEL,
                max_tokens=16,
                messages=HELLO,  # type: ignore[arg-type]
                stop_sequences=[f"stop{i}" for i in range(20_000)],
            )
        error = info.value.body["error"]  # type: ignore[index]
        assert error["type"] == "invalid_request_error"
        assert "Too many stop sequences: 20000 > 16" in error["message"]
        assert not engine.generates
        # Sixteen is the limit on every face, and is served.
        stops = [f"stop{i}" for i in range(16)]
        answer = await sdk.messages.create(
            model=MODEL,
            max_tokens=16,
            messages=HELLO,  # type: ignore[arg-type]
            stop_sequences=stops,
        )
        assert answer.content
        assert engine.generates[-1]["sampling_params"]["stop"][-16:] == stops
        chat = await client.post(
            "/v1/chat/completions", json=chat_body(stop=[f"s{i}" for i in range(17)])
        )
        assert chat.status_code == 400
        assert chat.json()["error"]["param"] == "stop"
        assert "17 > 16" in chat.json()["error"]["message"]


async def test_max_tokens_lowered_to_the_ceiling_on_every_face(engine: FakeEngine) -> None:
    """Chat's max_tokens and max_completion_tokens as Messages' max_tokens and Responses'
    max_output_tokens: lowered to the ceiling (bounds.at_ceiling), never refused for it."""
    async with gateway_client(engine, limits={"max_tokens": 64}) as client:
        for field in ("max_tokens", "max_completion_tokens"):
            chat = await client.post("/v1/chat/completions", json=chat_body(**{field: 65}))
            assert chat.status_code == 200, chat.text
            assert engine.generates[-1]["sampling_params"]["max_new_tokens"] == 64
        messages = {"model": MODEL, "max_tokens": 100_000, "messages": HELLO}
        assert (await client.post("/v1/messages", json=messages)).status_code == 200
        assert engine.generates[-1]["sampling_params"]["max_new_tokens"] == 64
        responses = {"model": MODEL, "input": "hi", "max_output_tokens": 100_000}
        assert (await client.post("/v1/responses", json=responses)).status_code == 200
        assert engine.generates[-1]["sampling_params"]["max_new_tokens"] == 64


async def test_responses_history_from_previous_response_id_counts(engine: FakeEngine) -> None:
    """The stored turns a previous_response_id pulls in are messages the model sees: bounded
    with the new input, on both the generation and the counting endpoint."""
    async with gateway_client(engine, limits={"max_messages": 4}) as client:
        sdk = sdk_openai(client)
        first = await sdk.responses.create(
            model=MODEL,
            input=[
                {"role": "user", "content": "one"},
                {"role": "assistant", "content": "two"},
                {"role": "user", "content": "three"},
            ],
            store=True,
        )
        sent = len(engine.generates)
        with pytest.raises(openai.BadRequestError) as info:
            await sdk.responses.create(
                model=MODEL, input="four", previous_response_id=first.id, store=True
            )
        error = info.value.body
        assert isinstance(error, dict)
        assert error["param"] == "input"
        assert "Too many messages" in error["message"]
        assert len(engine.generates) == sent  # the engine never heard of it
        counted = await client.post(
            "/v1/responses/input_tokens",
            json={"model": MODEL, "input": "four", "previous_response_id": first.id},
        )
        assert counted.status_code == 400, counted.text
        assert counted.json()["error"]["param"] == "input"
        # Without the history the same input is well within the bound.
        alone = await sdk.responses.create(model=MODEL, input="four")
        assert alone.status == "completed"


async def test_messages_are_counted_as_the_model_sees_them(engine: FakeEngine) -> None:
    """Each Anthropic tool_result block becomes a message of its own for the template: two
    request messages can be many more."""
    calls = [{"type": "tool_use", "id": f"t{i}", "name": "read", "input": {}} for i in range(3)]
    results = [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "ok"} for i in range(3)]
    body = {
        "model": MODEL,
        "max_tokens": 16,
        "messages": [
            {"role": "user", "content": "read three files"},
            {"role": "assistant", "content": calls},
            {"role": "user", "content": results},
        ],
    }
    async with gateway_client(engine, limits={"max_messages": 4}) as client:
        refused = await client.post("/v1/messages", json=body)
        assert refused.status_code == 400, refused.text
        envelope = refused.json()
        assert envelope["type"] == "error"
        assert envelope["error"]["type"] == "invalid_request_error"
        assert "Too many messages: 5 > 4" in envelope["error"]["message"]
        assert not engine.generates
