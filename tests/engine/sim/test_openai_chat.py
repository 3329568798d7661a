"""The plain /v1/chat/completions, driven by the official openai client."""

from __future__ import annotations

import openai
import pytest

from tests.support.procs import Proc

MESSAGES: list[openai.types.chat.ChatCompletionMessageParam] = [
    {"role": "system", "content": "be brief " * 300},
    {"role": "user", "content": "hello"},
]


@pytest.fixture
def client(sim: Proc) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.url + "/v1", api_key="unused", max_retries=0)


def test_models_list(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["glm-5.3-flash"]


def test_non_streaming(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model="glm-5.3-flash", messages=MESSAGES, max_tokens=7)
    assert reply.choices[0].finish_reason == "length"
    assert reply.choices[0].message.content
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 7


def test_streaming_with_usage_and_cache(client: openai.OpenAI) -> None:
    def run() -> tuple[str, int, str | None]:
        stream = client.chat.completions.create(
            model="glm-5.3-flash",
            messages=MESSAGES,
            max_tokens=30,
            stream=True,
            stream_options={"include_usage": True},
        )
        text, cached, finish = "", -1, None
        for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
            if chunk.usage is not None:
                details = chunk.usage.prompt_tokens_details
                cached = details.cached_tokens or 0 if details else 0
        return text, cached, finish

    first_text, _, finish = run()
    assert first_text
    assert finish == "length"
    second_text, cached, _ = run()
    assert second_text == first_text
    assert cached > 0


def test_bad_request_is_a_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="glm-5.3-flash", messages=[], max_tokens=3)
