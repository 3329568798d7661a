"""The Anthropic face's encoders fed with parser deltas: the SSE grammar, the one-shot body, and
that both build the same blocks (gateway/faces/anthropic/encode.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.answer import Finish, Usage
from gateway.core.reasoning_codec import ReasoningCodec
from gateway.errors import (
    AuthenticationError,
    GatewayError,
    InvalidRequestError,
    NoReplicaError,
    NotFoundError,
    UpstreamError,
    UpstreamStreamError,
    UpstreamTimeoutError,
)
from gateway.faces.anthropic import errors
from gateway.faces.anthropic.encode import MessageCollector, MessageStream, stop_reason
from gateway.parsers.base import (
    ContentDelta,
    ParsedDelta,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallStart,
)
from gateway.parsers.registry import get_parser_factory
from tests.gateway.parsers.strategies import well_formed_output
from tests.gateway.parsers.support import TOOLS, make_parser, render_call, split_at
from tests.support.anthropic_events import check_stream, parse_sse

NOW = 1_700_000_000.0
Batches = Sequence[list[ParsedDelta]]


def make_codec() -> ReasoningCodec:
    return ReasoningCodec(b"test-key", max_age_s=3600, max_text_bytes=1 << 20, clock=lambda: NOW)


CODEC = make_codec()


def finish(
    reason: Any = "stop",
    matched: str | None = None,
    *,
    prompt: int = 100,
    completion: int = 20,
    cached: int = 30,
) -> Finish:
    # As the relay makes it: "tool_calls" here is a stop after calls, "length" max_new_tokens.
    stopped: Literal["stop", "length"] = "length" if reason == "length" else "stop"
    usage = Usage(prompt, completion, cached)
    return Finish(stopped, matched, usage, made_tool_calls=reason == "tool_calls")


def stream_bytes(batches: Batches, end: Finish, stops: tuple[str, ...] = ()) -> bytes:
    encoder = MessageStream("msg_test", "claude-test", CODEC, stops)
    return encoder.start() + b"".join(encoder.deltas(b) for b in batches) + encoder.finish(end)


def streamed(batches: Batches, end: Finish, stops: tuple[str, ...] = ()) -> dict[str, Any]:
    return check_stream(parse_sse(stream_bytes(batches, end, stops)))


def collected(batches: Batches, end: Finish, stops: tuple[str, ...] = ()) -> dict[str, Any]:
    collector = MessageCollector("msg_test", "claude-test", CODEC, stops)
    for batch in batches:
        collector.add(batch)
    # json, as clients parse it: orjson would turn integers past 64 bits into floats.
    body: dict[str, Any] = json.loads(collector.body(end))
    return body


def both(batches: Batches, end: Finish, stops: tuple[str, ...] = ()) -> dict[str, Any]:
    """The streamed message (grammar checked) and the collected one must be the same."""
    stream, body = streamed(batches, end, stops), collected(batches, end, stops)
    assert body["content"] == stream["content"]
    for key in ("id", "type", "role", "model", "stop_reason", "stop_sequence", "usage"):
        assert body[key] == stream[key], key
    return body


def kinds(message: dict[str, Any]) -> list[str]:
    return [block["type"] for block in message["content"]]


R, C = ReasoningDelta, ContentDelta


def call(index: int, name: str = "get_weather") -> ToolCallStart:
    return ToolCallStart(index, f"call_{index}abc", name)


def args(index: int, fragment: str) -> ToolCallArgumentsDelta:
    return ToolCallArgumentsDelta(index, fragment)


# -- the event sequence -------------------------------------------------------------------------


def test_thinking_then_text_event_by_event() -> None:
    raw = stream_bytes([[R("Let me")], [R(" think.")], [C("Hel")], [C("lo")]], finish())
    events = parse_sse(raw)
    assert [(e.name, e.data.get("index"), e.data.get("delta", {}).get("type")) for e in events] == [
        ("message_start", None, None),
        ("content_block_start", 0, None),
        ("content_block_delta", 0, "thinking_delta"),
        ("content_block_delta", 0, "thinking_delta"),
        ("content_block_delta", 0, "signature_delta"),
        ("content_block_stop", 0, None),
        ("content_block_start", 1, None),
        ("content_block_delta", 1, "text_delta"),
        ("content_block_delta", 1, "text_delta"),
        ("content_block_stop", 1, None),
        ("message_delta", None, None),
        ("message_stop", None, None),
    ]
    start = events[0].data["message"]
    assert start["id"] == "msg_test"
    assert start["model"] == "claude-test"
    message = check_stream(events)
    assert message["content"][0]["thinking"] == "Let me think."
    assert message["content"][1] == {"type": "text", "text": "Hello"}
    assert message["stop_reason"] == "end_turn"


def test_each_thinking_block_is_signed_with_its_own_reasoning() -> None:
    batches: list[list[ParsedDelta]] = [
        [R("first")],
        [C("text")],
        [R("second"), R(" part")],
        [C("more")],
    ]
    message = both(batches, finish())
    assert kinds(message) == ["thinking", "text", "thinking", "text"]
    first, second = message["content"][0], message["content"][2]
    assert CODEC.decode(first["signature"]) == "first"
    assert CODEC.decode(second["signature"]) == "second part"


def test_a_thinking_block_closes_before_a_tool_use_block() -> None:
    batches: list[list[ParsedDelta]] = [[R("plan")], [call(0), args(0, '{"city": "Paris"}')]]
    events = parse_sse(stream_bytes(batches, finish("tool_calls")))
    names = [e.data.get("delta", {}).get("type", e.name) for e in events]
    signature = names.index("signature_delta")
    assert names[signature + 1] == "content_block_stop"
    assert names[signature + 2] == "content_block_start"
    message = both(batches, finish("tool_calls"))
    assert kinds(message) == ["thinking", "tool_use"]
    assert message["content"][1]["input"] == {"city": "Paris"}
    assert message["content"][1]["id"] == "toolu_0abc"
    assert message["stop_reason"] == "tool_use"


def test_deltas_of_one_batch_become_whole_blocks_in_order() -> None:
    batch: list[ParsedDelta] = [
        R("a"),
        C("b"),
        call(0),
        args(0, '{"city": '),
        args(0, '"x"}'),
        call(1, "ping"),
        args(1, "{}"),
        C("after"),
    ]
    message = both([batch], finish("tool_calls"))
    assert kinds(message) == ["thinking", "text", "tool_use", "tool_use", "text"]
    assert [b.get("input") for b in message["content"]] == [None, None, {"city": "x"}, {}, None]
    events = parse_sse(stream_bytes([batch], finish("tool_calls")))
    # Fragments of one batch go out as one input_json_delta.
    fragments = [
        e.data["delta"]["partial_json"]
        for e in events
        if e.data.get("delta", {}).get("type") == "input_json_delta"
    ]
    assert fragments == ['{"city": "x"}', "{}"]


def test_display_omitted_sends_the_signature_alone() -> None:
    batches: list[list[ParsedDelta]] = [[R("secret")], [R(" plan")], [C("answer")]]
    encoder = MessageStream("msg_test", "m", CODEC, (), show_thinking=False)
    raw = encoder.start() + b"".join(encoder.deltas(b) for b in batches)
    events = parse_sse(raw + encoder.finish(finish()))
    assert b"thinking_delta" not in raw
    message = check_stream(events)
    thinking = message["content"][0]
    assert thinking["thinking"] == ""
    assert CODEC.decode(thinking["signature"]) == "secret plan"
    collector = MessageCollector("msg_test", "m", CODEC, (), show_thinking=False)
    for batch in batches:
        collector.add(batch)
    body = json.loads(collector.body(finish()))
    assert body["content"] == message["content"]


# -- no empty blocks ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "batches",
    [
        [[R("r")], [C("\n\n")], [call(0), args(0, "{}")]],
        [[R("r")], [C("  ")], [C("\n")]],
        [[C("")], [C(" ")], [R("r")]],
        [[R("")], [C("")], [C("\t")]],
    ],
    ids=["before-a-call", "at-the-end", "before-reasoning", "empty-deltas"],
)
def test_whitespace_only_or_empty_text_never_becomes_a_block(batches: Batches) -> None:
    message = both(batches, finish())
    assert "text" not in kinds(message)


def test_leading_whitespace_is_kept_once_visible_text_follows() -> None:
    message = both([[R("r")], [C("\n\n")], [C("Hi")], [C(" there\n")]], finish())
    assert message["content"][1] == {"type": "text", "text": "\n\nHi there\n"}


def test_whitespace_held_before_another_block_is_not_moved_past_it() -> None:
    # Whitespace-only text that a tool call interrupts is dropped, not prepended to the
    # text after the call (that would reorder the answer).
    batches: list[list[ParsedDelta]] = [[C("\n\n")], [call(0), args(0, "{}")], [C("Done")]]
    message = both(batches, finish("tool_calls"))
    assert kinds(message) == ["tool_use", "text"]
    assert message["content"][1]["text"] == "Done"


def test_empty_reasoning_and_argument_deltas_are_dropped() -> None:
    batches: list[list[ParsedDelta]] = [
        [R("")],
        [C("x")],
        [call(0), args(0, ""), args(0, "{}"), args(0, "")],
    ]
    message = both(batches, finish("tool_calls"))
    assert kinds(message) == ["text", "tool_use"]
    raw = stream_bytes(batches, finish("tool_calls"))
    assert b'"partial_json":""' not in raw
    assert b'"thinking":""}' not in raw.replace(b'"thinking":"","signature":""}', b"")


def test_an_empty_answer_has_no_blocks() -> None:
    message = both([], finish())
    assert message["content"] == []
    assert message["stop_reason"] == "end_turn"


# -- stop_reason ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("batches", "end", "stops", "expected"),
    [
        ([[C("x")]], finish("stop"), (), ("end_turn", None)),
        ([[C("x")]], finish("length"), (), ("max_tokens", None)),
        ([[C("x")]], finish("stop", "END"), ("END",), ("stop_sequence", "END")),
        # The model's own stop strings are not the client's: a plain end of turn.
        ([[C("x")]], finish("stop", "<|user|>"), ("END",), ("end_turn", None)),
        ([[C("x")]], finish("stop", "<|observation|>"), (), ("end_turn", None)),
        ([[call(0), args(0, "{}")]], finish("tool_calls"), (), ("tool_use", None)),
        # Cut by max_tokens with a tool_use block: max_tokens (the call may be unfinished).
        ([[call(0), args(0, "{}")]], finish("length"), (), ("max_tokens", None)),
        ([[call(0), args(0, "{}")]], finish("stop", "END"), ("END",), ("tool_use", None)),
        # No tool_use block: never tool_use.
        ([[C("x")]], finish("tool_calls"), (), ("end_turn", None)),
    ],
)
def test_stop_reason(
    batches: Batches, end: Finish, stops: tuple[str, ...], expected: tuple[str, str | None]
) -> None:
    message = both(batches, end, stops)
    assert (message["stop_reason"], message["stop_sequence"]) == expected


def test_stop_reason_function_directly() -> None:
    assert stop_reason(finish("length"), False, ()) == ("max_tokens", None)
    assert stop_reason(finish("stop", "x"), False, ("x", "y")) == ("stop_sequence", "x")
    assert stop_reason(finish("stop", "z"), False, ("x", "y")) == ("end_turn", None)
    assert stop_reason(finish("length"), True, ()) == ("max_tokens", None)


# -- usage ----------------------------------------------------------------------------------------


def test_usage_splits_the_prompt_into_uncached_and_cache_read() -> None:
    message = both([[C("x")]], finish(prompt=1000, completion=7, cached=768))
    assert message["usage"] == {
        "input_tokens": 232,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 768,
        "output_tokens": 7,
        "output_tokens_details": {"thinking_tokens": 0},
    }
    usage = message["usage"]
    total = (
        usage["input_tokens"]
        + usage["cache_read_input_tokens"]
        + usage["cache_creation_input_tokens"]
    )
    assert total == 1000


def test_message_delta_carries_the_authoritative_usage() -> None:
    events = parse_sse(stream_bytes([[C("x")]], finish(prompt=50, completion=3, cached=0)))
    (delta,) = [e for e in events if e.name == "message_delta"]
    assert delta.data["usage"] == {
        "input_tokens": 50,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 3,
        "output_tokens_details": {"thinking_tokens": 0},
    }


# -- tool arguments through the real GLM parser ---------------------------------------------------

EDIT = {
    "type": "function",
    "function": {
        "name": "edit",
        "parameters": {
            "type": "object",
            "properties": {
                "text": {"type": "string"},
                "config": {"type": "object"},
                "count": {"type": "integer"},
                "ratio": {"type": "number"},
                "flag": {"type": "boolean"},
                "maybe": {"type": ["integer", "null"]},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
        },
    },
}
PING = {"type": "function", "function": {"name": "ping"}}
HARD_TOOLS = [EDIT, PING]

HARD_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("edit", {"text": "São Paulo 東京 🎉 naïve"}),
    ("edit", {"text": 'say "hi" \\ C:\\dir\\file \\n (literal) \\"'}),
    ("edit", {"text": "line one\nline two\r\n\ttabbed\n"}),
    ("edit", {"text": '{"looks": "like JSON", "n": [1, 2]}'}),
    ("edit", {"config": {"a": [1, {"b": None, "c": 'é"q\\'}], "d": {"e": {}}}, "count": -3}),
    ("edit", {"ratio": 2.5, "flag": False, "maybe": None, "tags": ["x", 'y"z', "</a>"]}),
    ("edit", {"text": "", "config": {}}),
    ("edit", {"text": " padded "}),
    ("ping", {}),
]


def glm_deltas_char_by_char(text: str) -> list[list[ParsedDelta]]:
    parser = get_parser_factory("glm47")(
        tools=HARD_TOOLS, tool_choice="auto", starts_in_reasoning=True
    )
    batches = [parser.feed(char) for char in text]
    batches.append(parser.finish())
    return [batch for batch in batches if batch]


@pytest.mark.parametrize(("name", "arguments"), HARD_CALLS, ids=[str(i) for i in range(9)])
def test_hard_arguments_stream_as_json_prefixes_and_add_up(
    name: str, arguments: dict[str, Any]
) -> None:
    text = "I will call it.</think>" + render_call(name, arguments)
    batches = glm_deltas_char_by_char(text)
    # check_stream parses every prefix of the input_json_delta fragments as the SDK does.
    message = both(batches, finish("tool_calls"))
    assert kinds(message) == ["thinking", "tool_use"]
    tool = message["content"][1]
    assert tool["name"] == name
    assert json.dumps(tool["input"], sort_keys=True) == json.dumps(arguments, sort_keys=True)
    assert message["stop_reason"] == "tool_use"


def test_several_hard_calls_in_one_answer_and_in_one_batch() -> None:
    text = "plan</think>Calling now." + "".join(render_call(n, a) for n, a in HARD_CALLS)
    per_char = both(glm_deltas_char_by_char(text), finish("tool_calls"))
    parser = get_parser_factory("glm47")(
        tools=HARD_TOOLS, tool_choice="auto", starts_in_reasoning=True
    )
    one_batch = both([parser.feed(text) + parser.finish()], finish("tool_calls"))
    for message in (per_char, one_batch):
        assert kinds(message) == ["thinking", "text"] + ["tool_use"] * len(HARD_CALLS)
        inputs = [b["input"] for b in message["content"][2:]]
        assert inputs == [arguments for _, arguments in HARD_CALLS]
        ids = [b["id"] for b in message["content"][2:]]
        assert len(set(ids)) == len(ids)


def test_integers_past_64_bits_come_out_as_the_model_wrote_them() -> None:
    # The one-shot body sends the arguments as written, like the stream: a re-encode would
    # turn them into floats (and the replayed turn would render differently).
    big = '{"count": -9223372036854775809, "n": 18446744073709551616, "f": 1.50}'
    message = both([[call(0, "typed"), args(0, big)]], finish("tool_calls"))
    assert message["content"][0]["input"] == {
        "count": -9223372036854775809,
        "n": 18446744073709551616,
        "f": 1.5,
    }


# -- stream and collector agree on any output, however it is split --------------------------------


def expected_blocks(batches: Batches) -> list[tuple[str, Any]]:
    """An oracle of the block rules: runs of one kind, one block per call, empty deltas and
    whitespace-only text runs left out (not moved into a later block)."""
    runs: list[list[Any]] = []
    for batch in batches:
        for delta in batch:
            if isinstance(delta, ReasoningDelta | ContentDelta) and not delta.text:
                continue
            if isinstance(delta, ToolCallArgumentsDelta):
                if delta.fragment:
                    runs[-1][1] += delta.fragment
                continue
            if isinstance(delta, ToolCallStart):
                runs.append(["tool_use", "", delta.name])
                continue
            kind = "thinking" if isinstance(delta, ReasoningDelta) else "text"
            if runs and runs[-1][0] == kind:
                runs[-1][1] += delta.text
            else:
                runs.append([kind, delta.text])
    blocks: list[tuple[str, Any]] = []
    for run in runs:
        if run[0] == "text" and not run[1].strip():
            continue
        if run[0] == "thinking" and blocks and blocks[-1][0] == "thinking":
            # Only invisible text came between: the thinking block never closed.
            blocks[-1] = ("thinking", blocks[-1][1] + run[1])
        elif run[0] == "tool_use":
            blocks.append(("tool_use", (run[2], json.loads(run[1] or "{}"))))
        else:
            blocks.append((run[0], run[1]))
    return blocks


def actual_blocks(message: dict[str, Any]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for block in message["content"]:
        if block["type"] == "thinking":
            assert CODEC.decode(block["signature"]) == block["thinking"]
            out.append(("thinking", block["thinking"]))
        elif block["type"] == "text":
            out.append(("text", block["text"]))
        else:
            out.append(("tool_use", (block["name"], block["input"])))
    return out


@settings(max_examples=150, deadline=None)
@given(output=well_formed_output(), data=st.data())
def test_any_glm_output_any_split(output: Any, data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(output.text)), max_size=12))
    parser = make_parser(TOOLS, "auto")
    batches = [parser.feed(chunk) for chunk in split_at(output.text, cuts)]
    batches.append(parser.finish())
    end = finish("tool_calls" if parser.made_tool_calls else "stop")
    message = both(batches, end)
    assert actual_blocks(message) == expected_blocks(batches)
    assert [(n, json.dumps(a, sort_keys=True)) for n, a in output.calls] == [
        (b["name"], json.dumps(b["input"], sort_keys=True))
        for b in message["content"]
        if b["type"] == "tool_use"
    ]


# -- errors ---------------------------------------------------------------------------------------


def _status_error(status: int) -> GatewayError:
    error = UpstreamError("x")
    error.status_code = status
    return error


@pytest.mark.parametrize(
    ("error", "status", "kind"),
    [
        (InvalidRequestError("bad"), 400, "invalid_request_error"),
        (AuthenticationError("who"), 401, "authentication_error"),
        (NotFoundError("where"), 404, "not_found_error"),
        (_status_error(413), 413, "request_too_large"),
        (_status_error(429), 429, "rate_limit_error"),
        (NoReplicaError("none up"), 529, "overloaded_error"),
        (_status_error(503), 529, "overloaded_error"),
        (UpstreamError("engine 500"), 502, "api_error"),
        (UpstreamStreamError("mid-stream"), UpstreamStreamError.status_code, "api_error"),
        (UpstreamTimeoutError("slow"), 504, "timeout_error"),
    ],
)
def test_error_envelope(error: GatewayError, status: int, kind: str) -> None:
    response = errors.error_response(error, "req-1")
    assert response.status_code == status
    assert response.headers["request-id"] == "req-1"
    assert orjson.loads(response.body) == {
        "type": "error",
        "error": {"type": kind, "message": error.message},
        "request_id": "req-1",
    }


def test_mid_stream_error_is_one_error_event() -> None:
    encoder = MessageStream("msg_test", "m", CODEC, ())
    raw = encoder.start() + encoder.deltas([C("partial")]) + encoder.error(UpstreamStreamError("x"))
    events = parse_sse(raw)
    message = check_stream(events, allow_error=True)
    assert events[-1].name == "error"
    assert message["error"]["type"] == "api_error"
    overloaded = parse_sse(encoder.error(NoReplicaError("full")))
    assert overloaded[0].data["error"]["type"] == "overloaded_error"


def test_keepalive_frame_is_a_ping_event() -> None:
    frame = MessageStream("msg_test", "m", CODEC, ()).keepalive()
    assert frame is not None
    (event,) = parse_sse(frame)
    assert event.name == "ping"
    assert event.data == {"type": "ping"}


class _SlowStream(MessageStream):
    """Every batch through BlockWriter.feed and the event dicts: the fast path's reference."""

    def deltas(self, deltas: list[ParsedDelta]) -> bytes:
        return self._encode(self._writer.feed(deltas))


@given(
    st.lists(
        st.lists(
            st.sampled_from([R("think "), R(" "), C("Hi"), C(" "), C('say "x"\n'), R("é🙂")]),
            min_size=1,
            max_size=3,
        ),
        max_size=12,
    ),
    st.booleans(),
)
def test_the_one_delta_fast_path_sends_the_bytes_feed_would(
    batches: list[list[ParsedDelta]], show: bool
) -> None:
    fast = MessageStream("msg_x", "m", CODEC, (), show_thinking=show)
    slow = _SlowStream("msg_x", "m", CODEC, (), show_thinking=show)
    end = finish()
    sent_fast = fast.start() + b"".join(fast.deltas(list(b)) for b in batches) + fast.finish(end)
    sent_slow = slow.start() + b"".join(slow.deltas(list(b)) for b in batches) + slow.finish(end)
    assert sent_fast == sent_slow
