"""The Anthropic Messages face end to end: the official `anthropic` client (2.15.0) and raw SSE
against real gateway and simulator processes on loopback.

The prefix property is checked on the engine's side: the main simulator checkpoints every token
(`--track-interval 1`), and at the end of a request it keeps a checkpoint of its whole sequence
(prompt + generated text, `engine/sim/checkpoints.py`). A turn-2 prompt that starts with turn 1's
prompt and output byte for byte restores that checkpoint, so its `cache_read_input_tokens` is
exactly (turn-1 prompt bytes + output bytes) // 4 (`docs/simulator.md`, Tokens); a prompt that
differs anywhere after turn 1's prompt restores at most turn 1's prompt checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import anthropic
import httpx
import pytest

from tests.e2e.conftest import GATEWAY_ENV, metric_sum, sim_and_gateway, sim_body, wait_for
from tests.gateway.parsers.support import render_call
from tests.support.anthropic_events import (
    Event,
    check_stream,
    events_before_first_block,
    parse_sse,
)
from tests.support.procs import Proc, start_gateway

MODEL = "claude-sonnet-4-5-20250929"  # any name is served, and echoed back
ABORTS = "sglang:num_aborted_requests_total"
KEYS = "key-one,key-two"
SMALL_CONTEXT = 512
# Any: the SDK types tool and message params as TypedDicts; these tests send what clients do.
WEATHER: Any = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "opts": {"type": "object"},
        },
        "required": ["city"],
    },
}
HELLO: list[anthropic.types.MessageParam] = [{"role": "user", "content": "Hello there"}]


@pytest.fixture(scope="module")
def main() -> Iterator[tuple[Proc, Proc]]:
    yield from sim_and_gateway("--track-interval", "1")


@pytest.fixture(scope="module")
def sim(main: tuple[Proc, Proc]) -> Proc:
    return main[0]


@pytest.fixture(scope="module")
def gateway(main: tuple[Proc, Proc]) -> Proc:
    return main[1]


def client_for(proc: Proc, api_key: str = "unused", **kwargs: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proc.url, api_key=api_key, max_retries=0, **kwargs)


@pytest.fixture
def client(gateway: Proc) -> Iterator[anthropic.Anthropic]:
    with client_for(gateway) as c:
        yield c


def raw_stream(
    proc: Proc, body: dict[str, Any], headers: dict[str, str] | None = None
) -> list[Event]:
    """POST a streamed request and read the SSE as it is on the wire."""
    with httpx.stream(
        "POST",
        proc.url + "/v1/messages",
        json={"model": MODEL, "max_tokens": 1024, **body, "stream": True},
        headers=headers,
        timeout=60,
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["request-id"]
        return parse_sse(b"".join(response.iter_bytes()))


def blocks_of(message: anthropic.types.Message) -> list[dict[str, Any]]:
    return [block.to_dict() for block in message.content]


def comparable(blocks: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """What must agree between two answers to one prompt (ids and signatures may differ)."""
    out: list[tuple[str, Any]] = []
    for block in blocks:
        kind = block["type"]
        if kind == "thinking":
            out.append((kind, block["thinking"]))
        elif kind == "text":
            out.append((kind, block["text"]))
        else:
            out.append((kind, (block["name"], block["input"])))
    return out


def prompt_tokens(usage: anthropic.types.Usage) -> int:
    return (
        usage.input_tokens
        + (usage.cache_read_input_tokens or 0)
        + (usage.cache_creation_input_tokens or 0)
    )


# -- create and stream ----------------------------------------------------------------------------


def test_cache_creation_is_what_the_request_newly_checkpointed(client: anthropic.Anthropic) -> None:
    """Peers report 0: here it is the prompt rounded down to the engine's checkpoint interval
    (1 token on this module's simulator; the rounding is tested on the relay) less what was
    read, so a turn that extends the last one creates only its new part, and the three counts
    add up to the prompt."""
    interval = 1
    system = "You are a patient assistant. " * 200
    turn: list[Any] = [{"role": "user", "content": "Tell me about the notes."}]
    short = sim_body(reasoning_tokens=2, content_tokens=2)
    session = {"x-claude-code-session-id": "cache-creation-session"}
    first = client.messages.create(
        model=MODEL, max_tokens=16, system=system, messages=turn, extra_body=short,
        extra_headers=session,
    )  # fmt: skip
    usage = first.usage
    total = prompt_tokens(usage)
    assert (usage.cache_read_input_tokens or 0) == 0
    assert usage.cache_creation_input_tokens == total // interval * interval > 0
    assert usage.input_tokens == total - usage.cache_creation_input_tokens
    follow_up: list[Any] = [
        *turn,
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {"role": "user", "content": "And then? " * 80},
    ]
    second = client.messages.create(
        model=MODEL, max_tokens=16, system=system, messages=follow_up, extra_body=short,
        extra_headers=session,
    )  # fmt: skip
    read = second.usage.cache_read_input_tokens or 0
    created = second.usage.cache_creation_input_tokens or 0
    assert read >= usage.cache_creation_input_tokens  # the first turn's checkpoint was read
    assert read + created == prompt_tokens(second.usage) // interval * interval


def test_create(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model=MODEL,
        max_tokens=256,
        messages=HELLO,
        extra_body=sim_body(reasoning_tokens=8, content_tokens=8),
    )
    assert message.id.startswith("msg_")
    assert message.type == "message"
    assert message.role == "assistant"
    assert message.model == MODEL
    assert [block.type for block in message.content] == ["thinking", "text"]
    thinking = message.content[0]
    assert thinking.type == "thinking"
    assert thinking.thinking
    assert thinking.signature.startswith("fbx1.")
    assert message.stop_reason == "end_turn"
    assert message.stop_sequence is None
    # A checkpoint every token here: the whole (uncached) prompt is newly checkpointed.
    assert message.usage.cache_creation_input_tokens == prompt_tokens(message.usage)
    assert message.usage.output_tokens > 0
    assert prompt_tokens(message.usage) > 0
    assert message._request_id


def test_every_stream_keeps_the_grammar(gateway: Proc) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"messages": HELLO, **sim_body(reasoning_tokens=6, content_tokens=6)}, "end_turn"),
        (
            {"messages": HELLO, "tools": [WEATHER], **sim_body(tool_calls=2, content_tokens=4)},
            "tool_use",
        ),
        ({"messages": HELLO, "max_tokens": 5, **sim_body(reasoning_tokens=30)}, "max_tokens"),
        (
            {
                "messages": HELLO,
                "thinking": {"type": "disabled"},
                **sim_body(content_tokens=6),
            },
            "end_turn",
        ),
    ]
    for body, reason in cases:
        message = check_stream(raw_stream(gateway, body))
        assert message["stop_reason"] == reason, body
        assert message["model"] == MODEL


def test_thinking_disabled_answers_without_a_thinking_block(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model=MODEL,
        max_tokens=256,
        messages=HELLO,
        thinking={"type": "disabled"},
        extra_body=sim_body(reasoning_tokens=8, content_tokens=8),
    )
    assert [block.type for block in message.content] == ["text"]


def test_a_client_stop_sequence(client: anthropic.Anthropic, gateway: Proc) -> None:
    body = sim_body(output="plan</think>Hello STOP world")
    message = client.messages.create(
        model=MODEL, max_tokens=256, messages=HELLO, stop_sequences=["STOP"], extra_body=body
    )
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "STOP")
    assert "world" not in "".join(b.text for b in message.content if b.type == "text")
    streamed = check_stream(
        raw_stream(gateway, {"messages": HELLO, "stop_sequences": ["STOP"], **body})
    )
    assert (streamed["stop_reason"], streamed["stop_sequence"]) == ("stop_sequence", "STOP")


@pytest.mark.parametrize("tools", [False, True], ids=["text", "tools"])
def test_the_final_message_of_a_stream_equals_create(
    client: anthropic.Anthropic, tools: bool
) -> None:
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 512,
        "messages": [{"role": "user", "content": f"Compare me ({tools})"}],
        "extra_body": sim_body(tool_calls=2) if tools else {},
    }
    if tools:
        kwargs["tools"] = [WEATHER]
    created = client.messages.create(**kwargs)
    with client.messages.stream(**kwargs) as stream:
        final = stream.get_final_message()
    assert comparable(blocks_of(final)) == comparable(blocks_of(created))
    assert final.stop_reason == created.stop_reason == ("tool_use" if tools else "end_turn")
    assert final.usage.output_tokens == created.usage.output_tokens
    # The second request may read the first's checkpoint: the split differs, not the total.
    assert prompt_tokens(final.usage) == prompt_tokens(created.usage)
    assert final.model == created.model == MODEL


def test_text_stream_and_snapshots(client: anthropic.Anthropic) -> None:
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 512,
        "messages": [{"role": "user", "content": "Stream text, then tools"}],
        "tools": [WEATHER],
        "extra_body": sim_body(tool_calls=1, content_tokens=12),
    }
    with client.messages.stream(**kwargs) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text
    assert text == "".join(block.text for block in final.content if block.type == "text")
    with client.messages.stream(**kwargs) as stream:
        for event in stream:
            if event.type != "content_block_delta":
                continue
            snapshot = stream.current_message_snapshot
            assert len(snapshot.content) == event.index + 1
            block = snapshot.content[event.index]
            if event.delta.type == "input_json_delta":
                assert block.type == "tool_use"
                assert isinstance(block.input, dict)
            elif event.delta.type == "text_delta":
                assert block.type == "text"
            else:
                assert block.type == "thinking"


def test_tool_use_hard_arguments_stream_and_create_alike(client: anthropic.Anthropic) -> None:
    arguments = {
        "city": 'São Paulo "SP"\nBR \\ x 🎉',
        "days": 3,
        "opts": {"a": [1, "é", {"b": None}], "c": {}},
    }
    ping = {"name": "ping", "input_schema": {"type": "object", "properties": {}}}
    output = "go</think>" + render_call("get_weather", arguments) + render_call("ping", {})
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 1024,
        "messages": HELLO,
        "tools": [WEATHER, ping],
        "extra_body": sim_body(output=output),
    }
    created = client.messages.create(**kwargs)
    with client.messages.stream(**kwargs) as stream:
        final = stream.get_final_message()
    for message in (created, final):
        assert message.stop_reason == "tool_use"
        calls = [
            (b.name, b.input)
            for b in message.content
            if isinstance(b, anthropic.types.ToolUseBlock)
        ]
        assert calls == [("get_weather", arguments), ("ping", {})]


def test_display_omitted_sends_signatures_only(gateway: Proc) -> None:
    body = {
        "messages": HELLO,
        "thinking": {"type": "adaptive", "display": "omitted"},
        **sim_body(reasoning_tokens=8, content_tokens=4),
    }
    events = raw_stream(gateway, body)
    assert all(e.data.get("delta", {}).get("type") != "thinking_delta" for e in events)
    message = check_stream(events)
    assert message["content"][0]["type"] == "thinking"
    assert message["content"][0]["thinking"] == ""


# -- the round trip and the prefix property -------------------------------------------------------

REASONING = 'The user asks about São Paulo; call "get_weather".\n'
TURN1_OUTPUT = (
    REASONING
    + "</think>"
    + "I'll check."
    + render_call(
        "get_weather", {"city": 'São Paulo "SP"\nBR \\ x', "days": 3, "opts": {"a": [1, "é"]}}
    )
)


def _turn1(client: anthropic.Anthropic, stream: bool) -> anthropic.types.Message:
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 1024,
        "system": "You help with the weather.",
        "messages": [{"role": "user", "content": "Weather in São Paulo for 3 days?"}],
        "tools": [WEATHER],
        "extra_body": sim_body(output=TURN1_OUTPUT),
    }
    if not stream:
        created: anthropic.types.Message = client.messages.create(**kwargs)
        return created
    with client.messages.stream(**kwargs) as s:
        return s.get_final_message()


def _turn2(
    client: anthropic.Anthropic, first: anthropic.types.Message, blocks: list[dict[str, Any]]
) -> anthropic.types.Message:
    tool_id = next(b["id"] for b in blocks if b["type"] == "tool_use")
    return client.messages.create(
        model=MODEL,
        max_tokens=256,
        system="You help with the weather.",
        messages=[
            {"role": "user", "content": "Weather in São Paulo for 3 days?"},
            {"role": "assistant", "content": cast(Any, blocks)},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": tool_id, "content": "31C, sunny"},
                    {"type": "text", "text": "Thanks!"},
                ],
            },
        ],
        tools=[WEATHER],
        extra_body=sim_body(reasoning_tokens=4, content_tokens=4),
    )


def _sequence_hits(turn1_prompt_tokens: int, turn1_output_tokens: int) -> set[int]:
    """The cached tokens of a turn 2 that extends turn 1's prompt and output byte for byte:
    the engine's state after turn 1 (prompt + output - 1 tokens), or the sequence's whole
    4-byte chunks where those are more (the prompt's bytes are known to 4, the output's
    exactly; the simulator's seam, engine/sim/checkpoints.py)."""
    output_bytes = len(TURN1_OUTPUT.encode())
    low = 4 * (turn1_prompt_tokens - 1) + 1
    state = turn1_prompt_tokens + turn1_output_tokens - 1
    chunks = {(size + output_bytes) // 4 for size in range(low, 4 * turn1_prompt_tokens + 1)}
    return {max(state, n) for n in chunks}


def _edit_thinking(blocks: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    return [{**b, "thinking": text} if b["type"] == "thinking" else b for b in blocks]


def _tamper(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {**b, "signature": b["signature"][:-4] + "AAAA"} if b["type"] == "thinking" else b
        for b in blocks
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["created", "streamed"])
@pytest.mark.parametrize(
    "change",
    ["as-sent", "thinking-edited", "signature-tampered"],
)
def test_turn_two_extends_turn_one_on_the_engine(
    client: anthropic.Anthropic, stream: bool, change: str
) -> None:
    first = _turn1(client, stream)
    assert first.stop_reason == "tool_use"
    assert [b.type for b in first.content] == ["thinking", "text", "tool_use"]
    assert first.content[0].type == "thinking"
    assert first.content[0].thinking == REASONING
    blocks = blocks_of(first)
    if change == "thinking-edited":
        # Our signature restores the reasoning the model wrote, whatever the visible text says.
        blocks = _edit_thinking(blocks, "")
    elif change == "signature-tampered":
        # Not ours any more: still 200, and the visible text (intact here) is what renders.
        blocks = _tamper(blocks)
    second = _turn2(client, first, blocks)
    first_prompt = prompt_tokens(first.usage)
    cached = second.usage.cache_read_input_tokens or 0
    assert cached > first_prompt, "turn 2 did not extend turn 1's prompt + output"
    assert cached in _sequence_hits(first_prompt, first.usage.output_tokens)
    created = second.usage.cache_creation_input_tokens or 0
    assert second.usage.input_tokens + created == prompt_tokens(second.usage) - cached


def test_the_control_edited_thinking_without_our_signature_misses(
    client: anthropic.Anthropic,
) -> None:
    first = _turn1(client, stream=False)
    blocks = _edit_thinking(_tamper(blocks_of(first)), "A summary the client rewrote.")
    second = _turn2(client, first, blocks)
    assert (second.usage.cache_read_input_tokens or 0) <= prompt_tokens(first.usage)


def test_tool_results_in_every_form_are_served(client: anthropic.Anthropic) -> None:
    deferred = {
        "name": "mcp__db__query",
        "input_schema": {"type": "object", "properties": {"sql": {"type": "string"}}},
        "defer_loading": True,
    }
    calls = [
        {"type": "tool_use", "id": f"toolu_{i}", "name": "get_weather", "input": {"city": c}}
        for i, c in enumerate(["Paris", "Rome", "Oslo", "Lima"])
    ]
    results: list[dict[str, Any]] = [
        {"type": "tool_result", "tool_use_id": "toolu_0", "content": "12C"},
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "content": [{"type": "text", "text": "20C"}, {"type": "text", "text": " dry"}],
            "cache_control": {"type": "ephemeral", "ttl": "1h"},
        },
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "timeout", "is_error": True},
        {
            "type": "tool_result",
            "tool_use_id": "toolu_3",
            "content": [{"type": "tool_reference", "tool_name": "mcp__db__query"}],
        },
    ]
    message = client.messages.create(
        model=MODEL,
        max_tokens=256,
        messages=[
            {"role": "user", "content": "Four cities"},
            {"role": "assistant", "content": cast(Any, calls)},
            {"role": "user", "content": cast(Any, results)},
        ],
        tools=[WEATHER, cast(Any, deferred)],
        extra_body=sim_body(reasoning_tokens=4, content_tokens=4, tool_calls=0),
    )
    assert message.stop_reason == "end_turn"


# -- count_tokens ---------------------------------------------------------------------------------


@pytest.mark.parametrize("thinking", ["enabled", "disabled"])
def test_count_tokens_equals_the_engines_prompt_tokens(
    client: anthropic.Anthropic, thinking: str
) -> None:
    request: dict[str, Any] = {
        "model": MODEL,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=1.2.3.abc;"},
            {"type": "text", "text": "You count."},
        ],
        "messages": [
            {"role": "user", "content": f"How many tokens ({thinking})?"},
            {"role": "system", "content": "<reminder>be exact</reminder>"},
        ],
        "tools": [WEATHER],
        "thinking": (
            {"type": "disabled"}
            if thinking == "disabled"
            else {"type": "enabled", "budget_tokens": 2048}
        ),
        "output_config": {"effort": "low"},
    }
    counted = client.messages.count_tokens(**request)
    message = client.messages.create(
        **request, max_tokens=64, extra_body=sim_body(reasoning_tokens=2, content_tokens=2)
    )
    assert counted.input_tokens == prompt_tokens(message.usage)


# -- errors ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed(sim: Proc) -> Iterator[Proc]:
    proc = start_gateway([sim.url], env={**GATEWAY_ENV, "FLASHBOX_API_KEYS": KEYS})
    try:
        yield proc
    finally:
        proc.stop()


def envelope(response: httpx.Response, kind: str) -> dict[str, Any]:
    body: dict[str, Any] = response.json()
    assert set(body) == {"type", "error", "request_id"}
    assert body["type"] == "error"
    assert body["error"]["type"] == kind
    assert body["error"]["message"]
    assert response.headers["request-id"] == body["request_id"]
    return body


def test_a_wrong_or_missing_key_is_a_401_envelope(keyed: Proc) -> None:
    body = {"model": MODEL, "max_tokens": 16, "messages": HELLO}
    for headers in ({"x-api-key": "wrong"}, {"authorization": "Bearer wrong"}, {}):
        response = httpx.post(keyed.url + "/v1/messages", json=body, headers=headers)
        assert response.status_code == 401
        envelope(response, "authentication_error")
    with (
        client_for(keyed, api_key="wrong") as bad,
        pytest.raises(anthropic.AuthenticationError) as info,
    ):
        bad.messages.create(model=MODEL, max_tokens=16, messages=HELLO)
    assert info.value.request_id
    assert info.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    counted = httpx.post(keyed.url + "/v1/messages/count_tokens", json=body, headers={})
    assert counted.status_code == 401


def test_x_api_key_and_bearer_are_both_accepted(keyed: Proc) -> None:
    body = {"model": MODEL, "max_tokens": 16, "messages": HELLO}
    response = httpx.post(keyed.url + "/v1/messages", json=body, headers={"x-api-key": "key-two"})
    assert response.status_code == 200, response.text
    with client_for(keyed, api_key="key-one") as bearer:  # the SDK sends Authorization: Bearer
        assert bearer.messages.create(model=MODEL, max_tokens=16, messages=HELLO).content
    with anthropic.Anthropic(base_url=keyed.url, auth_token="key-two", max_retries=0) as token:
        assert token.messages.create(model=MODEL, max_tokens=16, messages=HELLO).content
    with client_for(keyed, api_key="key-one") as counting:
        assert counting.messages.count_tokens(model=MODEL, messages=HELLO).input_tokens > 0


@pytest.mark.parametrize(
    ("change", "where", "says"),
    [
        ({"max_tokens": -1}, "max_tokens", "greater than or equal to 0"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages.0.role", "'user'"),
        (
            {"messages": [{"role": "user", "content": [{"type": "video", "url": "x"}]}]},
            "messages.0.content.0",
            "Input tag 'video'",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
            "messages.0.content.0.text.text",
            "Field required",
        ),
        ({"temperature": "warm"}, "temperature", "number"),
        ({"messages": []}, "messages", "at least 1"),
    ],
    ids=["max_tokens", "role", "block-type", "block-field", "temperature", "no-messages"],
)
def test_a_schema_violation_is_a_400_naming_the_field(
    client: anthropic.Anthropic, change: dict[str, Any], where: str, says: str
) -> None:
    kwargs: dict[str, Any] = {"model": MODEL, "max_tokens": 16, "messages": HELLO}
    extra = {k: v for k, v in change.items() if k not in kwargs}
    kwargs.update({k: v for k, v in change.items() if k in kwargs})
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(**kwargs, extra_body=extra)
    body: Any = info.value.body
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    message = body["error"]["message"]
    assert f"'{where}'" in message
    assert says in message
    assert info.value.request_id == body["request_id"]


def test_an_image_is_a_400_naming_the_block(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(
            model=MODEL,
            max_tokens=16,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"},
                        },
                    ],
                }
            ],
        )
    assert "messages.0.content.1" in info.value.message
    assert "image" in info.value.message


def test_bad_json_and_an_oversized_body_are_enveloped(gateway: Proc) -> None:
    response = httpx.post(
        gateway.url + "/v1/messages",
        content=b'{"model": "m", "messages": [',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    envelope(response, "invalid_request_error")
    big = {
        "model": MODEL,
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "x" * 300_000}],
    }
    response = httpx.post(gateway.url + "/v1/messages", json=big)
    assert response.status_code == 413
    envelope(response, "request_too_large")


def test_a_trailing_assistant_message_is_a_400(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError, match="assistant"):
        client.messages.create(
            model=MODEL,
            max_tokens=16,
            messages=[*HELLO, {"role": "assistant", "content": "Sure, the answer is"}],
        )


@pytest.fixture(scope="module")
def small() -> Iterator[tuple[Proc, Proc]]:
    """A simulator with a 512-token context."""
    yield from sim_and_gateway("--context-length", str(SMALL_CONTEXT))


def test_an_overlong_prompt_is_a_400_in_anthropics_words(small: tuple[Proc, Proc]) -> None:
    _, gateway = small
    long_messages: list[anthropic.types.MessageParam] = [
        {"role": "user", "content": "word " * 1000}
    ]
    pattern = r"prompt is too long: \d+ tokens > \d+ maximum"
    with client_for(gateway) as client:
        with pytest.raises(anthropic.BadRequestError, match=pattern) as info:
            client.messages.create(model=MODEL, max_tokens=16, messages=long_messages)
        assert info.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
        with (
            pytest.raises(anthropic.BadRequestError, match=pattern),
            client.messages.stream(model=MODEL, max_tokens=16, messages=long_messages) as s,
        ):
            s.get_final_message()
        # Counting never refuses: it says how long the prompt is.
        counted = client.messages.count_tokens(model=MODEL, messages=long_messages)
        assert counted.input_tokens > SMALL_CONTEXT


def test_a_huge_max_tokens_is_clamped_not_refused(
    small: tuple[Proc, Proc], client: anthropic.Anthropic
) -> None:
    _, gateway = small
    with client_for(gateway) as near:
        # Past what is left of a 512-token context (the engine refuses prompt + max_tokens
        # past its context): lowered to fit.
        with near.messages.stream(
            model=MODEL,
            max_tokens=100_000,
            messages=HELLO,
            extra_body=sim_body(reasoning_tokens=4, content_tokens=4),
        ) as s:
            message = s.get_final_message()
        assert message.stop_reason == "end_turn"
    # Past the gateway's own ceiling.
    with client.messages.stream(model=MODEL, max_tokens=10**9, messages=HELLO) as s:
        assert s.get_final_message().stop_reason == "end_turn"


def test_an_engine_error_mid_stream_is_an_error_event(
    client: anthropic.Anthropic, gateway: Proc
) -> None:
    body = {"messages": HELLO, **sim_body(fault="error:3")}
    events = raw_stream(gateway, body)
    message = check_stream(events, allow_error=True)
    assert events[-1].name == "error"
    assert message["error"]["type"] == "api_error"
    with (
        pytest.raises(anthropic.APIStatusError, match="api_error"),
        client.messages.stream(
            model=MODEL, max_tokens=64, messages=HELLO, extra_body=sim_body(fault="die:3")
        ) as stream,
    ):
        stream.get_final_message()


def test_an_engine_abort_mid_stream_is_an_error_event(sim: Proc, gateway: Proc) -> None:
    body = {"model": MODEL, "max_tokens": 64, "messages": HELLO, "stream": True}
    body.update(sim_body(fault="stall:3"))
    with httpx.stream("POST", gateway.url + "/v1/messages", json=body, timeout=30) as response:
        lines = response.iter_lines()
        assert next(line for line in lines if "content_block_delta" in line)
        aborted = httpx.post(sim.url + "/abort_request", json={"abort_all": True}).json()
        assert aborted["aborted"] >= 1
        rest = "\n".join(lines)
    assert "event: error" in rest
    assert "message_stop" not in rest


@pytest.fixture(scope="module")
def one_slot(sim: Proc) -> Iterator[Proc]:
    env = {
        **GATEWAY_ENV,
        "FLASHBOX_ADMISSION__MAX_IN_FLIGHT": "1",
        "FLASHBOX_ADMISSION__MAX_QUEUE": "0",
    }
    proc = start_gateway([sim.url], env=env)
    try:
        yield proc
    finally:
        proc.stop()


def test_admission_overload_is_a_429_with_an_integer_retry_after(one_slot: Proc) -> None:
    with client_for(one_slot) as client:
        holder = client.messages.create(
            model=MODEL,
            max_tokens=64,
            messages=HELLO,
            stream=True,
            extra_body=sim_body(fault="stall_first"),
        )
        try:
            with pytest.raises(anthropic.RateLimitError) as info:
                client.messages.create(model=MODEL, max_tokens=16, messages=HELLO)
            retry_after = info.value.response.headers["retry-after"]
            assert retry_after.isdigit()
            assert info.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
            # Counting takes no generation slot.
            assert client.messages.count_tokens(model=MODEL, messages=HELLO).input_tokens > 0
        finally:
            holder.close()

        def served() -> bool:
            try:
                client.messages.create(model=MODEL, max_tokens=16, messages=HELLO)
            except anthropic.RateLimitError:
                return False
            return True

        assert wait_for(served)


# -- tolerance ------------------------------------------------------------------------------------


def test_claude_code_extras_are_accepted(client: anthropic.Anthropic, gateway: Proc) -> None:
    extras: dict[str, Any] = {
        "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
        "output_config": {"effort": "xhigh", "task_budget": {"total": 1000}},
        "service_tier": "auto",
        "container": None,
        "inference_geo": "us",
        "mcp_servers": [],
        "cache_control": {"type": "ephemeral", "ttl": "1h"},
        "some_future_field": {"x": 1},
        **sim_body(reasoning_tokens=2, content_tokens=2),
    }
    tools: list[dict[str, Any]] = [
        {
            **WEATHER,
            "strict": True,
            "cache_control": {"type": "ephemeral"},
            "eager_input_streaming": True,
        },
        {"name": "mcp__x__y", "input_schema": {"type": "object"}, "defer_loading": True},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
    ]
    message = client.beta.messages.create(  # type: ignore[call-overload]
        model=MODEL,
        max_tokens=64,
        system=[
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332.abc;"},
            {"type": "text", "text": "Base.", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
        ],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "", "cache_control": None}]},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
            {"role": "user", "content": "go on"},
        ],
        tools=tools,
        thinking={"type": "adaptive"},
        metadata={"user_id": '{"device_id": "d", "account_uuid": "", "session_id": "s-1"}'},
        betas=["claude-code-20250219", "interleaved-thinking-2025-05-14", "future-beta-2099-01-01"],
        extra_body=extras,
        extra_headers={
            "x-claude-code-session-id": "s-1",
            "x-claude-code-agent-id": "agent-1",
            "anthropic-version": "2023-06-01",
        },
    )
    assert message.content
    raw = raw_stream(
        gateway,
        {"messages": HELLO, **extras},
        headers={"anthropic-beta": "context-management-2025-06-27,unknown-thing"},
    )
    assert check_stream(raw)["stop_reason"] == "end_turn"


def test_unknown_thinking_types_are_tolerated(client: anthropic.Anthropic) -> None:
    # The pinned SDK already knows a thinking type beyond the three the API documents.
    message = client.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=HELLO,
        thinking={"type": "between_tools"},
        extra_body=sim_body(reasoning_tokens=2, content_tokens=2),
    )
    assert message.content


def test_the_connection_probe(keyed: Proc) -> None:
    assert httpx.head(keyed.url + "/api/hello").status_code == 200
    assert httpx.get(keyed.url + "/api/hello").status_code == 200


# -- keepalive, disconnects, metrics --------------------------------------------------------------


@pytest.fixture(scope="module")
def slow() -> Iterator[tuple[Proc, Proc]]:
    """A modelled prefill of ~0.65 s (the 6.5 s floor at a tenth) and pings every 0.1 s."""
    yield from sim_and_gateway(time_scale=0.1, env={"FLASHBOX_ANTHROPIC__KEEPALIVE_S": "0.1"})


def test_pings_keep_a_slow_prefill_alive(slow: tuple[Proc, Proc]) -> None:
    _, gateway = slow
    events = raw_stream(
        gateway, {"messages": HELLO, **sim_body(reasoning_tokens=2, content_tokens=2)}
    )
    before = events_before_first_block(events)
    assert before[0] == "message_start"
    assert "ping" in before[1:]
    assert set(before[1:]) == {"ping"}
    check_stream(events)
    with (
        client_for(gateway) as client,
        client.messages.stream(
            model=MODEL, max_tokens=64, messages=HELLO, extra_body=sim_body(content_tokens=2)
        ) as stream,
    ):
        assert stream.get_final_message().stop_reason == "end_turn"


def gateway_aborts(gateway: Proc, phase: str) -> float:
    return metric_sum(gateway, "flashbox_upstream_aborts_total", {"phase": phase})


def test_a_client_leaving_mid_stream_aborts_the_engine(
    sim: Proc, gateway: Proc, client: anthropic.Anthropic
) -> None:
    before, streaming = metric_sum(sim, ABORTS), gateway_aborts(gateway, "streaming")
    with client.messages.stream(
        model=MODEL, max_tokens=64, messages=HELLO, extra_body=sim_body(fault="stall:4")
    ) as stream:
        for event in stream:
            if event.type == "content_block_delta":
                break
    assert wait_for(lambda: metric_sum(sim, ABORTS) >= before + 1)
    assert wait_for(lambda: gateway_aborts(gateway, "streaming") >= streaming + 1)


def test_a_client_leaving_before_the_first_token_aborts_the_engine(
    sim: Proc, gateway: Proc
) -> None:
    before, waiting = metric_sum(sim, ABORTS), gateway_aborts(gateway, "before_first_token")
    body = {"model": MODEL, "max_tokens": 64, "messages": HELLO, "stream": True}
    body.update(sim_body(fault="stall_first"))
    with httpx.stream("POST", gateway.url + "/v1/messages", json=body, timeout=30) as response:
        assert next(response.iter_lines()) == "event: message_start"
    assert wait_for(lambda: metric_sum(sim, ABORTS) >= before + 1)
    assert wait_for(lambda: gateway_aborts(gateway, "before_first_token") >= waiting + 1)


def test_a_client_leaving_a_non_streamed_request_aborts_the_engine(
    sim: Proc, gateway: Proc
) -> None:
    before, waiting = metric_sum(sim, ABORTS), gateway_aborts(gateway, "non_streaming")
    with client_for(gateway, timeout=0.5) as client, pytest.raises(anthropic.APITimeoutError):
        client.messages.create(
            model=MODEL, max_tokens=64, messages=HELLO, extra_body=sim_body(fault="stall_first")
        )
    assert wait_for(lambda: metric_sum(sim, ABORTS) >= before + 1)
    assert wait_for(lambda: gateway_aborts(gateway, "non_streaming") >= waiting + 1)


def test_metrics_carry_the_anthropic_label(gateway: Proc, keyed: Proc) -> None:
    requests = {"api": "anthropic", "code": "200"}
    before = metric_sum(gateway, "flashbox_requests_total", requests)
    with client_for(gateway) as client:
        client.messages.create(model=MODEL, max_tokens=16, messages=HELLO)
    assert wait_for(lambda: metric_sum(gateway, "flashbox_requests_total", requests) > before)
    assert metric_sum(gateway, "flashbox_ttft_seconds_count", {"api": "anthropic"}) > 0
    refused = {"api": "anthropic", "code": "401"}
    before_refused = metric_sum(keyed, "flashbox_requests_total", refused)
    httpx.post(
        keyed.url + "/v1/messages", json={"model": MODEL, "max_tokens": 1, "messages": HELLO}
    )
    assert metric_sum(keyed, "flashbox_requests_total", refused) == before_refused + 1
    assert metric_sum(keyed, "flashbox_errors_total", {"api": "anthropic"}) > 0
    assert metric_sum(gateway, "flashbox_requests_total", {"api": "openai"}) == 0
