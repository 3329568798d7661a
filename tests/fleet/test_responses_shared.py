"""The Responses store on a real redis-server (gateway/responses_store.py, StoredResponses):
a response stored through one gateway is read and deleted through another, the shared store is
bounded (TTL, entries, bytes per entry), and what the store cannot take stays local."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis

from bench.procs import RedisProc
from gateway.observability.metrics import Metrics
from gateway.responses_store import StoredResponses
from gateway.settings import ResponsesSettings, SharedStateSettings
from gateway.shared_state import SharedStore

STATE = SharedStateSettings(timeout_s=0.5, retry_s=60.0)


class Gateway:
    def __init__(self, url: str, settings: ResponsesSettings) -> None:
        self.metrics = Metrics(process_metrics=False)
        self.store = SharedStore(url, STATE, self.metrics)
        self.responses = StoredResponses.build(settings, self.metrics, self.store)

    async def put(self, n: int, text: str = "x") -> None:
        write = self.responses.put(response(n, text), conversation(n))
        assert write is not None
        await write

    def writes(self, outcome: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "flashbox_response_store_writes_total", {"outcome": outcome}
        )
        return value or 0.0


def response(n: int, text: str = "x") -> dict[str, Any]:
    return {"id": f"resp_{n}", "object": "response", "output": [{"type": "message", "t": text}]}


def conversation(n: int) -> list[Any]:
    return [{"role": "user", "content": f"turn {n}"}]


SETTINGS = ResponsesSettings(store_max_entries=3, store_ttl_s=120, shared_max_entry_bytes=4096)


@pytest.fixture
async def pair(redis_server: RedisProc) -> AsyncIterator[tuple[Gateway, Gateway]]:
    a, b = Gateway(redis_server.url, SETTINGS), Gateway(redis_server.url, SETTINGS)
    try:
        yield a, b
    finally:
        await a.store.close()
        await b.store.close()


@pytest.fixture
def raw(redis_server: RedisProc) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url)
    try:
        yield client
    finally:
        client.close()


async def test_stored_through_one_gateway_read_through_the_other(
    pair: tuple[Gateway, Gateway],
) -> None:
    a, b = pair
    await a.put(1)
    found = await b.responses.get("resp_1")
    assert found is not None
    assert found.response == response(1)
    assert found.conversation == conversation(1)
    # Once the store has it, the writer's local copy is gone: the store is the one truth.
    assert len(a.responses.local) == 0
    assert a.writes("shared") == 1
    assert await b.responses.delete("resp_1")
    assert await a.responses.get("resp_1") is None
    assert not await a.responses.delete("resp_1")


async def test_entries_expire_with_the_ttl_and_the_oldest_go_past_the_bound(
    pair: tuple[Gateway, Gateway], raw: redis.Redis
) -> None:
    a, b = pair
    for n in range(5):
        await (a if n % 2 else b).put(n)
    assert [await a.responses.get(f"resp_{n}") is not None for n in range(5)] == [
        False,
        False,
        True,
        True,
        True,
    ]
    assert raw.zcard("flashbox:responses") == 3
    assert sorted(raw.keys("flashbox:response:*")) == [
        f"flashbox:response:resp_{n}".encode() for n in (2, 3, 4)
    ]
    assert 119_000 < raw.pttl("flashbox:response:resp_4") <= 120_000


async def test_an_entry_over_the_shared_byte_bound_stays_local(
    pair: tuple[Gateway, Gateway], raw: redis.Redis
) -> None:
    a, b = pair
    assert a.responses.put(response(7, "y" * 5000), conversation(7)) is None
    assert a.writes("local_too_large") == 1
    assert await a.responses.get("resp_7") is not None
    assert await b.responses.get("resp_7") is None
    assert raw.exists("flashbox:response:resp_7") == 0


async def test_with_the_store_dead_writes_stay_local_and_reads_go_on(
    redis_server: RedisProc, pair: tuple[Gateway, Gateway]
) -> None:
    a, b = pair
    await a.put(1)
    redis_server.kill()
    await a.put(2)  # the write fails: kept here
    assert a.writes("local") == 1
    assert (await a.responses.get("resp_2")) is not None
    assert await a.responses.get("resp_1") is None  # only in the dead store
    assert await b.responses.get("resp_2") is None
    assert await a.responses.delete("resp_2")
