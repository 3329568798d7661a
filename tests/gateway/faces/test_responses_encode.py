"""The Responses face's encoders fed with parser deltas: the event order the openai SDK's
responses.stream() enforces, the one-shot body, and that both build the same output items
(gateway/faces/responses/encode.py)."""

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
    ContextLengthError,
    GatewayError,
    InvalidRequestError,
    UpstreamStreamError,
)
from gateway.faces.responses.convert import ToolNames, convert_tools
from gateway.faces.responses.encode import (
    ItemWriter,
    ResponseCollector,
    ResponseInfo,
    ResponsesAnswer,
    ResponseStream,
)
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
from tests.support.responses_events import Checked, check_stream, parse_sse, sdk_final

NOW = 1_700_000_000.0
Batches = Sequence[list[ParsedDelta]]
CODEC = ReasoningCodec(b"test-key", max_age_s=3600, max_text_bytes=1 << 20, clock=lambda: NOW)
ECHO = {"tools": [], "tool_choice": "auto", "parallel_tool_calls": True, "store": True}
INFO = ResponseInfo(response_id="resp_test", model="gpt-test", created_at=1, echo=ECHO)

# The tools of the tests, as a Responses client sends them: a function, two namespaces (Codex's
# MCP style, whose name ends in "__", and a plain one) and a custom (free-form) tool.
CLIENT_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "get_weather",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        },
    },
    {
        "type": "namespace",
        "name": "mcp__docs__",
        "description": "Docs server",
        "tools": [
            {
                "type": "function",
                "name": "search",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            }
        ],
    },
    {
        "type": "namespace",
        "name": "collab",
        "tools": [{"type": "function", "name": "spawn", "parameters": {"type": "object"}}],
    },
    {
        "type": "custom",
        "name": "apply_patch",
        "description": "Apply a patch",
        "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
    },
]
MODEL_TOOLS, NAMES = convert_tools(CLIENT_TOOLS)


def usage(prompt: int = 100, completion: int = 20, cached: int = 30, reasoning: int = 0) -> Usage:
    return Usage(prompt, completion, cached, reasoning)


def finish(reason: Any = "stop", **counts: int) -> Finish:
    # As the relay makes it: "tool_calls" here is a stop after calls, "length" max_new_tokens.
    stopped: Literal["stop", "length"] = "length" if reason == "length" else "stop"
    return Finish(stopped, None, usage(**counts), made_tool_calls=reason == "tool_calls")


def writer(names: ToolNames = NAMES, rid: str = "test") -> ItemWriter:
    return ItemWriter(CODEC, names, rid)


def stream_bytes(
    batches: Batches, end: Finish, names: ToolNames = NAMES, done: list[Any] | None = None
) -> bytes:
    encoder = ResponseStream(INFO, writer(names), done.append if done is not None else None)
    return encoder.start() + b"".join(encoder.deltas(b) for b in batches) + encoder.finish(end)


def streamed(batches: Batches, end: Finish, names: ToolNames = NAMES) -> Checked:
    return check_stream(parse_sse(stream_bytes(batches, end, names)))


def collected(
    batches: Batches, end: Finish, names: ToolNames = NAMES, done: list[Any] | None = None
) -> dict[str, Any]:
    collector = ResponseCollector(INFO, writer(names), done.append if done is not None else None)
    for batch in batches:
        collector.add(batch)
    # json, as clients parse it: orjson would turn integers past 64 bits into floats.
    body: dict[str, Any] = json.loads(collector.body(end))
    return body


def both(batches: Batches, end: Finish, names: ToolNames = NAMES) -> dict[str, Any]:
    """The streamed response (grammar checked) and the collected one must be the same."""
    stream, body = streamed(batches, end, names).response, collected(batches, end, names)
    assert body == stream
    return body


def kinds(response: dict[str, Any]) -> list[str]:
    return [item["type"] for item in response["output"]]


R, C = ReasoningDelta, ContentDelta


def call(index: int, name: str = "get_weather") -> ToolCallStart:
    return ToolCallStart(index, f"call_{index}abc", name)


def args(index: int, fragment: str) -> ToolCallArgumentsDelta:
    return ToolCallArgumentsDelta(index, fragment)


# -- the event sequence -------------------------------------------------------------------------


def test_reasoning_then_text_event_by_event() -> None:
    raw = stream_bytes([[R("Let me")], [R(" think.")], [C("Hel")], [C("lo")]], finish())
    events = parse_sse(raw)
    assert [(e.name, e.data.get("output_index")) for e in events] == [
        ("response.created", None),
        ("response.in_progress", None),
        ("response.output_item.added", 0),
        ("response.reasoning_text.delta", 0),
        ("response.reasoning_text.delta", 0),
        ("response.reasoning_text.done", 0),
        ("response.output_item.done", 0),
        ("response.output_item.added", 1),
        ("response.content_part.added", 1),
        ("response.output_text.delta", 1),
        ("response.output_text.delta", 1),
        ("response.output_text.done", 1),
        ("response.content_part.done", 1),
        ("response.output_item.done", 1),
        ("response.completed", None),
    ]
    assert [e.data["sequence_number"] for e in events] == list(range(len(events)))
    created = events[0].data["response"]
    assert created["id"] == "resp_test"
    assert created["model"] == "gpt-test"
    assert created["status"] == "in_progress"
    assert created["output"] == []
    assert created["usage"] is None
    assert created["tool_choice"] == "auto"  # the request's echo
    response = check_stream(events).response
    reasoning, message = response["output"]
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "Let me think."}]
    assert reasoning["summary"] == []
    assert CODEC.decode(reasoning["encrypted_content"]) == "Let me think."
    assert message["content"] == [{"type": "output_text", "text": "Hello", "annotations": []}]
    assert message["status"] == "completed"
    assert response["status"] == "completed"


def test_a_function_call_streams_its_arguments_then_done() -> None:
    batches: list[list[ParsedDelta]] = [
        [R("plan")],
        [call(0), args(0, '{"city": ')],
        [args(0, '"Paris"}')],
    ]
    events = parse_sse(stream_bytes(batches, finish("tool_calls")))
    names = [e.name for e in events]
    assert names[names.index("response.output_item.added", 3) :] == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    added = next(e.data["item"] for e in events[3:] if e.name == "response.output_item.added")
    assert added == {
        "id": "fc_test_1",
        "type": "function_call",
        "call_id": "call_0abc",
        "name": "get_weather",
        "arguments": "",
        "status": "in_progress",
    }
    response = both(batches, finish("tool_calls"))
    item = response["output"][1]
    assert item == {**added, "arguments": '{"city": "Paris"}', "status": "completed"}
    assert response["status"] == "completed"  # a call ends the turn; still "completed"


def test_items_of_one_batch_come_out_whole_and_in_order() -> None:
    batch: list[ParsedDelta] = [
        R("a"),
        C("b"),
        call(0),
        args(0, '{"city": '),
        args(0, '"x"}'),
        call(1, "collab__spawn"),
        args(1, "{}"),
        C("after"),
        R("again"),
    ]
    response = both([batch], finish("tool_calls"))
    assert kinds(response) == [
        "reasoning",
        "message",
        "function_call",
        "function_call",
        "message",
        "reasoning",
    ]
    ids = [item["id"] for item in response["output"]]
    assert len(set(ids)) == len(ids)
    assert ids == ["rs_test_0", "msg_test_1", "fc_test_2", "fc_test_3", "msg_test_4", "rs_test_5"]
    first, second = response["output"][0], response["output"][5]
    assert CODEC.decode(first["encrypted_content"]) == "a"
    assert CODEC.decode(second["encrypted_content"]) == "again"


def test_item_ids_differ_between_responses() -> None:
    one = collected([[R("x")], [C("y")]], finish())
    other = ResponseCollector(INFO, writer(rid="other"))
    other.add([R("x"), C("y")])
    two = json.loads(other.body(finish()))
    assert not {i["id"] for i in one["output"]} & {i["id"] for i in two["output"]}


def test_sequence_numbers_count_from_zero_through_keepalives() -> None:
    encoder = ResponseStream(INFO, writer())
    raw = encoder.start()
    raw += encoder.keepalive() or b""
    raw += encoder.deltas([R("a")])
    raw += encoder.keepalive() or b""  # a long silence mid-answer
    raw += encoder.deltas([C("b")])
    raw += encoder.finish(finish())
    events = parse_sse(raw)
    assert [e.data["sequence_number"] for e in events] == list(range(len(events)))
    checked = check_stream(events)
    assert checked.names.count("response.in_progress") == 3
    assert kinds(checked.response) == ["reasoning", "message"]


def test_keepalive_frame_is_an_in_progress_event_of_the_same_response() -> None:
    encoder = ResponseStream(INFO, writer())
    assert encoder.sends_keepalive  # so the core runs its keepalive task
    encoder.start()
    frame = encoder.keepalive()
    assert frame is not None
    (event,) = parse_sse(frame)
    assert event.name == "response.in_progress"
    assert event.data["sequence_number"] == 2
    assert event.data["response"]["id"] == "resp_test"
    assert event.data["response"]["status"] == "in_progress"
    assert event.data["response"]["output"] == []


def test_the_sdk_accepts_every_kind_of_item() -> None:
    custom_args = json.dumps({"input": "*** Begin Patch\n"})
    batches: list[list[ParsedDelta]] = [
        [R("plan")],
        [C("Working.")],
        [call(0), args(0, '{"city": "Oslo"}')],
        [call(1, "mcp__docs__search"), args(1, '{"q": "x"}')],
        [call(2, "apply_patch"), args(2, custom_args)],
    ]
    raw = stream_bytes(batches, finish("tool_calls"))
    final = sdk_final(raw, tools=CLIENT_TOOLS)
    assert [item.type for item in final.output] == [
        "reasoning",
        "message",
        "function_call",
        "function_call",
        "custom_tool_call",
    ]
    assert final.output_text == "Working."
    assert final.usage is not None
    assert final.usage.total_tokens == 120
    weather = final.output[2]
    assert weather.type == "function_call"
    assert weather.parsed_arguments == {"city": "Oslo"}  # strict: the SDK parses them
    search = final.output[3]
    assert search.type == "function_call"
    assert (search.namespace, search.name) == ("mcp__docs__", "search")


# -- reasoning ------------------------------------------------------------------------------------


def test_reasoning_items_always_have_a_summary_list_and_our_encrypted_content() -> None:
    exact = ' The model\'s reasoning, byte for byte:\n é "q" </think>?\n'
    response = both([[R(exact[:9])], [R(exact[9:])], [C("ok")]], finish())
    (item,) = [i for i in response["output"] if i["type"] == "reasoning"]
    assert item["summary"] == []
    assert item["content"] == [{"type": "reasoning_text", "text": exact}]
    assert CODEC.decode(item["encrypted_content"]) == exact
    other = ReasoningCodec(b"other-key", max_age_s=3600, max_text_bytes=1 << 20)
    assert other.decode(item["encrypted_content"]) is None


def test_reasoning_split_only_by_invisible_text_stays_one_item() -> None:
    response = both([[R("one")], [C("\n\n")], [R(" two")], [C("Answer")]], finish())
    assert kinds(response) == ["reasoning", "message"]
    assert response["output"][0]["content"][0]["text"] == "one two"
    assert response["output"][1]["content"][0]["text"] == "Answer"


# -- no empty items -------------------------------------------------------------------------------


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
def test_whitespace_only_or_empty_text_never_becomes_a_message(batches: Batches) -> None:
    response = both(batches, finish())
    assert "message" not in kinds(response)


def test_leading_whitespace_is_kept_once_visible_text_follows() -> None:
    response = both([[R("r")], [C("\n\n")], [C("Hi")], [C(" there\n")]], finish())
    assert response["output"][1]["content"][0]["text"] == "\n\nHi there\n"


def test_whitespace_held_before_a_call_is_not_moved_past_it() -> None:
    batches: list[list[ParsedDelta]] = [[C("\n\n")], [call(0), args(0, "{}")], [C("Done")]]
    response = both(batches, finish("tool_calls"))
    assert kinds(response) == ["function_call", "message"]
    assert response["output"][1]["content"][0]["text"] == "Done"


def test_empty_reasoning_and_argument_deltas_are_dropped() -> None:
    batches: list[list[ParsedDelta]] = [
        [R("")],
        [C("x")],
        [call(0), args(0, ""), args(0, "{}"), args(0, "")],
    ]
    response = both(batches, finish("tool_calls"))
    assert kinds(response) == ["message", "function_call"]
    events = parse_sse(stream_bytes(batches, finish("tool_calls")))
    deltas = [e.data["delta"] for e in events if e.name.endswith("arguments.delta")]
    assert deltas == ["{}"]


def test_a_call_without_arguments_has_an_empty_object() -> None:
    response = both([[call(0, "collab__spawn")]], finish("tool_calls"))
    assert response["output"][0]["arguments"] == "{}"


def test_an_empty_answer_has_no_items() -> None:
    response = both([], finish(completion=0))
    assert response["output"] == []
    assert response["status"] == "completed"


# -- tools: namespaces and custom tools ------------------------------------------------------------


@pytest.mark.parametrize(
    ("flat", "namespace", "name"),
    [
        ("mcp__docs__search", "mcp__docs__", "search"),
        ("collab__spawn", "collab", "spawn"),
        ("get_weather", None, "get_weather"),
        ("not_a_tool", None, "not_a_tool"),
    ],
)
def test_namespaced_calls_are_restored_to_namespace_and_name(
    flat: str, namespace: str | None, name: str
) -> None:
    response = both([[call(0, flat), args(0, '{"q": "x"}')]], finish("tool_calls"))
    (item,) = response["output"]
    assert item["type"] == "function_call"
    assert item["name"] == name
    assert item.get("namespace") == namespace
    assert ("namespace" in item) is (namespace is not None)


CUSTOM_INPUTS = [
    'say "hi" \\ C:\\dir\\file \\n (literal) \\"',
    "*** Begin Patch\n*** Add File: a.txt\n+line one\n+\ttabbed\r\n*** End Patch\n",
    "São Paulo 東京 🎉 naïve",
    '{"looks": "like JSON", "n": [1, 2]}',
    " padded ",
    "",
]


def custom_deltas(text: str, *, per_char: bool) -> list[list[ParsedDelta]]:
    parser = get_parser_factory("glm47")(
        tools=MODEL_TOOLS, tool_choice="auto", starts_in_reasoning=True
    )
    if not per_char:
        return [parser.feed(text) + parser.finish()]
    batches = [parser.feed(char) for char in text]
    batches.append(parser.finish())
    return [batch for batch in batches if batch]


@pytest.mark.parametrize("raw", CUSTOM_INPUTS, ids=[str(i) for i in range(len(CUSTOM_INPUTS))])
@pytest.mark.parametrize("per_char", [True, False], ids=["per-char", "one-batch"])
def test_a_custom_tool_call_carries_the_raw_input(raw: str, per_char: bool) -> None:
    text = "patching</think>" + render_call("apply_patch", {"input": raw})
    batches = custom_deltas(text, per_char=per_char)
    response = both(batches, finish("tool_calls"))
    assert kinds(response) == ["reasoning", "custom_tool_call"]
    item = response["output"][1]
    assert item["name"] == "apply_patch"
    assert item["input"] == raw
    assert item["status"] == "completed"
    assert item["call_id"].startswith("call_")
    assert "namespace" not in item
    assert "arguments" not in item
    events = parse_sse(stream_bytes(batches, finish("tool_calls")))
    assert not [e for e in events if e.name.startswith("response.function_call_arguments")]
    (done,) = [e for e in events if e.name == "response.custom_tool_call_input.done"]
    assert done.data["input"] == raw


def test_custom_input_that_is_not_the_one_string_argument_is_passed_as_written() -> None:
    batches: list[list[ParsedDelta]] = [[call(0, "apply_patch"), args(0, '{"other": 1}')]]
    assert both(batches, finish("tool_calls"))["output"][0]["input"] == '{"other": 1}'
    batches = [[call(0, "apply_patch"), args(0, "not json")]]
    assert both(batches, finish("tool_calls"))["output"][0]["input"] == "not json"


# -- status, usage, errors ------------------------------------------------------------------------


def test_usage_counts_the_whole_prompt_with_cached_and_reasoning_details() -> None:
    end = finish(prompt=1000, completion=70, cached=768, reasoning=40)
    response = both([[R("r")], [C("x")]], end)
    assert response["usage"] == {
        "input_tokens": 1000,
        "input_tokens_details": {"cached_tokens": 768},
        "output_tokens": 70,
        "output_tokens_details": {"reasoning_tokens": 40},
        "total_tokens": 1070,
    }


@pytest.mark.parametrize("reason", ["stop", "tool_calls"])
def test_a_finished_answer_is_completed(reason: str) -> None:
    response = both([[C("x")]], finish(reason))
    assert (response["status"], response["incomplete_details"]) == ("completed", None)


def test_max_output_tokens_reached_is_incomplete() -> None:
    checked = streamed([[R("cut sh")]], finish("length"))
    assert checked.names[-1] == "response.incomplete"
    response = both([[R("cut sh")]], finish("length"))
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert kinds(response) == ["reasoning"]  # what was made is closed and kept
    with pytest.raises(RuntimeError, match=r"response\.completed"):
        sdk_final(stream_bytes([[R("cut sh")]], finish("length")))


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (UpstreamStreamError("The engine aborted the request: x"), "engine_stream_error"),
        (ContextLengthError(600, 512), "context_length_exceeded"),
        (InvalidRequestError("The engine rejected the request: y"), "server_error"),
        (GatewayError("ours"), "server_error"),
    ],
)
def test_an_error_after_the_start_is_response_failed(error: GatewayError, code: str) -> None:
    encoder = ResponseStream(INFO, writer())
    raw = encoder.start() + encoder.deltas([R("half"), C("an answ")]) + encoder.error(error)
    checked = check_stream(parse_sse(raw))
    assert checked.names[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.failed",
    ]
    response = checked.response
    assert response["status"] == "failed"
    assert response["error"] == {"code": code, "message": error.message}
    assert response["usage"] is None
    assert kinds(response) == ["reasoning", "message"]


def test_the_final_response_goes_to_on_done_but_a_failed_one_does_not() -> None:
    batches: list[list[ParsedDelta]] = [[R("r")], [C("x")]]
    stream_done: list[Any] = []
    raw = stream_bytes(batches, finish(), done=stream_done)
    collector_done: list[Any] = []
    body = collected(batches, finish(), done=collector_done)
    final = check_stream(parse_sse(raw)).response
    assert json.loads(orjson.dumps(stream_done)) == [final]
    assert json.loads(orjson.dumps(collector_done)) == [body]
    failed: list[Any] = []
    encoder = ResponseStream(INFO, writer(), failed.append)
    encoder.start()
    encoder.deltas([C("x")])
    encoder.error(UpstreamStreamError("x"))
    assert failed == []


def test_the_answer_makes_fresh_encoders_for_each_use() -> None:
    answer = ResponsesAnswer(rid="r1", info=INFO, codec=CODEC, names=NAMES, on_done=None)
    assert dict(answer.headers) == {}
    one, two = answer.stream_encoder(), answer.stream_encoder()
    assert parse_sse(one.start())[0].data["sequence_number"] == 0
    assert parse_sse(two.start())[0].data["sequence_number"] == 0
    collector = answer.collector()
    collector.add([C("x")])
    assert json.loads(collector.body(finish()))["output"][0]["id"] == "msg_r1_0"


# -- tool arguments through the real GLM parser ---------------------------------------------------

HARD_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("get_weather", {"city": "São Paulo 東京 🎉 naïve"}),
    ("get_weather", {"city": 'say "hi" \\ C:\\dir\\file \\n (literal) \\"', "days": -3}),
    ("get_weather", {"city": "line one\nline two\r\n\ttabbed\n"}),
    ("get_weather", {"city": '{"looks": "like JSON", "n": [1, 2]}'}),
    ("mcp__docs__search", {"q": "</a> é"}),
    ("collab__spawn", {"config": {"a": [1, {"b": None}]}, "n": 18446744073709551616}),
    ("collab__spawn", {}),
]


def test_hard_arguments_through_the_parser_come_out_as_written() -> None:
    text = "plan</think>Calling." + "".join(render_call(n, a) for n, a in HARD_CALLS)
    per_char = custom_deltas(text, per_char=True)
    one_batch = custom_deltas(text, per_char=False)
    for batches in (per_char, one_batch):
        response = both(batches, finish("tool_calls"))
        calls = response["output"][2:]
        assert [(c.get("namespace"), c["name"]) for c in calls] == [
            (None, "get_weather"),
            (None, "get_weather"),
            (None, "get_weather"),
            (None, "get_weather"),
            ("mcp__docs__", "search"),
            ("collab", "spawn"),
            ("collab", "spawn"),
        ]
        assert [json.loads(c["arguments"]) for c in calls] == [a for _, a in HARD_CALLS]
        ids = [c["call_id"] for c in calls]
        assert len(set(ids)) == len(ids)


# -- stream and collector agree on any output, however it is split --------------------------------

# The parser tests' tools, with one as a namespace member and one as a custom tool.
PROPERTY_NAMES = ToolNames(namespaced={"typed": ("mcp__x__", "typed")}, custom={"free"})


def expected_items(batches: Batches) -> list[tuple[Any, ...]]:
    """An oracle of the item rules: runs of one kind, one item per call, empty deltas and
    whitespace-only text runs left out (not moved into a later item)."""
    runs: list[list[Any]] = []
    for batch in batches:
        for delta in batch:
            if isinstance(delta, ReasoningDelta | ContentDelta) and not delta.text:
                continue
            if isinstance(delta, ToolCallArgumentsDelta):
                runs[-1][1] += delta.fragment
                continue
            if isinstance(delta, ToolCallStart):
                runs.append(["call", "", delta.name])
                continue
            kind = "reasoning" if isinstance(delta, ReasoningDelta) else "message"
            if runs and runs[-1][0] == kind:
                runs[-1][1] += delta.text
            else:
                runs.append([kind, delta.text])
    items: list[tuple[Any, ...]] = []
    for run in runs:
        if run[0] == "message" and not run[1].strip():
            continue
        if run[0] == "reasoning" and items and items[-1][0] == "reasoning":
            # Only invisible text came between: the reasoning item never closed.
            items[-1] = ("reasoning", items[-1][1] + run[1])
        elif run[0] == "call" and run[2] == "free":
            value = json.loads(run[1] or "{}")
            raw = value["input"] if isinstance(value.get("input"), str) else run[1]
            items.append(("custom_tool_call", None, "free", raw))
        elif run[0] == "call":
            namespace, name = PROPERTY_NAMES.namespaced.get(run[2], (None, run[2]))
            items.append(("function_call", namespace, name, json.loads(run[1] or "{}")))
        else:
            items.append((run[0], run[1]))
    return items


def actual_items(response: dict[str, Any]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for item in response["output"]:
        if item["type"] == "reasoning":
            text = item["content"][0]["text"]
            assert CODEC.decode(item["encrypted_content"]) == text
            out.append(("reasoning", text))
        elif item["type"] == "message":
            out.append(("message", item["content"][0]["text"]))
        elif item["type"] == "function_call":
            arguments = json.loads(item["arguments"])
            out.append(("function_call", item.get("namespace"), item["name"], arguments))
        else:
            out.append(("custom_tool_call", None, item["name"], item["input"]))
    return out


@settings(max_examples=150, deadline=None)
@given(output=well_formed_output(), data=st.data())
def test_any_glm_output_any_split(output: Any, data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(output.text)), max_size=12))
    parser = make_parser(TOOLS, "auto")
    batches = [parser.feed(chunk) for chunk in split_at(output.text, cuts)]
    batches.append(parser.finish())
    end = finish("tool_calls" if parser.made_tool_calls else "stop")
    response = both(batches, end, PROPERTY_NAMES)
    assert actual_items(response) == expected_items(batches)
    calls = [i for i in actual_items(response) if i[0] != "reasoning" and i[0] != "message"]
    assert [c[2] for c in calls] == [name for name, _ in output.calls]
    assert [json.dumps(c[3], sort_keys=True) for c in calls if c[0] == "function_call"] == [
        json.dumps(a, sort_keys=True) for n, a in output.calls if n != "free"
    ]
    final = sdk_final(stream_bytes(batches, end, PROPERTY_NAMES))
    assert [item.type for item in final.output] == kinds(response)


class _SlowStream(ResponseStream):
    """Every batch through ItemWriter.feed and the event dicts: the fast path's reference."""

    def deltas(self, deltas: list[ParsedDelta]) -> bytes:
        return self._frames(self._writer.feed(deltas))


@given(
    st.lists(
        st.lists(
            st.sampled_from(
                [R("think "), R(" "), C("Hi"), C(" "), C('say "x"\\n'), C("\n"), R("é🙂")]
            ),
            min_size=1,
            max_size=3,
        ),
        max_size=12,
    )
)
def test_the_one_delta_fast_path_sends_the_bytes_feed_would(batches: Batches) -> None:
    fast = ResponseStream(INFO, writer())
    slow = _SlowStream(INFO, writer())
    sent_fast = fast.start() + b"".join(fast.deltas(list(b)) for b in batches)
    sent_slow = slow.start() + b"".join(slow.deltas(list(b)) for b in batches)
    end = finish()
    assert sent_fast + fast.finish(end) == sent_slow + slow.finish(end)
