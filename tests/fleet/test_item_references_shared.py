"""Responses `item_reference` items resolved from the fleet's shared store (a real
redis-server): a reasoning item made through one gateway is referenced through another, by the
key that made it only, and the prompt still extends the one that made it."""

from __future__ import annotations

from typing import Any

import httpx

from bench.procs import RedisProc
from tests.gateway.conftest import MODEL, gateway_client
from tests.gateway.fake_engine import FakeEngine

ALICE, BOB = "key-alice", "key-bob"


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "input_text", "text": text}]}


async def test_a_reference_made_through_one_gateway_resolves_through_another(
    redis_server: RedisProc,
) -> None:
    settings: dict[str, Any] = {"api_keys": [ALICE, BOB], "state_url": redis_server.url}
    one_engine, two_engine = FakeEngine(), FakeEngine()
    async with (
        gateway_client(one_engine, **settings) as one,
        gateway_client(two_engine, **settings) as two,
    ):

        async def create(client: httpx.AsyncClient, key: str, items: Any) -> httpx.Response:
            return await client.post(
                "/v1/responses",
                json={"model": MODEL, "input": items},
                headers={"authorization": f"Bearer {key}"},
            )

        first = await create(one, ALICE, [user("hi")])
        assert first.status_code == 200, first.text
        reasoning, message = first.json()["output"]
        replay = [
            user("hi"),
            {"type": "item_reference", "id": reasoning["id"]},
            {"type": "item_reference", "id": message["id"]},
            user("and?"),
        ]
        refused = await create(two, BOB, replay)
        assert refused.status_code == 400
        assert refused.json()["error"]["param"] == "input.2.id"
        assert message["id"] in refused.json()["error"]["message"]

        second = await create(two, ALICE, replay)
        assert second.status_code == 200, second.text
        prompt1 = one_engine.generates[0]["text"]
        assert two_engine.generates[0]["text"].startswith(prompt1 + "Hmm</think>Hello world")
