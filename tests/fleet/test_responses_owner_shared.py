"""Stored responses belong to their key in the fleet's shared store too (a real redis-server,
gateway/responses_store.py): a response stored through one gateway is found through another
only by the key that made it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
import redis

from bench.procs import RedisProc
from gateway.observability.metrics import Metrics
from gateway.ratelimit import key_id
from gateway.responses_store import StoredResponses
from gateway.settings import ResponsesSettings, SharedStateSettings
from gateway.shared_state import SharedStore
from tests.gateway.conftest import MODEL, gateway_client
from tests.gateway.fake_engine import FakeEngine

ALICE, BOB = "key-alice", "key-bob"
STATE = SharedStateSettings(timeout_s=0.5, retry_s=60.0)


@pytest.fixture
async def stores(redis_server: RedisProc) -> AsyncIterator[tuple[StoredResponses, StoredResponses]]:
    made = []
    for _ in range(2):
        metrics = Metrics(process_metrics=False)
        shared = SharedStore(redis_server.url, STATE, metrics)
        made.append((shared, StoredResponses.build(ResponsesSettings(), metrics, shared)))
    try:
        yield made[0][1], made[1][1]
    finally:
        for shared, _ in made:
            await shared.close()


async def test_the_shared_store_answers_only_the_owner(
    stores: tuple[StoredResponses, StoredResponses], redis_server: RedisProc
) -> None:
    a, b = stores
    alice = key_id(ALICE)
    write = a.put({"id": "resp_1", "output": []}, [{"role": "user", "content": "hi"}], alice)
    assert write is not None
    await write
    assert len(a.local) == 0  # only the shared store has it now
    found = await b.get("resp_1", alice)
    assert found is not None
    assert found.owner == alice
    assert await b.get("resp_1", key_id(BOB)) is None
    assert await b.get("resp_1") is None
    # An entry written before owners were kept is nobody's key's: only a keyless fleet reads it.
    raw = redis.Redis.from_url(redis_server.url)
    try:
        raw.set(
            "flashbox:response:resp_old",
            orjson.dumps({"response": {"id": "resp_old"}, "conversation": []}),
        )
    finally:
        raw.close()
    assert await b.get("resp_old", alice) is None
    assert await b.get("resp_old") is not None


async def test_through_two_gateways_only_the_owner_reads_it(redis_server: RedisProc) -> None:
    settings: dict[str, Any] = {"api_keys": [ALICE, BOB], "state_url": redis_server.url}
    async with (
        gateway_client(FakeEngine(), **settings) as one,
        gateway_client(FakeEngine(), **settings) as two,
    ):
        stored = await one.post(
            "/v1/responses",
            json={"model": MODEL, "input": "hi", "store": True},
            headers={"authorization": f"Bearer {ALICE}"},
        )
        assert stored.status_code == 200, stored.text
        response_id = stored.json()["id"]
        path = f"/v1/responses/{response_id}"

        async def get(client: httpx.AsyncClient, key: str) -> int:
            return (await client.get(path, headers={"x-api-key": key})).status_code

        assert await get(two, ALICE) == 200
        assert await get(two, BOB) == 404
        assert (await two.delete(path, headers={"x-api-key": BOB})).status_code == 404
        assert await get(one, ALICE) == 200
        assert (await two.delete(path, headers={"x-api-key": ALICE})).status_code == 200
        assert await get(one, ALICE) == 404
