"""The relay's Finish (why generation stopped, apart from tool calls) and the prompt count it
hands a face's opening events (gateway/core/relay.py), with the real GLM parser and the
Anthropic face's encoder; the engine is a list of /generate events."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.core.answer import Finish
from gateway.core.reasoning_codec import ReasoningCodec
from gateway.core.relay import Relay
from gateway.faces.anthropic.encode import MessagesAnswer
from gateway.observability.metrics import Metrics
from gateway.observability.timeline import RequestRecord
from gateway.parsers.glm import GlmParserFactory
from gateway.stream.text_diff import TextDiffer
from gateway.upstream.stream import EngineEvent
from tests.support.anthropic_events import check_stream, parse_sse

TOOLS = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]


class Events:
    """An engine that already answered: its events, in order."""

    def __init__(self, events: list[EngineEvent]) -> None:
        self._events = events
        self.closed = False

    async def events(self) -> AsyncIterator[EngineEvent]:
        for event in self._events:
            yield event

    async def aclose(self) -> None:
        self.closed = True


def engine(texts: list[str], finish: dict[str, Any], *, counts: bool = True) -> Events:
    """Incremental events; `counts`: whether meta_info carries the token counts."""
    events = []
    for i, text in enumerate(texts):
        meta: dict[str, Any] = {"finish_reason": finish if i == len(texts) - 1 else None}
        if counts:
            meta |= {"prompt_tokens": 120, "completion_tokens": i + 1, "cached_tokens": 64}
        events.append(EngineEvent(text, meta))
    return Events(events)


def relay(source: Events, *, prompt_tokens: int | None = None) -> Relay:
    parser = GlmParserFactory()(tools=TOOLS, tool_choice="auto", starts_in_reasoning=True)
    record = RequestRecord(
        metrics=Metrics(process_metrics=False), model="m", arrival=time.perf_counter()
    )
    return Relay(
        engine=source,
        parser=parser,
        differ=TextDiffer(incremental=True),
        record=record,
        prompt_tokens=prompt_tokens,
    )


def messages() -> MessagesAnswer:
    codec = ReasoningCodec(b"k", max_age_s=60, max_text_bytes=1 << 16, clock=time.time)
    return MessagesAnswer("r1", "claude", codec, (), {})


async def streamed(source: Events, *, prompt_tokens: int | None = None) -> bytes:
    sent: list[bytes] = []

    async def send(data: bytes, *, last: bool = False) -> None:
        sent.append(data)

    await relay(source, prompt_tokens=prompt_tokens).stream(
        send, encoder=messages().stream_encoder()
    )
    return b"".join(sent)


CALL = ["plan</think>", "<tool_call>run<arg_key>cmd</arg_key>", "<arg_value>ls</arg_value>"]


@pytest.mark.parametrize(
    ("texts", "finish", "reason", "made_tool_calls"),
    [
        (["a</think>", "hi"], {"type": "stop", "matched": 1}, "stop", False),
        (["a</think>", "hi"], {"type": "length", "length": 2}, "length", False),
        ([*CALL, "</tool_call>"], {"type": "stop", "matched": 2}, "stop", True),
        # Cut inside the call: it was made, and generation stopped at the length.
        (CALL, {"type": "length", "length": 3}, "length", True),
    ],
    ids=["stop", "length", "tool-call", "cut-tool-call"],
)
async def test_finish_says_why_it_stopped_apart_from_tool_calls(
    texts: list[str], finish: dict[str, Any], reason: str, made_tool_calls: bool
) -> None:
    end = await relay(engine(texts, finish)).collect(messages().collector())
    assert isinstance(end, Finish)
    assert end.reason == reason
    assert end.made_tool_calls is made_tool_calls


async def test_message_start_carries_the_known_prompt_count() -> None:
    raw = await streamed(
        engine(["a</think>", "hi"], {"type": "stop", "matched": 1}), prompt_tokens=120
    )
    events = parse_sse(raw)
    start = events[0].data["message"]["usage"]
    # Cached tokens are known only with the engine's first event: the whole prompt is input.
    assert start == {
        "input_tokens": 120,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 0,
    }
    (delta,) = [e.data for e in events if e.name == "message_delta"]
    # The engine's split, which overwrites message_start's: the three add up to the prompt.
    assert delta["usage"]["input_tokens"] == 120 - 64
    assert delta["usage"]["cache_read_input_tokens"] == 64
    assert delta["usage"]["cache_creation_input_tokens"] == 0
    assert check_stream(events)["usage"]["input_tokens"] == 56


async def test_without_engine_counts_message_delta_never_says_zero_input() -> None:
    raw = await streamed(
        engine(["a</think>", "hi"], {"type": "stop", "matched": 1}, counts=False),
        prompt_tokens=120,
    )
    events = parse_sse(raw)
    (delta,) = [e.data for e in events if e.name == "message_delta"]
    # Absent, so message_start's count stands (the SDK and Claude Code keep it).
    assert "input_tokens" not in delta["usage"]
    assert "cache_read_input_tokens" not in delta["usage"]
    assert check_stream(events)["usage"]["input_tokens"] == 120


async def test_an_unknown_prompt_count_keeps_message_start_at_zero() -> None:
    raw = await streamed(engine(["a</think>", "hi"], {"type": "stop", "matched": 1}))
    events = parse_sse(raw)
    assert events[0].data["message"]["usage"]["input_tokens"] == 0
    (delta,) = [e.data for e in events if e.name == "message_delta"]
    assert delta["usage"]["input_tokens"] == 56
