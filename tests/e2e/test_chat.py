"""Chat completions end to end: openai client -> gateway -> simulator."""

from __future__ import annotations

import openai
from openai.types.chat import ChatCompletionMessageParam

from tests.e2e.conftest import GATEWAY_ENV, MODEL, client_for, sim_body
from tests.support.procs import Proc, start_gateway, start_sim


def test_streaming_with_usage(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Say something."}],
        stream=True,
        stream_options={"include_usage": True},
        extra_body=sim_body(reasoning_tokens=8, content_tokens=20),
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasoning = "".join(
        getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices
    )
    assert content.strip()
    assert reasoning.strip()
    assert "</think>" not in content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop"
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.prompt_tokens > 0
    assert usage.completion_tokens > 0
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens is not None


def test_non_streaming(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Hello"}],
        extra_body=sim_body(output="</think>Hi there, friend."),
    )
    choice = completion.choices[0]
    assert choice.message.content == "Hi there, friend."
    assert choice.finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.completion_tokens > 0


def test_cached_tokens_on_a_repeated_prefix(client: openai.OpenAI) -> None:
    long_history = "A fairly long shared context paragraph. " * 200
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": long_history}]
    usages = []
    for _ in range(2):
        completion = client.chat.completions.create(
            model=MODEL, messages=messages, extra_body=sim_body(content_tokens=4)
        )
        usages.append(completion.usage)
    second = usages[1]
    assert second is not None
    assert second.prompt_tokens_details is not None
    assert (second.prompt_tokens_details.cached_tokens or 0) > 0


def test_stop_sequence(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Count"}],
        stop=["THREE"],
        extra_body=sim_body(output="</think>one two THREE four"),
    )
    content = completion.choices[0].message.content
    assert content is not None
    assert content.rstrip() == "one two"
    assert completion.choices[0].finish_reason == "stop"


def test_length(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Talk"}],
        max_tokens=3,
        extra_body=sim_body(output="one two three four five six seven eight"),
    )
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 3


def test_parts_content(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
            {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
        ],
        extra_body=sim_body(output="</think>ok"),
    )
    assert completion.choices[0].message.content == "ok"


def test_headers(gateway: Proc, client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Hi"}],
        extra_headers={"x-request-id": "e2e-request-1"},
    )
    assert raw.headers["x-request-id"] == "e2e-request-1"
    assert raw.headers["x-flashbox-replica"].startswith("127.0.0.1:")
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]


def test_two_requests_with_one_request_id_at_once(client: openai.OpenAI) -> None:
    """A client may reuse its x-request-id; the engine rids stay distinct (the engine refuses a
    live duplicate) and each response echoes the client's id."""
    headers = {"x-request-id": "e2e-same-id"}
    first = client.chat.completions.with_streaming_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Hi"}],
        stream=True,
        extra_headers=headers,
    )
    with first as one:
        # The first stream is open (its rid live on the engine) while the second runs whole.
        second = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": "Hi"}], extra_headers=headers
        )
        texts = [line for line in one.iter_lines() if line.startswith("data:")]
        assert one.headers["x-request-id"] == "e2e-same-id"
    assert texts[-1] == "data: [DONE]"
    assert second.headers["x-request-id"] == "e2e-same-id"
    assert second.parse().choices[0].message.content


def test_an_engine_launched_with_stream_output_gives_the_same_answer(
    client: openai.OpenAI,
) -> None:
    """The launcher starts SGLang with --stream-output (token ids as segments, text still
    cumulative): the gateway relays exactly what it relays from an engine without it."""
    sim = start_sim(name="segments", as_launched=True)
    gateway = start_gateway([sim.url], env=GATEWAY_ENV)
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Same words."}]
    extra = sim_body(reasoning_tokens=6, content_tokens=30)

    def answer(target: openai.OpenAI) -> tuple[str, str]:
        stream = target.chat.completions.create(
            model=MODEL, messages=messages, stream=True, extra_body=extra, seed=3
        )
        chunks = [c for c in stream if c.choices]
        content = "".join(c.choices[0].delta.content or "" for c in chunks)
        reasoning = "".join(
            getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks
        )
        return reasoning, content

    try:
        with client_for(gateway) as segmented:
            reasoning, content = answer(segmented)
        assert reasoning.strip()
        assert content.strip()
        assert (reasoning, content) == answer(client)
    finally:
        gateway.stop()
        sim.stop()
