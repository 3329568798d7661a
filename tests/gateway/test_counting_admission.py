"""The counting endpoints (count_tokens, input_tokens) through admission (gateway/admission.py):
the key's rate limit (one request each, no tokens) and a pool of their own, so a flood of counts
cannot take generation's slots and a full generation pool cannot hold a count up."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from gateway.admission import AdmissionController, Ticket
from gateway.errors import NoReplicaError
from gateway.settings import AdmissionSettings, Settings, ShutdownSettings
from gateway.state import build_state
from tests.gateway.conftest import MODEL, chat_body, gateway_client
from tests.gateway.fake_engine import FakeEngine

KEY = "key-one"
AUTH = {"authorization": f"Bearer {KEY}"}


def messages(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def count_body(text: str = "hi") -> dict[str, Any]:
    return {"model": MODEL, "messages": messages(text)}


def input_tokens_body(text: str = "hi") -> dict[str, Any]:
    return {"model": MODEL, "input": text}


@dataclass
class HeldEngine(FakeEngine):
    """The FakeEngine, with /tokenize or /generate held until released (a busy engine)."""

    hold: set[str] = field(default_factory=set)
    arrived: dict[str, asyncio.Event] = field(default_factory=dict)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path in self.hold:
            self._arrival(path).set()
            await self.release.wait()
        return await super().handle(request)

    def _arrival(self, path: str) -> asyncio.Event:
        return self.arrived.setdefault(path, asyncio.Event())

    async def reached(self, path: str) -> None:
        async with asyncio.timeout(5):
            await self._arrival(path).wait()


async def test_counts_spend_the_keys_requests_and_no_tokens(engine: FakeEngine) -> None:
    limits = {"requests_per_minute": 2, "tokens_per_minute": 1000}
    async with gateway_client(engine, api_keys=[KEY], rate_limits=limits) as client:
        big = "word " * 4000  # ~5000 prompt tokens: more than the minute's token budget
        first = await client.post("/v1/messages/count_tokens", json=count_body(big), headers=AUTH)
        assert first.status_code == 200, first.text
        assert first.json()["input_tokens"] > 1000
        assert first.headers["anthropic-ratelimit-requests-remaining"] == "1"
        second = await client.post(
            "/v1/responses/input_tokens", json=input_tokens_body(big), headers=AUTH
        )
        assert second.status_code == 200, second.text
        assert second.headers["x-ratelimit-remaining-requests"] == "0"
        # No tokens were charged for counting: the budget is whole.
        assert second.headers["x-ratelimit-remaining-tokens"] == "1000"
        refused = await client.post("/v1/messages/count_tokens", json=count_body(), headers=AUTH)
        assert refused.status_code == 429
        assert refused.json()["error"]["type"] == "rate_limit_error"
        assert refused.headers["retry-after"]
        refused = await client.post(
            "/v1/responses/input_tokens", json=input_tokens_body(), headers=AUTH
        )
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"


async def test_a_flood_of_counts_waits_in_its_own_pool_and_generation_goes_on() -> None:
    engine = HeldEngine(hold={"/tokenize"})
    admission = {"count_max_in_flight": 1, "count_max_queue": 0}
    async with gateway_client(engine, admission=admission) as client:
        held = asyncio.create_task(
            client.post("/v1/messages/count_tokens", json=count_body("first"))
        )
        await engine.reached("/tokenize")
        # The counting pool is full and has no queue: refused at once, in each face's shape.
        async with asyncio.timeout(5):
            over = await client.post("/v1/messages/count_tokens", json=count_body("second"))
            over_responses = await client.post(
                "/v1/responses/input_tokens", json=input_tokens_body("third")
            )
        assert over.status_code == 429, over.text
        assert over.json()["error"]["type"] == "rate_limit_error"
        assert "token-counting requests" in over.json()["error"]["message"]
        assert over.headers["retry-after"] == "1"
        assert over_responses.status_code == 429
        assert over_responses.json()["error"]["code"] == "queue_full"
        # Generation has its own slots.
        async with asyncio.timeout(5):
            chat = await client.post("/v1/chat/completions", json=chat_body())
        assert chat.status_code == 200
        engine.release.set()
        assert (await held).status_code == 200
        # Its slot is back: counting goes on.
        again = await client.post("/v1/messages/count_tokens", json=count_body("fourth"))
        assert again.status_code == 200


async def test_a_full_generation_pool_does_not_hold_a_count_up() -> None:
    engine = HeldEngine(hold={"/generate"})
    admission = {"max_in_flight": 1, "max_queue": 0}
    async with gateway_client(engine, admission=admission) as client:
        held = asyncio.create_task(client.post("/v1/chat/completions", json=chat_body()))
        await engine.reached("/generate")
        busy = await client.post("/v1/chat/completions", json=chat_body())
        assert busy.status_code == 429
        async with asyncio.timeout(5):
            counted = await client.post("/v1/messages/count_tokens", json=count_body())
        assert counted.status_code == 200, counted.text
        engine.release.set()
        assert (await held).status_code == 200


async def test_a_drain_closes_the_counting_pool_too() -> None:
    state = build_state(Settings(engines=["http://engine:1"]), transport=FakeEngine().transport())
    admission = AdmissionController(AdmissionSettings(), ShutdownSettings(grace_s=0.1))
    counting = admission.counting
    assert counting is not None
    assert counting.bounds.max_in_flight == AdmissionSettings().count_max_in_flight
    admission.begin_drain()
    assert counting.draining
    with pytest.raises(NoReplicaError):
        await counting.acquire(Ticket({}, state))
