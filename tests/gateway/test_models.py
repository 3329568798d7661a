"""GET /v1/models/{id}: the served names' model objects, read by the official clients."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.gateway.conftest import MODEL, gateway_client
from tests.gateway.faces.sdk_clients import anthropic_client, openai_client
from tests.gateway.fake_engine import FakeEngine


async def test_a_served_name_is_the_object_the_list_carries(engine: FakeEngine) -> None:
    async with gateway_client(engine, model={"served_names": [MODEL, "alias"]}) as client:
        listed = (await client.get("/v1/models")).json()["data"]
        for entry in listed:
            one = await client.get(f"/v1/models/{entry['id']}")
            assert one.status_code == 200
            assert one.json() == entry


async def test_the_openai_client_retrieves_a_model(client: httpx.AsyncClient) -> None:
    model = await openai_client(client).models.retrieve(MODEL)
    assert (model.id, model.object, model.owned_by) == (MODEL, "model", "flashbox")
    assert isinstance(model.created, int)


async def test_the_anthropic_client_retrieves_a_model(client: httpx.AsyncClient) -> None:
    model = await anthropic_client(client).models.retrieve(MODEL)
    assert (model.id, model.type, model.display_name) == (MODEL, "model", MODEL)


async def test_an_unknown_name_is_a_404_that_lists_the_served_ones(
    client: httpx.AsyncClient,
) -> None:
    answer = await client.get("/v1/models/gpt-nope")
    assert answer.status_code == 404
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "model_not_found"
    assert error["param"] == "model"
    assert "gpt-nope" in error["message"]
    assert MODEL in error["message"]
    with pytest.raises(openai.NotFoundError):
        await openai_client(client).models.retrieve("gpt-nope")
    with pytest.raises(anthropic.NotFoundError):
        await anthropic_client(client).models.retrieve("gpt-nope")


async def test_a_name_with_a_slash_is_found(engine: FakeEngine) -> None:
    """Hugging Face style names (org/model) are served names too."""
    async with gateway_client(engine, model={"served_names": ["zai-org/GLM-5"]}) as client:
        answer = await client.get("/v1/models/zai-org/GLM-5")
        assert answer.status_code == 200
        assert answer.json()["id"] == "zai-org/GLM-5"


async def test_it_asks_for_a_key_as_the_list_does(engine: FakeEngine) -> None:
    async with gateway_client(engine, api_keys=["k"]) as client:
        assert (await client.get(f"/v1/models/{MODEL}")).status_code == 401
        assert (await client.get("/v1/models/gpt-nope")).status_code == 401
        keyed = await client.get(f"/v1/models/{MODEL}", headers={"x-api-key": "k"})
        assert keyed.status_code == 200
