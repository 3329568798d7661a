"""Every error case end to end, in OpenAI's shape, as the openai client sees it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.e2e.conftest import GATEWAY_ENV, MODEL, client_for, sim_body
from tests.support.procs import Proc, start_gateway


def error_body(response: httpx.Response) -> dict[str, object]:
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error, dict)
    return error


def test_invalid_json(gateway: Proc) -> None:
    response = httpx.post(
        gateway.url + "/v1/chat/completions",
        content=b'{"model": "glm-5.3-flash", "messages": [',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    assert error_body(response)["code"] == "invalid_json"


def test_missing_messages(gateway: Proc) -> None:
    response = httpx.post(gateway.url + "/v1/chat/completions", json={"model": MODEL})
    assert response.status_code == 400
    assert error_body(response)["param"] == "messages"


def test_wrong_types(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "x"}],
            extra_body={"temperature": "warm", "stream": "yes"},
        )
    assert info.value.status_code == 400
    assert "temperature" in str(info.value.message) or "stream" in str(info.value.message)


def test_n_above_one(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="n > 1"):
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], n=2
        )


def test_oversized_body(client: openai.OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x" * 300_000}]
        )
    assert info.value.status_code == 413


def test_unknown_model(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "x"}])


def test_engine_error_before_first_byte_is_503(client: openai.OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "x"}],
            extra_body=sim_body(fault="503"),
        )
    assert info.value.status_code == 503


def test_in_stream_engine_error(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "x"}],
        stream=True,
        extra_body=sim_body(fault="error:3"),
    )
    with pytest.raises(openai.APIError, match="simulated engine error"):
        for _ in stream:
            pass


def test_engine_dies_mid_stream(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "x"}],
        stream=True,
        extra_body=sim_body(fault="die:3"),
    )
    with pytest.raises(openai.APIError, match="engine"):
        for _ in stream:
            pass


@pytest.fixture(scope="module")
def keyed_gateway(sim: Proc) -> Iterator[Proc]:
    proc = start_gateway([sim.url], env={**GATEWAY_ENV, "FLASHBOX_API_KEYS": "key-one,key-two"})
    try:
        yield proc
    finally:
        proc.stop()


def test_auth_on(keyed_gateway: Proc) -> None:
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "x"}]
    with (
        client_for(keyed_gateway, api_key="wrong") as bad,
        pytest.raises(openai.AuthenticationError),
    ):
        bad.chat.completions.create(model=MODEL, messages=messages)
    with client_for(keyed_gateway, api_key="key-two") as good:
        completion = good.chat.completions.create(model=MODEL, messages=messages)
        assert completion.choices[0].finish_reason == "stop"
    assert httpx.get(keyed_gateway.url + "/metrics").status_code == 200


def test_auth_off(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "x"}]
    )
    assert completion.choices[0].message is not None
