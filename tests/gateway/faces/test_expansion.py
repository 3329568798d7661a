"""Bounded expansion on the Anthropic and Responses faces (issue #38): replayed reasoning
tokens, tool_reference blocks and the rendered prompt stay within bounds relative to the bytes
a request sent; a reasoning token restores only under the key it was issued to; an identical
count is answered without the engine."""

from __future__ import annotations

import tracemalloc
from typing import Any

import orjson
import pytest

from gateway.core.reasoning_codec import ReasoningCodec
from gateway.settings import LimitSettings
from tests.gateway.conftest import MODEL as SERVED
from tests.gateway.conftest import gateway_client
from tests.gateway.fake_engine import FakeEngine

SIGNING_KEY = "test-signing-key"
KEY_A, KEY_B = "key-a", "key-b"
MODEL = "claude-sonnet-4-5"
MiB = 1 << 20


def thinking_turns(token: str, replays: int) -> list[dict[str, Any]]:
    blocks = [{"type": "thinking", "thinking": "", "signature": token} for _ in range(replays)]
    return [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [*blocks, {"type": "text", "text": "ok"}]},
        {"role": "user", "content": "go on"},
    ]


async def test_replayed_signatures_cost_bounded_memory_and_tokenize_bytes() -> None:
    """Signatures of 4 MiB of reasoning each, replayed 24 times in a ~130 KiB count_tokens
    body: 96 MiB of prompt before, now what the limits allow (8 x body + 1 MiB restored,
    16 x body + 1 MiB rendered; past the budget a token falls back to its visible text)."""
    issuer = ReasoningCodec(SIGNING_KEY.encode(), max_age_s=3600.0, max_text_bytes=4 * MiB)
    token = issuer.encode("x" * (4 * MiB))  # what the gateway issued, no keys configured
    body = orjson.dumps({"model": MODEL, "max_tokens": 16, "messages": thinking_turns(token, 24)})
    assert len(body) < 160_000
    engine = FakeEngine()
    async with gateway_client(engine, reasoning={"signing_key": SIGNING_KEY}) as client:
        tracemalloc.start()
        try:
            response = await client.post(
                "/v1/messages/count_tokens",
                content=body,
                headers={"content-type": "application/json"},
            )
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert response.status_code == 200, response.text
    limits = LimitSettings()
    rendered = int(limits.max_prompt_ratio * len(body)) + limits.expansion_floor_bytes
    assert engine.tokenized
    assert sum(engine.tokenized) <= rendered
    # Restored reasoning itself is held to 8 x body + 1 MiB (~2.2 MiB here).
    assert sum(engine.tokenized) < 3 * MiB
    assert peak < 48 * MiB, peak


async def test_reasoning_within_the_budget_is_restored_in_full() -> None:
    """Within the budget a token restores in full: 512 KiB of reasoning three times behind a
    ~2 KB body (budget 8 x body + the 1 MiB floor): two restore, the third falls back."""
    issuer = ReasoningCodec(SIGNING_KEY.encode(), max_age_s=3600.0, max_text_bytes=4 * MiB)
    token = issuer.encode("y" * (512 << 10))
    body = {"model": MODEL, "messages": thinking_turns(token, 3)}
    engine = FakeEngine()
    async with gateway_client(engine, reasoning={"signing_key": SIGNING_KEY}) as client:
        response = await client.post("/v1/messages/count_tokens", json=body)
    assert response.status_code == 200, response.text
    assert 2 * (512 << 10) <= engine.tokenized[0] < 3 * (512 << 10)


async def test_a_signature_issued_to_one_key_does_not_restore_under_another() -> None:
    engine = FakeEngine()
    async with gateway_client(engine, api_keys=[KEY_A, KEY_B]) as client:
        first = await client.post(
            "/v1/messages",
            json={
                "model": MODEL,
                "max_tokens": 64,
                "messages": [{"role": "user", "content": "hi"}],
            },
            headers={"x-api-key": KEY_A},
        )
        assert first.status_code == 200, first.text
        thinking = first.json()["content"][0]
        assert thinking["type"] == "thinking"
        assert thinking["thinking"] == "Hmm"
        replay = {
            "model": MODEL,
            "max_tokens": 64,
            "messages": [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [
                        {**thinking, "thinking": "EDITED"},
                        {"type": "text", "text": "Hello world"},
                    ],
                },
                {"role": "user", "content": "more"},
            ],
        }
        same_key = await client.post("/v1/messages", json=replay, headers={"x-api-key": KEY_A})
        other_key = await client.post("/v1/messages", json=replay, headers={"x-api-key": KEY_B})
    assert same_key.status_code == 200, same_key.text
    assert other_key.status_code == 200, other_key.text
    restored, fallen_back = engine.generates[1]["text"], engine.generates[2]["text"]
    assert "Hmm" in restored
    assert "EDITED" not in restored
    assert "EDITED" in fallen_back
    assert "Hmm" not in fallen_back


async def test_encrypted_reasoning_issued_to_one_key_does_not_restore_under_another() -> None:
    engine = FakeEngine()
    async with gateway_client(engine, api_keys=[KEY_A, KEY_B]) as client:
        first = await client.post(
            "/v1/responses",
            json={
                "model": "gpt-5",
                "input": "hi",
                "store": False,
                "include": ["reasoning.encrypted_content"],
            },
            headers={"authorization": f"Bearer {KEY_A}"},
        )
        assert first.status_code == 200, first.text
        reasoning = first.json()["output"][0]
        assert reasoning["type"] == "reasoning"
        assert reasoning["encrypted_content"]
        edited = {**reasoning, "content": [{"type": "reasoning_text", "text": "EDITED"}]}
        replay = {
            "model": "gpt-5",
            "store": False,
            "input": [
                {"type": "message", "role": "user", "content": "hi"},
                edited,
                {"type": "message", "role": "user", "content": "more"},
            ],
        }
        for key in (KEY_A, KEY_B):
            again = await client.post(
                "/v1/responses", json=replay, headers={"authorization": f"Bearer {key}"}
            )
            assert again.status_code == 200, again.text
    restored, fallen_back = engine.generates[1]["text"], engine.generates[2]["text"]
    assert "Hmm" in restored
    assert "EDITED" not in restored
    assert "EDITED" in fallen_back
    assert "Hmm" not in fallen_back


async def test_an_identical_count_is_answered_without_the_engine() -> None:
    engine = FakeEngine()
    body = {"model": MODEL, "messages": [{"role": "user", "content": "count me"}]}
    other = {"model": MODEL, "messages": [{"role": "user", "content": "and me"}]}
    async with gateway_client(engine) as client:
        counted = [
            await client.post("/v1/messages/count_tokens", json=b) for b in (body, body, other)
        ]
        responses = [
            await client.post("/v1/responses/input_tokens", json={"model": "gpt-5", "input": t})
            for t in ("count me too", "count me too")
        ]
    assert [r.status_code for r in counted + responses] == [200] * 5
    assert counted[0].json() == counted[1].json()
    assert responses[0].json() == responses[1].json()
    assert len(engine.tokenized) == 3  # first body, the other body, the Responses input


async def test_tool_references_past_the_expansion_bound_are_a_400() -> None:
    """Each tool_reference renders the whole tool: 2,000 of them to a 20 KB tool would render
    ~40 MB from a ~100 KB body."""
    tool = {
        "name": "big",
        "description": "d" * 20_000,
        "input_schema": {"type": "object", "properties": {}},
    }
    references = [{"type": "tool_reference", "tool_name": "big"}] * 2000
    body = {
        "model": MODEL,
        "max_tokens": 16,
        "tools": [tool],
        "messages": [
            {"role": "user", "content": "find the tool"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "big", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": references}],
            },
        ],
    }
    engine = FakeEngine()
    async with gateway_client(engine) as client:
        counted = await client.post("/v1/messages/count_tokens", json=body)
        generated = await client.post("/v1/messages", json=body)
    for response in (counted, generated):
        assert response.status_code == 400, response.text
        error = response.json()
        assert error["type"] == "error"
        assert error["error"]["type"] == "invalid_request_error"
        assert "limits.max_expansion_ratio" in error["error"]["message"]
    assert engine.tokenized == []
    assert engine.generates == []


async def test_a_rendered_prompt_past_its_bound_is_a_400_on_both_count_endpoints() -> None:
    tight = {"max_prompt_ratio": 0.5, "expansion_floor_bytes": 0}
    engine = FakeEngine()
    async with gateway_client(engine, limits=tight) as client:
        anthropic = await client.post(
            "/v1/messages/count_tokens",
            json={"model": MODEL, "messages": [{"role": "user", "content": "x" * 1000}]},
        )
        responses = await client.post(
            "/v1/responses/input_tokens", json={"model": "gpt-5", "input": "x" * 1000}
        )
    assert anthropic.status_code == 400
    assert responses.status_code == 400
    assert anthropic.json()["error"]["type"] == "invalid_request_error"
    assert responses.json()["error"]["code"] == "prompt_expansion_too_large"
    assert "limits.max_prompt_ratio" in anthropic.json()["error"]["message"]
    assert engine.tokenized == []


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 1000}]}),
        ("/v1/messages", {"max_tokens": 8, "messages": [{"role": "user", "content": "x" * 1000}]}),
        ("/v1/responses", {"input": "x" * 1000}),
    ],
)
async def test_a_generation_prompt_past_its_bound_is_a_400_before_the_engine(
    path: str, body: dict[str, object]
) -> None:
    """The same bound holds on every face's generation, not only on the counts."""
    tight = {"max_prompt_ratio": 0.5, "expansion_floor_bytes": 0}
    engine = FakeEngine()
    async with gateway_client(engine, limits=tight) as client:
        response = await client.post(path, json={"model": SERVED, **body})
    assert response.status_code == 400, response.text
    assert "limits.max_prompt_ratio" in response.text
    assert engine.generates == []
