"""The gateway over an engine, whichever it is: the simulator, or the real sglang-kt server on
this CPU (`make test-engine`). One parametrized fixture (`engine`, tests/e2e/conftest.py).

The real engine's tiny model has random weights: its tokens say nothing, so these tests check
the protocol (status, event grammar, finish reasons, usage, cached tokens, errors in each
face's shape), never the content. Where the two engines may differ, the test says why.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from PIL import Image

from gateway.core.heads import HEAD_TOKENS_PARAM
from gateway.routing.warm import warm_body
from gateway.settings import ModelSettings
from tests.e2e.conftest import MODEL, client_for, engine_gateway_env, metric_sum, wait_for
from tests.support import anthropic_events, responses_events
from tests.support.engines import Engine, start_engine
from tests.support.procs import Proc, free_port, start_gateway

# A real CPU engine answers in seconds, but a loaded 2-core CI box is slow to start one.
pytestmark = pytest.mark.timeout(600)

FINISHES = {"stop", "length", "tool_calls"}
READ_TOOL = {
    "type": "function",
    "function": {
        "name": "read",
        "description": "Read a file.",
        "parameters": {
            "type": "object",
            # Enums: a grammar-forced call is then complete and valid even from random weights.
            "properties": {"path": {"enum": ["a.py", "b.py"]}, "lines": {"enum": [1, 2]}},
            "required": ["path", "lines"],
        },
    },
}
ANTHROPIC_READ_TOOL = {
    "name": "read",
    "description": "Read a file.",
    "input_schema": READ_TOOL["function"]["parameters"],  # type: ignore[index]
}


@pytest.fixture
def client(engine_gateway: Proc) -> Iterator[openai.OpenAI]:
    with client_for(engine_gateway) as c:
        yield c


@pytest.fixture
def claude(engine_gateway: Proc) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=engine_gateway.url, api_key="unused", max_retries=0) as c:
        yield c


# The model's image markers: a random model can say them, and the gateway refuses them as
# text in a conversation, so a test that sends an answer back as history takes them out.
IMAGE_MARKERS = tuple(ModelSettings().image_marker_tokens)


def _replayable(text: str) -> str:
    for marker in IMAGE_MARKERS:
        text = text.replace(marker, "")
    return text


def _user(text: str) -> Any:
    """One user message (typed loosely: it goes to three SDKs' message types)."""
    return [{"role": "user", "content": text}]


# ------------------------------------------------------------------------ the three faces


def test_chat_streamed_and_not(engine: Engine, client: openai.OpenAI) -> None:
    steer = engine.steer(reasoning_tokens=4, content_tokens=6)
    one = client.chat.completions.create(
        model=MODEL, messages=_user("Say something."), max_tokens=16, extra_body=steer
    )
    choice = one.choices[0]
    assert choice.finish_reason in FINISHES
    assert one.usage is not None
    assert one.usage.prompt_tokens > 0
    assert 0 < one.usage.completion_tokens <= 16
    if choice.finish_reason == "length":
        assert one.usage.completion_tokens == 16
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=_user("Say something."),
            max_tokens=16,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=dict(steer),
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] in FINISHES
    assert all(f is None for f in finishes[:-1])
    usage = chunks[-1].usage
    assert usage is not None
    assert 0 < usage.completion_tokens <= 16
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens is not None


def test_messages_streamed_and_not(
    engine: Engine, engine_gateway: Proc, claude: anthropic.Anthropic
) -> None:
    steer = engine.steer(reasoning_tokens=4, content_tokens=6)
    message = claude.messages.create(
        model=MODEL,
        max_tokens=16,
        messages=_user("Hi"),
        extra_body=steer,
    )
    assert message.stop_reason in {"end_turn", "max_tokens", "stop_sequence", "tool_use"}
    assert 0 < message.usage.output_tokens <= 16
    body = {"model": MODEL, "max_tokens": 16, "messages": _user("Hi"), "stream": True, **steer}
    raw = httpx.post(engine_gateway.url + "/v1/messages", json=body, timeout=120)
    assert raw.status_code == 200, raw.text
    folded = anthropic_events.check_stream(anthropic_events.parse_sse(raw.content))
    assert folded["stop_reason"] in anthropic_events.STOP_REASONS
    assert 0 < folded["usage"]["output_tokens"] <= 16


def test_responses_streamed_and_not(
    engine: Engine, engine_gateway: Proc, client: openai.OpenAI
) -> None:
    steer = engine.steer(reasoning_tokens=4, content_tokens=6)
    response = client.responses.create(
        model=MODEL, input="Hi", max_output_tokens=16, extra_body=steer
    )
    assert response.status in {"completed", "incomplete"}
    assert response.usage is not None
    assert 0 < response.usage.output_tokens <= 16
    body = {"model": MODEL, "input": "Hi", "max_output_tokens": 16, "stream": True, **steer}
    raw = httpx.post(engine_gateway.url + "/v1/responses", json=body, timeout=120)
    assert raw.status_code == 200, raw.text
    responses_events.check_stream(responses_events.parse_sse(raw.content))


# ------------------------------------------------------------- tools and reasoning on the wire


def test_a_conversation_with_tools_reasoning_and_results_is_served(
    engine: Engine, client: openai.OpenAI
) -> None:
    """Tools in the prompt, a past call with reasoning, its result: rendered and sent."""
    messages: list[Any] = [
        {"role": "system", "content": "You read files."},
        {"role": "user", "content": "Read a.py"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "The user wants a.py.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"path": "a.py", "lines": 1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "print('hi')"},
    ]
    request: Any = {
        "model": MODEL,
        "messages": messages,
        "tools": [READ_TOOL],
        "max_tokens": 12,
        "extra_body": engine.steer(content_tokens=4),
    }
    answer = client.chat.completions.create(**request)
    assert answer.choices[0].finish_reason in FINISHES
    chunks = [c for c in client.chat.completions.create(stream=True, **request) if c.choices]
    assert chunks[-1].choices[0].finish_reason in FINISHES


@pytest.mark.parametrize("stream", [False, True], ids=["collected", "streamed"])
def test_a_forced_tool_call_is_a_valid_call(
    engine: Engine, claude: anthropic.Anthropic, stream: bool
) -> None:
    """tool_choice any / a named tool with reasoning off: the engine's grammar (llguidance on
    the real server) makes the call, whatever the weights; the gateway parses it back."""
    for choice in ({"type": "tool", "name": "read"}, {"type": "any"}):
        kwargs: dict[str, Any] = {
            "model": MODEL,
            "max_tokens": 48,
            "messages": _user("Read a file."),
            "tools": [ANTHROPIC_READ_TOOL],
            "tool_choice": choice,
            "thinking": {"type": "disabled"},
        }
        if stream:
            with claude.messages.stream(**kwargs) as events:
                message = events.get_final_message()
        else:
            message = claude.messages.create(**kwargs)
        # The grammar may make more than one call: past max_tokens the answer was cut inside
        # a later one, and says so (a cut call is never presented as complete, #38).
        if message.stop_reason == "max_tokens":
            assert message.usage.output_tokens >= kwargs["max_tokens"] - 1, message
        else:
            assert message.stop_reason == "tool_use", message
        calls = [block for block in message.content if block.type == "tool_use"]
        assert [call.name for call in calls][:1] == ["read"]
        arguments = calls[0].input
        assert isinstance(arguments, dict)
        assert arguments.get("path") in {"a.py", "b.py"}
        assert arguments.get("lines") in {1, 2}
        # Nothing but the call and what the engine may add after it (no markup as text).
        texts = "".join(b.text for b in message.content if b.type == "text")
        assert "<tool_call>" not in texts
        assert "<|endoftext|>" not in texts


# ------------------------------------------------------------------------------- cache


def test_cached_tokens_on_a_repeated_prefix(engine: Engine, client: openai.OpenAI) -> None:
    """The same long prompt twice: the second is served from the engine's prefix cache, and
    the gateway reports what the engine reports (the hybrid model: a recurrent-state
    checkpoint at a chunk or track point; the dense model and the simulator: the radix tree)."""
    history = "A fairly long shared context paragraph about the session. " * 120
    messages: Any = _user(history)
    usages = []
    for _ in range(2):
        answer = client.chat.completions.create(
            model=MODEL,
            messages=messages,
            max_tokens=4,
            extra_body=engine.steer(content_tokens=2),
        )
        usages.append(answer.usage)
    second = usages[1]
    assert second is not None
    assert second.prompt_tokens_details is not None
    cached = second.prompt_tokens_details.cached_tokens or 0
    assert 0 < cached < second.prompt_tokens


def test_a_session_restores_its_checkpoint_turn_after_turn(
    engine: Engine, engine_gateway: Proc, client: openai.OpenAI
) -> None:
    """Three turns of one session: each later turn is served from the checkpoint the one
    before left (the hybrid model: the real MambaRadixCache's recurrent-state checkpoints,
    at 64-token prefill points and 256-token decode points), the gateway reports the
    engine's count, and its verification (cached >= the last prompt aligned down to the
    track interval) calls each of them a hit. Whether a turn also restored the later
    checkpoint its answer left depends on the random model's tokens (the next test), so that
    is only counted, never a miss."""
    headers = {"x-session-id": f"turns-{engine.kind}"}
    hits = metric_sum(engine_gateway, "flashbox_affinity_total", {"outcome": "hit"})
    misses = metric_sum(engine_gateway, "flashbox_affinity_total", {"outcome": "verified_miss"})
    outputs = metric_sum(engine_gateway, "flashbox_output_checkpoint_total")
    messages: list[Any] = _user("Here is the project we work on today. " * 60)
    seen: list[tuple[int, int]] = []
    for turn in range(3):
        answer = client.chat.completions.create(
            model=MODEL,
            messages=messages,
            max_tokens=24,
            extra_headers=headers,
            extra_body=engine.steer(reasoning_tokens=4, content_tokens=8),
        )
        usage = answer.usage
        assert usage is not None
        assert usage.prompt_tokens_details is not None
        seen.append((usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens or 0))
        message = answer.choices[0].message
        reasoning = getattr(message, "reasoning_content", None) or ""
        messages += [
            {
                "role": "assistant",
                "content": _replayable(message.content or ""),
                "reasoning_content": _replayable(reasoning),
            },
            {"role": "user", "content": f"Turn {turn + 2}: now the tests. " * 20},
        ]
    print(f"{engine.kind} (prompt_tokens, cached_tokens) per turn: {seen}")
    for prompt, cached in seen[1:]:
        assert 0 < cached < prompt
    assert seen[2][1] >= seen[1][1]
    assert metric_sum(engine_gateway, "flashbox_affinity_total", {"outcome": "hit"}) == hits + 2
    after = metric_sum(engine_gateway, "flashbox_affinity_total", {"outcome": "verified_miss"})
    assert after == misses
    assert metric_sum(engine_gateway, "flashbox_output_checkpoint_total") <= outputs + 2


def test_an_answers_checkpoint_is_restored_from_its_tokens_not_its_text(engine: Engine) -> None:
    """Why the gateway's output promise is counted apart from hits (docs/affinity.md,
    "Verification"): the engine checkpoints a finished turn's prompt and answer together, but
    a later prompt restores that checkpoint only if its tokens are the ones the engine sampled.
    The answer's text, tokenized again, need not give them back (a random model's answers
    almost never do), and then only the prompt's own checkpoint is restored."""
    if engine.is_sim:
        pytest.skip("the simulator keys checkpoints by the text's bytes (docs/simulator.md)")
    interval = int(engine.server_info.get("mamba_track_interval") or 1)

    def generate(ids: list[int], new_tokens: int) -> dict[str, Any]:
        params = {"max_new_tokens": new_tokens, "ignore_eos": True}
        body = {"input_ids": ids, "sampling_params": params}
        answer = httpx.post(engine.url + "/generate", json=body, timeout=120)
        assert answer.status_code == 200, answer.text
        result: dict[str, Any] = answer.json()
        return result

    def tokenize(text: str) -> list[int]:
        body = {"prompt": text, "add_special_tokens": False}
        answer = httpx.post(engine.url + "/tokenize", json=body, timeout=30)
        assert answer.status_code == 200, answer.text
        return [int(token) for token in answer.json()["tokens"]]

    words = tokenize(f"The {engine.kind} answer's own tokens, or its text again. " * 200)
    # A prompt that ends short of a track point and an answer that runs past it.
    point = 6 * max(interval, 256)
    prompt, new_tokens = words[: point - 26], 40
    first = generate(prompt, new_tokens)
    answer_ids = [int(token) for token in first["output_ids"]]
    assert len(answer_ids) == new_tokens
    sequence = (len(prompt) + new_tokens - 1) // interval * interval
    assert sequence >= point
    tail = tokenize(" The next question. " * 8)
    exact = generate(prompt + answer_ids + tail, 1)["meta_info"]["cached_tokens"]
    assert exact >= sequence
    again = tokenize(first["text"])
    same = 0
    for ours, theirs in zip(answer_ids, again, strict=False):
        if ours != theirs:
            break
        same += 1
    # Another tail: the first request's own checkpoints are off this one's path.
    other = tokenize(" Another question, asked differently. " * 8)
    cached = generate(prompt + again + other, 1)["meta_info"]["cached_tokens"]
    print(
        f"{engine.kind}: the answer's first {same} of {new_tokens} tokens come back; cached "
        f"{exact} with its tokens, {cached} with its text"
    )
    assert cached <= len(prompt) + same
    if same < point - len(prompt):
        assert cached < sequence


# ------------------------------------------------------------------------------- abort


def test_a_client_that_goes_away_stops_the_engine(engine: Engine, engine_gateway: Proc) -> None:
    before = engine.metric("sglang:generation_tokens_total")
    body = {
        "model": MODEL,
        "messages": _user("Talk for a long time."),
        "max_tokens": 6000,
        "stream": True,
        **engine.steer(content_tokens=6000),
    }
    with httpx.stream(
        "POST", engine_gateway.url + "/v1/chat/completions", json=body, timeout=120
    ) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        for _ in range(4):
            next(lines)
    # The gateway aborts the engine's request; nothing keeps running there.
    assert wait_for(lambda: engine.metric("sglang:num_running_reqs") == 0, timeout=60)
    generated = engine.metric("sglang:generation_tokens_total") - before
    assert generated < 6000


# ------------------------------------------------------------- warming and the head field


def test_the_warm_request_and_the_head_field_are_accepted(engine: Engine) -> None:
    """What the gateway's head warmer sends (max_new_tokens 0, the head field inside
    sampling_params.custom_params), straight to the engine: prefilled, nothing generated."""
    text = "[gMASK]<sop><|system|>You are a coding agent. " + "Tools and rules. " * 40
    body = warm_body(text, 96)
    with httpx.stream("POST", engine.url + "/generate", json=body, timeout=120) as response:
        assert response.status_code == 200
        events = [
            json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")
        ]
    assert events, "no event"
    assert "error" not in events[-1], events[-1]
    meta = events[-1]["meta_info"]
    assert meta["finish_reason"] == {"type": "length", "length": 0}
    assert meta["completion_tokens"] == 0
    assert meta["prompt_tokens"] > 96
    # A turn that declares the head (as a routed turn does), with output.
    turn = {
        "text": text + "<|user|>hi<|assistant|><think>",
        "sampling_params": {
            "max_new_tokens": 4,
            "custom_params": {HEAD_TOKENS_PARAM: 96},
        },
    }
    answer = httpx.post(engine.url + "/generate", json=turn, timeout=120)
    assert answer.status_code == 200, answer.text
    assert answer.json()["meta_info"]["completion_tokens"] >= 1


# -------------------------------------------------------------------------------- images


def _png_data_url() -> str:
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), (200, 30, 30)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def test_an_image_for_a_text_only_engine_is_a_400_before_the_engine(
    engine: Engine, engine_gateway: Proc
) -> None:
    url = _png_data_url()
    requests = {
        "/v1/chat/completions": {
            "model": MODEL,
            "max_tokens": 4,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {"type": "image_url", "image_url": {"url": url}},
                    ],
                }
            ],
        },
        "/v1/messages": {
            "model": MODEL,
            "max_tokens": 4,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/png",
                                "data": url.split(",", 1)[1],
                            },
                        },
                        {"type": "text", "text": "What is this?"},
                    ],
                }
            ],
        },
        "/v1/responses": {
            "model": MODEL,
            "max_output_tokens": 4,
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "What is this?"},
                        {"type": "input_image", "image_url": url},
                    ],
                }
            ],
        },
    }
    served = engine.metric("sglang:num_requests_total")
    for path, body in requests.items():
        answer = httpx.post(engine_gateway.url + path, json=body, timeout=120)
        if engine.accepts_images:
            assert answer.status_code == 200, answer.text
            continue
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert "text only" in error["message"]
        if path == "/v1/messages":
            assert answer.json()["type"] == "error"
            assert error["type"] == "invalid_request_error"
        else:
            assert error["code"] == "images_not_supported"
    if not engine.accepts_images:
        assert engine.metric("sglang:num_requests_total") == served


# ------------------------------------------------------------------ the engine's own 400s


def _error_shape(path: str, answer: httpx.Response) -> dict[str, Any]:
    """The face's own error envelope; returns its `error` object."""
    data = answer.json()
    if path == "/v1/messages":
        assert data["type"] == "error"
        assert data["error"]["type"] == "invalid_request_error"
    else:
        assert set(data["error"]) >= {"message", "type", "param", "code"}
        assert data["error"]["type"] == "invalid_request_error"
    error: dict[str, Any] = data["error"]
    return error


def _bodies(text: str, **extra: Any) -> dict[str, dict[str, Any]]:
    return {
        "/v1/chat/completions": {"model": MODEL, "messages": _user(text), **extra},
        "/v1/messages": {"model": MODEL, "max_tokens": 8, "messages": _user(text), **extra},
        "/v1/responses": {"model": MODEL, "input": text, **extra},
    }


@pytest.mark.parametrize("stream", [False, True], ids=["collected", "streamed"])
def test_the_engines_refusals_are_400s_in_each_faces_shape(
    engine: Engine, engine_gateway: Proc, stream: bool
) -> None:
    """A prompt longer than the context, an output that cannot fit after the prompt (the real
    engine refuses it in the stream, which was relayed as a 502 inside a 200 stream), and
    top_k 0 (now the faces' own 400: sglang-kt keeps every request it refuses)."""
    too_long = "word " * (engine.context_length + 100)
    cases: list[tuple[str, dict[str, dict[str, Any]]]] = []
    if len(too_long) < 150_000:  # the suites' gateway takes bodies up to 200 kB
        cases.append(("context", _bodies(too_long)))
    # Only chat completions takes a max_tokens past the context as asked (the Anthropic and
    # Responses faces lower it to what fits).
    past = _bodies("hi", max_tokens=engine.context_length)["/v1/chat/completions"]
    cases.append(("output", {"/v1/chat/completions": past}))
    # The Responses API has no top_k.
    refused = {k: v for k, v in _bodies("hi", top_k=0).items() if k != "/v1/responses"}
    cases.append(("top_k", refused))
    for name, bodies in cases:
        for path, body in bodies.items():
            answer = httpx.post(
                engine_gateway.url + path, json={**body, "stream": stream}, timeout=120
            )
            assert answer.status_code == 400, (name, path, answer.text)
            error = _error_shape(path, answer)
            assert error["message"], (name, path)
            if name == "top_k":
                assert "top_k" in error["message"]
    # More refusals than the breaker's threshold, and the replica is still trusted: its breaker
    # stayed closed and the next request is served at once (#33: a client's mistakes never
    # count against the engine).
    exported = httpx.get(engine_gateway.url + "/metrics", timeout=5).text
    assert "flashbox_replica_breaker_open{" in exported
    assert metric_sum(engine_gateway, "flashbox_replica_breaker_open") == 0
    ok = httpx.post(
        engine_gateway.url + "/v1/chat/completions",
        json={"model": MODEL, "messages": _user("hi"), "max_tokens": 4},
        timeout=120,
    )
    assert ok.status_code == 200, ok.text


# ------------------------------------------------- nothing the gateway sends is refused


def test_every_field_the_faces_map_reaches_the_engine_and_is_accepted(
    engine: Engine, engine_gateway: Proc, client: openai.OpenAI, claude: anthropic.Anthropic
) -> None:
    """Each face's sampling fields at once: the /generate body they become is one the engine
    takes (an unknown sampling key is a 500 that leaks its request on sglang-kt)."""
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
    }
    chat_fields: Any = {
        "max_tokens": 8,
        "temperature": 0.7,
        "top_p": 0.9,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.25,
        "seed": 7,
        "stop": ["zzz"],
        "reasoning_effort": "low",
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "a", "schema": schema},
        },
        "extra_body": {"top_k": 5, "min_p": 0.05, "repetition_penalty": 1.1, **engine.steer()},
    }
    chat = client.chat.completions.create(
        model=MODEL, messages=_user("Answer in JSON."), **chat_fields
    )
    assert chat.choices[0].finish_reason in FINISHES
    messages_fields: Any = {
        "stop_sequences": ["zzz"],
        "system": "Be brief.",
        "metadata": {"user_id": "u-1"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        # This SDK no longer takes them as arguments; the API still does.
        "extra_body": {"temperature": 0.5, "top_k": 5, "top_p": 0.9, **engine.steer()},
    }
    message = claude.messages.create(
        model=MODEL, max_tokens=8, messages=_user("Hi"), **messages_fields
    )
    assert message.stop_reason is not None
    responses_fields: Any = {
        "max_output_tokens": 8,
        "temperature": 0.5,
        "top_p": 0.9,
        "reasoning": {"effort": "high"},
        "text": {"format": {"type": "json_schema", "name": "a", "schema": schema}},
        "extra_body": engine.steer(),
    }
    response = client.responses.create(model=MODEL, input="Hi", **responses_fields)
    assert response.status in {"completed", "incomplete"}


# --------------------------------------------------- health, readiness, restart mid-session


def test_readiness_follows_the_engine_through_start_and_restart(engine: Engine) -> None:
    """A gateway started before its engine is live and not ready; ready once the engine is
    up; a session's turn during a restart fails in the face's shape (503), and the session
    goes on once the engine is back."""
    port = free_port()
    gateway = start_gateway([f"http://127.0.0.1:{port}"], env=engine_gateway_env(engine))
    own: Engine | None = None
    try:
        assert httpx.get(gateway.url + "/health", timeout=5).status_code == 200
        assert httpx.get(gateway.url + "/ready", timeout=5).status_code == 503
        own = start_engine(engine.kind, port=port)
        assert wait_for(
            lambda: httpx.get(gateway.url + "/ready", timeout=5).status_code == 200, timeout=30
        )
        headers = {"x-session-id": "restart-session"}
        messages: list[Any] = _user("First turn.")
        with client_for(gateway) as c:
            first = c.chat.completions.create(
                model=MODEL, messages=messages, max_tokens=4, extra_headers=headers
            )
            assert first.choices[0].finish_reason in FINISHES
            own.proc.stop()
            down = httpx.post(
                gateway.url + "/v1/chat/completions",
                json={"model": MODEL, "messages": messages, "max_tokens": 4},
                headers=headers,
                timeout=60,
            )
            assert down.status_code == 503, down.text
            assert down.json()["error"]["message"]
            started = time.monotonic()
            own = start_engine(engine.kind, port=port)
            assert wait_for(
                lambda: httpx.get(gateway.url + "/ready", timeout=5).status_code == 200,
                timeout=30,
            ), f"not ready {time.monotonic() - started:.0f}s after the engine came back"
            messages += [
                {
                    "role": "assistant",
                    "content": _replayable(first.choices[0].message.content or ""),
                },
                {"role": "user", "content": "Second turn."},
            ]
            second = c.chat.completions.create(
                model=MODEL, messages=messages, max_tokens=4, extra_headers=headers
            )
            assert second.choices[0].finish_reason in FINISHES
    finally:
        gateway.stop()
        if own is not None:
            own.proc.stop()


def test_a_stop_signal_ends_the_engine_after_it_refused_requests(engine: Engine) -> None:
    """`docker compose stop` sends SIGTERM to the engine's process. sglang-kt keeps the state of
    every request it refused and, unless forced, waits for them forever; the launcher forces
    it (SGL_FORCE_SHUTDOWN, the spelling sglang-kt reads)."""
    own = start_engine(engine.kind)
    try:
        too_long = {"text": "hello " * (own.context_length + 10), "sampling_params": {}}
        for stream in (False, True):
            refused = httpx.post(own.url + "/generate", json={**too_long, "stream": stream})
            assert refused.status_code in {200, 400}, refused.text
            assert "error" in refused.text
        started = time.monotonic()
        own.proc.popen.send_signal(signal.SIGTERM)  # the server process only, as Docker does
        try:
            own.proc.popen.wait(90)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the engine ignored SIGTERM for 90 s:\n{own.proc.log()[-3000:]}")
        assert time.monotonic() - started < 90
    finally:
        own.proc.stop()


# ------------------------------------------------------- one client cannot hurt another (#33)


def _running_slots(engine: Engine) -> int:
    info = httpx.get(engine.url + "/server_info", timeout=10).json()
    slots = info.get("max_running_requests")
    assert isinstance(slots, int), info
    assert slots > 0, info
    return slots


def test_requests_beyond_the_engines_slots_wait_in_the_gateway_and_are_all_served(
    engine: Engine, engine_gateway: Proc
) -> None:
    """More streams at once than the engine runs: the gateway holds the rest in its fair queue
    (their headers go out at once) and sends each as a slot frees; every one is answered."""
    if engine.is_sim:
        pytest.skip("over the simulator: tests/e2e/test_fairness.py, where the pace is set")
    slots = _running_slots(engine)
    shares = metric_sum(engine_gateway, "flashbox_fair_share_slots")
    assert shares == slots  # learned from the engine's /server_info
    waited = metric_sum(engine_gateway, "flashbox_fair_queue_wait_seconds_count")
    results: list[tuple[int, str | None]] = []
    lock = threading.Lock()
    # Three requests a slot, all sent at once: the random models end many answers within a
    # second (the dense one often after a few tokens), so fewer might never overlap.
    count = 3 * slots
    start = threading.Barrier(count)

    def stream(index: int) -> None:
        body = {"model": MODEL, "messages": _user(f"count {index}"), "max_tokens": 48}
        finish = None
        start.wait(timeout=60)
        with httpx.stream(
            "POST",
            engine_gateway.url + "/v1/chat/completions",
            json={**body, "stream": True},
            timeout=300,
        ) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    for choice in json.loads(line[len("data: ") :]).get("choices", ()):
                        finish = choice.get("finish_reason") or finish
            with lock:
                results.append((response.status_code, finish))

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert len(results) == count
    assert all(code == 200 and finish in FINISHES for code, finish in results), results
    assert metric_sum(engine_gateway, "flashbox_fair_queue_wait_seconds_count") > waited
    assert metric_sum(engine_gateway, "flashbox_fair_queue_waiting") == 0


@pytest.fixture
def roomy_gateway(engine: Engine) -> Iterator[Proc]:
    """A gateway that takes max_tokens past the simulator's context too, so an output that
    cannot fit is refused by the engine rather than by the face."""
    env = engine_gateway_env(engine, FLASHBOX_LIMITS__MAX_TOKENS=str(2 * engine.context_length))
    proc = start_gateway([engine.url], env=env)
    try:
        yield proc
    finally:
        proc.stop()


def test_a_refusal_after_the_headers_is_the_clients_and_the_replica_stays_trusted(
    engine: Engine, roomy_gateway: Proc
) -> None:
    """Every running slot is held by a long answer and more wait, so the next streams wait in
    the gateway's fair queue and get their headers at once. Each asks for an output that
    cannot fit after its prompt, which the engine refuses once it is sent: inside the stream,
    as the face's error event. More of them than the breaker's threshold leave the replica
    trusted."""
    slots = _running_slots(engine)
    url = roomy_gateway.url + "/v1/chat/completions"
    hold = {
        "model": MODEL,
        "messages": _user("Talk for a long time."),
        "max_tokens": min(6000, engine.context_length // 2),
        "stream": True,
        **engine.steer(fault="stall_first"),
    }
    past = {
        "model": MODEL,
        "messages": _user("hi"),
        "max_tokens": engine.context_length,
        "stream": True,
    }
    refused: list[httpx.Response] = []

    def refusal() -> None:
        refused.append(httpx.post(url, json=past, timeout=300))

    # Three holders a slot: the real engine's random model ends some answers early, and the
    # holders that wait keep the queue non-empty, so the refusals wait behind them.
    limits = httpx.Limits(max_connections=None)
    with (
        httpx.Client(timeout=300, limits=limits) as client,
        contextlib.ExitStack() as holders,
    ):
        for _ in range(3 * slots):
            response = holders.enter_context(client.stream("POST", url, json=hold))
            assert response.status_code == 200
        waiting = [threading.Thread(target=refusal) for _ in range(6)]
        for thread in waiting:
            thread.start()
        # Over the simulator every refusal waits behind the holders that found no slot (3 a
        # slot, one runs): counting only 6 waiters, a loaded box let the holders go before
        # the refusals came. The real engine ends some holders early, so there only 6.
        queued = 2 * slots + 6 if engine.is_sim else 6
        assert wait_for(lambda: metric_sum(roomy_gateway, "flashbox_fair_queue_waiting") >= queued)
    # The holders left (their generations are aborted): the refusals go, one slot at a time.
    for thread in waiting:
        thread.join(timeout=300)
    assert len(refused) == 6
    # A refusal that found a slot free is refused before its answer starts: the face's 400, as
    # before. The simulator holds its slots until the holders leave, so there every refusal
    # waited; the real engine's random models end many answers within a second or two (the
    # dense one nearly all), so there some may find a slot free.
    late = [answer for answer in refused if answer.status_code == 200]
    assert all(answer.status_code in (200, 400) for answer in refused)
    if engine.is_sim:
        assert len(late) == 6, [answer.text for answer in refused]
    for answer in late:
        assert '"error"' in answer.text, answer.text  # the answer started while it waited
        assert "context" in answer.text, answer.text
    assert metric_sum(roomy_gateway, "flashbox_replica_breaker_open") == 0
    ok = httpx.post(
        url, json={"model": MODEL, "messages": _user("hi"), "max_tokens": 4}, timeout=120
    )
    assert ok.status_code == 200, ok.text
