"""Stored responses belong to the key that made them (gateway/responses_store.py): GET, DELETE
and previous_response_id from another key are answered exactly as for an id never stored;
without keys everyone is the same caller, as before. Through the official openai client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import openai
import pytest

from gateway.ratelimit import key_id
from gateway.responses_store import ResponseStore
from tests.gateway.conftest import MODEL, gateway_client
from tests.gateway.faces.sdk_clients import Bridge
from tests.gateway.fake_engine import FakeEngine

ALICE, BOB = "key-alice", "key-bob"
MISSING = "resp_0123456789abcdef0123456789abcdef"


def sdk(client: httpx.AsyncClient, key: str) -> openai.AsyncOpenAI:
    http = httpx2.AsyncClient(transport=Bridge(client))
    return openai.AsyncOpenAI(base_url="http://gw/v1", api_key=key, http_client=http, max_retries=0)


@asynccontextmanager
async def keyed(engine: FakeEngine) -> AsyncIterator[httpx.AsyncClient]:
    async with gateway_client(engine, api_keys=[ALICE, BOB]) as client:
        yield client


def without_id(error: dict[str, Any], response_id: str) -> dict[str, Any]:
    """The error with the id it names taken out, so two answers compare as words."""
    return {**error, "message": error["message"].replace(response_id, "<id>")}


async def test_another_key_s_response_is_a_missing_response(engine: FakeEngine) -> None:
    async with keyed(engine) as client:
        alice, bob = sdk(client, ALICE), sdk(client, BOB)
        stored = await alice.responses.create(model=MODEL, input="remember 42", store=True)
        assert (await alice.responses.retrieve(stored.id)).id == stored.id

        # GET and DELETE: 404, in the words of an id never stored.
        as_bob = {"authorization": f"Bearer {BOB}"}
        theirs = await client.get(f"/v1/responses/{stored.id}", headers=as_bob)
        missing = await client.get(f"/v1/responses/{MISSING}", headers=as_bob)
        assert theirs.status_code == missing.status_code == 404
        assert without_id(theirs.json()["error"], stored.id) == without_id(
            missing.json()["error"], MISSING
        )
        with pytest.raises(openai.NotFoundError):
            await bob.responses.retrieve(stored.id)
        with pytest.raises(openai.NotFoundError):
            await bob.responses.delete(stored.id)
        assert (await alice.responses.retrieve(stored.id)).id == stored.id  # still there

        # previous_response_id: the answer to an id never stored, and nothing reaches the engine.
        sent = len(engine.generates)
        with pytest.raises(openai.BadRequestError) as continued:
            await bob.responses.create(
                model=MODEL, input="what was it?", previous_response_id=stored.id
            )
        with pytest.raises(openai.BadRequestError) as unknown:
            await bob.responses.create(
                model=MODEL, input="what was it?", previous_response_id=MISSING
            )
        assert isinstance(continued.value.body, dict)
        assert isinstance(unknown.value.body, dict)
        assert continued.value.body["code"] == "previous_response_not_found"
        assert without_id(continued.value.body, stored.id) == without_id(
            unknown.value.body, MISSING
        )
        counted = await client.post(
            "/v1/responses/input_tokens",
            json={"model": MODEL, "input": "x", "previous_response_id": stored.id},
            headers={"authorization": f"Bearer {BOB}"},
        )
        assert counted.status_code == 400
        assert counted.json()["error"]["code"] == "previous_response_not_found"
        assert len(engine.generates) == sent

        # Its own key continues, counts, and deletes it, by either header.
        follow = await alice.responses.create(
            model=MODEL, input="what was it?", previous_response_id=stored.id
        )
        assert follow.status == "completed"
        assert "remember 42" in engine.generates[-1]["text"]
        own_count = await client.post(
            "/v1/responses/input_tokens",
            json={"model": MODEL, "input": "x", "previous_response_id": stored.id},
            headers={"x-api-key": ALICE},
        )
        assert own_count.status_code == 200, own_count.text
        deleted = await client.delete(f"/v1/responses/{stored.id}", headers={"x-api-key": ALICE})
        assert deleted.json()["deleted"] is True
        with pytest.raises(openai.NotFoundError):
            await alice.responses.retrieve(stored.id)


async def test_without_keys_everyone_reads_every_response(engine: FakeEngine) -> None:
    async with gateway_client(engine) as client:
        stored = await sdk(client, "anything").responses.create(model=MODEL, input="hi", store=True)
        other = sdk(client, "something-else")
        assert (await other.responses.retrieve(stored.id)).id == stored.id
        follow = await other.responses.create(
            model=MODEL, input="again", previous_response_id=stored.id
        )
        assert follow.status == "completed"
        await other.responses.delete(stored.id)
        with pytest.raises(openai.NotFoundError):
            await other.responses.retrieve(stored.id)


def test_the_local_store_answers_only_the_owner() -> None:
    store = ResponseStore(max_entries=4, max_bytes=1 << 20, ttl_s=60)
    alice = key_id(ALICE)
    assert store.put({"id": "resp_1"}, [], alice)
    entry = store.get("resp_1", alice)
    assert entry is not None
    assert entry.owner == alice
    assert store.get("resp_1", key_id(BOB)) is None
    assert store.get("resp_1") is None  # a keyless look-up is nobody's key
    assert store.put({"id": "resp_2"}, [])
    assert store.get("resp_2") is not None
    assert store.get("resp_2", alice) is None
