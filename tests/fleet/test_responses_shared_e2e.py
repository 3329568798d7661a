"""The Responses store across a fleet: two gateway processes sharing one redis-server, in front of
one simulator, driven by the official openai client. A response stored through gateway A is
continued (`previous_response_id`), read (GET) and deleted through gateway B."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.e2e.conftest import GATEWAY_ENV, MODEL, client_for, metric_sum, sim_body
from tests.support.redis import GatewayFleet, gateway_fleet

# A short answer with reasoning, so the stored conversation carries encrypted reasoning too.
SHORT = sim_body(reasoning_tokens=4, content_tokens=6)


@pytest.fixture(scope="module")
def fleet() -> Iterator[GatewayFleet]:
    env = {
        **GATEWAY_ENV,
        # Both gateways restore each other's reasoning (encrypted_content) byte for byte.
        "FLASHBOX_REASONING__SIGNING_KEY": "fleet-test-signing-key",
    }
    with gateway_fleet(env) as fleet:
        yield fleet


@pytest.fixture(scope="module")
def clients(fleet: GatewayFleet) -> Iterator[list[openai.OpenAI]]:
    made = [client_for(gateway) for gateway in fleet.gateways]
    try:
        yield made
    finally:
        for client in made:
            client.close()


def test_stored_through_a_continued_and_read_through_b(clients: list[openai.OpenAI]) -> None:
    a, b = clients
    first = a.responses.create(model=MODEL, input="Hello", store=True, extra_body=SHORT)
    assert first.status == "completed"
    second = b.responses.create(
        model=MODEL,
        input="And then?",
        previous_response_id=first.id,
        store=True,
        extra_body=SHORT,
    )
    assert second.status == "completed"
    assert second.previous_response_id == first.id
    for client in (a, b):
        found = client.responses.retrieve(first.id)
        assert found.id == first.id
        assert found.output_text == first.output_text
    # The third turn, back on A, continues B's stored response.
    third = a.responses.create(
        model=MODEL, input="Go on.", previous_response_id=second.id, extra_body=SHORT
    )
    assert third.status == "completed"


def test_a_streamed_response_is_found_through_the_other_gateway(
    clients: list[openai.OpenAI],
) -> None:
    a, b = clients
    with a.responses.stream(model=MODEL, input="Stream it", store=True, extra_body=SHORT) as stream:
        done = stream.get_final_response()
    found = b.responses.retrieve(done.id)
    assert found.output_text == done.output_text


def test_deleted_through_b_is_gone_through_a(
    fleet: GatewayFleet, clients: list[openai.OpenAI]
) -> None:
    a, b = clients
    first = a.responses.create(model=MODEL, input="Forget me", store=True, extra_body=SHORT)
    b.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        a.responses.retrieve(first.id)
    with pytest.raises(openai.BadRequestError) as info:
        a.responses.create(model=MODEL, input="Hi", previous_response_id=first.id)
    assert info.value.code == "previous_response_not_found"
    shared = sum(
        metric_sum(g, "flashbox_response_store_writes_total", {"outcome": "shared"})
        for g in fleet.gateways
    )
    assert shared >= 4
