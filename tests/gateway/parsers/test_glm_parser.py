"""The GLM parser's behaviour, one decision per test (module doc of gateway/parsers/glm.py)."""

from __future__ import annotations

import json

import pytest

from gateway.parsers.base import ContentDelta, ToolCallArgumentsDelta, ToolCallStart
from gateway.parsers.glm import GlmParserFactory
from gateway.parsers.stream_core import ParserLimits
from tests.gateway.parsers.support import (
    NO_PARAMS,
    TOOLS,
    WEATHER,
    counting_ids,
    make_parser,
    parse,
    parse_chunks,
    render_call,
)


def test_reasoning_then_content() -> None:
    result = parse("Let me think.\n</think>\n\nThe answer is 4.\n")
    assert result.reasoning == "Let me think.\n"
    assert result.content == "The answer is 4."
    assert result.calls == []


def test_output_not_starting_in_reasoning_is_content() -> None:
    result = parse("Just text.", starts_in_reasoning=False)
    assert (result.reasoning, result.content) == ("", "Just text.")


def test_leading_think_tag_opens_reasoning_either_way() -> None:
    for starts in (True, False):
        result = parse("<think>hmm</think>ok", starts_in_reasoning=starts)
        assert (result.reasoning, result.content) == ("hmm", "ok")


def test_missing_think_end_keeps_everything_as_reasoning() -> None:
    result = parse("thinking and thinking, cut off by max_tokens")
    assert result.reasoning == "thinking and thinking, cut off by max_tokens"
    assert result.content == ""


def test_stray_think_end_in_content_is_dropped() -> None:
    result = parse("r</think>Hello</think> world", starts_in_reasoning=True)
    assert (result.reasoning, result.content) == ("r", "Hello world")


def test_one_call_with_typed_arguments() -> None:
    text = "r</think>" + render_call("get_weather", {"city": "Paris", "days": 3})
    parser = make_parser()
    result = parse_chunks([text], parser)
    assert [(name, json.loads(args)) for _, name, args in result.calls] == [
        ("get_weather", {"city": "Paris", "days": 3})
    ]
    assert parser.made_tool_calls
    assert parser.rejected_tool_calls == ()


def test_glm45_newline_layout() -> None:
    text = (
        "r</think>"
        + render_call("get_weather", {"city": "Rome", "unit": "celsius"}, newlines=True)
        + "\n"
        + render_call("ping", {}, newlines=True)
    )
    result = parse(text)
    assert [(name, json.loads(args)) for _, name, args in result.calls] == [
        ("get_weather", {"city": "Rome", "unit": "celsius"}),
        ("ping", {}),
    ]
    assert result.content == ""


def test_several_calls_keep_text_before_and_between() -> None:
    text = (
        "r</think>I will check two cities.\n"
        + render_call("get_weather", {"city": "Oslo"})
        + " and then "
        + render_call("get_weather", {"city": "Lima"})
    )
    result = parse(text)
    assert result.content == "I will check two cities.\n and then"
    assert [json.loads(args)["city"] for _, _, args in result.calls] == ["Oslo", "Lima"]
    assert len({call_id for call_id, _, _ in result.calls}) == 2


def test_call_ids_are_unique_and_look_like_openai_ids() -> None:
    factory = GlmParserFactory()
    parser = factory(tools=TOOLS, tool_choice="auto", starts_in_reasoning=False)
    text = "".join(render_call("ping", {}) for _ in range(50))
    ids = [d.id for d in parser.feed(text) + parser.finish() if isinstance(d, ToolCallStart)]
    assert len(ids) == 50
    assert len(set(ids)) == 50
    assert all(i.startswith("call_") and len(i) > 12 for i in ids)


def test_name_is_emitted_first_and_string_values_stream() -> None:
    parser = make_parser(starts_in_reasoning=False)
    first = parser.feed("<tool_call>get_weather<arg_key>city</arg_key><arg_value>San Fr")
    assert first[0] == ToolCallStart(0, "call_0", "get_weather")
    assert "".join(d.fragment for d in first if isinstance(d, ToolCallArgumentsDelta)) == (
        '{"city": "San Fr'
    )
    rest = parser.feed("ancisco</arg_value></tool_call>") + parser.finish()
    fragments = [d.fragment for d in rest if isinstance(d, ToolCallArgumentsDelta)]
    assert "".join(fragments) == 'ancisco"}'


def test_only_a_possible_tag_prefix_is_held_back() -> None:
    parser = make_parser(starts_in_reasoning=False)
    assert parser.feed("Hello <b>world</b> <tool") == [ContentDelta("Hello <b>world</b>")]
    assert parser.feed("box>") == [ContentDelta(" <toolbox>")]


def test_no_tools_means_markup_is_text() -> None:
    text = "r" + render_call("get_weather", {"city": "Paris"}) + "</think>done"
    result = parse(text, tools=None)
    assert result.calls == []
    assert result.reasoning == "r" + render_call("get_weather", {"city": "Paris"})
    assert result.content == "done"


def test_tool_choice_none_means_nothing_is_parsed_as_a_call() -> None:
    call = render_call("get_weather", {"city": "Paris"})
    result = parse("r</think>" + call, tool_choice="none")
    assert (result.calls, result.content) == ([], call)


def test_named_tool_choice_rejects_other_declared_tools() -> None:
    parser = make_parser(tool_choice={"type": "function", "function": {"name": "get_weather"}})
    text = "r</think>" + render_call("ping", {}) + render_call("get_weather", {"city": "X"})
    result = parse_chunks([text], parser)
    assert [name for _, name, _ in result.calls] == ["get_weather"]
    assert result.content == render_call("ping", {})
    assert [(r.name, r.reason) for r in parser.rejected_tool_calls] == [("ping", "not_chosen")]


def test_zero_argument_call_without_schema() -> None:
    result = parse("r</think><tool_call>ping</tool_call>", tools=[NO_PARAMS])
    assert [(name, args) for _, name, args in result.calls] == [("ping", "{}")]


def test_unterminated_name_at_end_is_content_not_a_call() -> None:
    parser = make_parser()
    result = parse_chunks(["r</think><tool_call>get_wea"], parser)
    assert result.calls == []
    assert result.content == "<tool_call>get_wea"
    assert [r.reason for r in parser.rejected_tool_calls] == ["malformed"]


def test_over_long_name_is_rejected() -> None:
    factory = GlmParserFactory(limits=ParserLimits(max_name_chars=8), new_call_id=counting_ids())
    parser = factory(tools=TOOLS, tool_choice=None, starts_in_reasoning=False)
    text = "<tool_call>get_weather</tool_call>"
    deltas = [d for ch in text for d in parser.feed(ch)] + parser.finish()
    assert not any(isinstance(d, ToolCallStart) for d in deltas)
    assert "".join(d.text for d in deltas if isinstance(d, ContentDelta)) == text
    assert [r.reason for r in parser.rejected_tool_calls] == ["malformed"]


@pytest.mark.parametrize(
    "tail",
    [
        "<tool_call>get_weather<arg_key>ci",
        "<tool_call>get_weather<arg_key>city</arg_key>",
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Par",
        "<tool_call>get_weather<arg_key>days</arg_key><arg_value>1",
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>P</arg_value>",
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>P</arg_value></tool_",
        "<tool_call>get_weather\n",
    ],
)
def test_tags_open_at_end_close_the_call_without_inventing(tail: str) -> None:
    result = parse("r</think>" + tail)
    assert [name for _, name, _ in result.calls] == ["get_weather"]
    arguments = result.arguments()[0]
    assert set(arguments) <= {"city"}
    assert "days" not in arguments  # a cut-off number is not a number
    if "city" in arguments:
        assert arguments["city"] in {"Par", "P"}


def test_key_without_value_is_dropped_and_the_rest_kept() -> None:
    text = (
        "<tool_call>get_weather<arg_key>unit</arg_key>"
        "<arg_key>city</arg_key><arg_value>Oslo</arg_value>"
        "<arg_key>days</arg_key></tool_call>"
    )
    result = parse(text, starts_in_reasoning=False)
    assert result.arguments() == [{"city": "Oslo"}]


def test_duplicate_key_keeps_the_first_value() -> None:
    text = render_call("get_weather", {"city": "A"})[: -len("</tool_call>")]
    text += "<arg_key>city</arg_key><arg_value>B</arg_value></tool_call>"
    assert parse(text, starts_in_reasoning=False).arguments() == [{"city": "A"}]


def test_text_between_arguments_is_not_data() -> None:
    text = (
        "<tool_call>get_weather junk<arg_key>city</arg_key> more <arg_value>Oslo</arg_value>"
        " trailing </tool_call>"
    )
    result = parse(text, starts_in_reasoning=False)
    assert [name for _, name, _ in result.calls] == []  # "get_weather junk" is no tool's name
    text = (
        "<tool_call>get_weather<arg_key>city</arg_key> more <arg_value>Oslo</arg_value>"
        " trailing </tool_call>"
    )
    assert parse(text, starts_in_reasoning=False).arguments() == [{"city": "Oslo"}]


def test_value_may_contain_other_markup() -> None:
    value = "use <tool_call>x</tool_call> and </think> and <arg_key>"
    text = render_call("get_weather", {"city": value})
    assert parse(text, starts_in_reasoning=False).arguments() == [{"city": value}]


def test_finish_is_idempotent_and_feed_after_finish_is_ignored() -> None:
    parser = make_parser(starts_in_reasoning=False)
    assert parser.feed("hi") == [ContentDelta("hi")]
    assert parser.finish() == []
    assert parser.finish() == []
    assert parser.feed("more") == []


def test_whitespace_only_content_is_no_content() -> None:
    text = "r</think>\n\n" + render_call("ping", {}) + "\n" + render_call("ping", {}) + "\n"
    result = parse(text)
    assert result.content == ""
    assert len(result.calls) == 2


def test_declared_tool_without_parameters_parses_values_as_json_or_text() -> None:
    text = render_call("free", {"n": 5, "s": "hello", "o": {"a": [1]}, "b": True})
    assert parse(text, starts_in_reasoning=False).arguments() == [
        {"n": 5, "s": "hello", "o": {"a": [1]}, "b": True}
    ]


def test_weather_tool_is_used_by_registry_consumers() -> None:
    # The parser reads the OpenAI tool shape and the bare function shape alike.
    bare = WEATHER["function"]
    result = parse(render_call("get_weather", {"days": 2}), tools=[bare], starts_in_reasoning=False)
    assert result.arguments() == [{"days": 2}]
