"""One test per GLM-parser bug other servers shipped (FACTS.md section 7)."""

from __future__ import annotations

import json

import pytest

from gateway.parsers.base import ToolCallStart
from gateway.parsers.glm import GlmOutputParser
from tests.gateway.parsers.support import (
    Assembled,
    canonical,
    make_parser,
    parse_chunks,
    render_call,
    split_at,
)


def _every_way(text: str, *, starts_in_reasoning: bool = True) -> list[Assembled]:
    """One-shot, one character at a time, and every two-piece split."""

    def fresh() -> GlmOutputParser:
        return make_parser(starts_in_reasoning=starts_in_reasoning)

    results = [parse_chunks([text], fresh()), parse_chunks(list(text), fresh())]
    results += [parse_chunks(split_at(text, [cut]), fresh()) for cut in range(1, len(text))]
    return results


@pytest.mark.parametrize(
    ("key", "expected"), [("count", 123), ("text", "123"), ("ratio", 123), ("maybe", 123)]
)
def test_streamed_value_has_the_one_shot_type(key: str, expected: object) -> None:
    # Bug: `123` streamed as "123" but parsed one-shot as 123.
    text = "<tool_call>typed<arg_key>" + key + "</arg_key><arg_value>123</arg_value></tool_call>"
    for result in _every_way(text, starts_in_reasoning=False):
        assert canonical(result.arguments()) == canonical([{key: expected}])


def test_zero_argument_call_survives_streaming() -> None:
    # Bug: `<tool_call>f</tool_call>` dropped when streamed.
    for result in _every_way("<tool_call>ping</tool_call>", starts_in_reasoning=False):
        assert [(name, args) for _, name, args in result.calls] == [("ping", "{}")]


def test_tag_split_across_chunks_never_leaks() -> None:
    # Bug: a tag split across chunks leaked into the text.
    text = "<think>plan</think>Sure." + render_call("get_weather", {"city": "Oslo", "days": 2})
    for result in _every_way(text, starts_in_reasoning=False):
        assert (result.reasoning, result.content) == ("plan", "Sure.")
        assert result.arguments() == [{"city": "Oslo", "days": 2}]


def test_tool_name_is_never_truncated() -> None:
    # Bug: names cut at a chunk boundary ("get_wea").
    text = render_call("get_weather", {"city": "Oslo"})
    for cut in range(1, len(text)):
        parser = make_parser(starts_in_reasoning=False)
        starts = [d for chunk in split_at(text, [cut]) for d in parser.feed(chunk)]
        starts += parser.finish()
        names = [d.name for d in starts if isinstance(d, ToolCallStart)]
        assert names == ["get_weather"], cut


def test_unknown_tool_name_is_not_forwarded() -> None:
    # Bug: calls to tools the request did not declare were passed to the client.
    call = render_call("rm_rf", {"path": "/"})
    for result in _every_way("ok</think>" + call):
        assert result.calls == []
        assert result.content == call
    parser = make_parser()
    parse_chunks(["ok</think>" + call], parser)
    assert [(r.name, r.reason) for r in parser.rejected_tool_calls] == [("rm_rf", "undeclared")]
    assert not parser.made_tool_calls


def test_tool_call_inside_think_is_not_lost() -> None:
    # Bug: a call written before `</think>` vanished with the reasoning.
    text = "I need the weather." + render_call("get_weather", {"city": "Oslo"})
    for result in _every_way(text):
        assert result.reasoning == "I need the weather."
        assert result.arguments() == [{"city": "Oslo"}]


def test_missing_arg_value_tag_does_not_empty_the_call() -> None:
    # Bug: a missing `<arg_value>` (seen under load) produced `{}`.
    text = (
        "<tool_call>get_weather<arg_key>city</arg_key>Oslo</arg_value>"
        "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>"
    )
    for result in _every_way(text, starts_in_reasoning=False):
        assert result.arguments() == [{"city": "Oslo", "days": 3}]


def test_structured_arguments_are_not_double_serialised() -> None:
    # Bug: object/array values sent as JSON strings inside the JSON ("{\"a\": 1}").
    text = render_call("typed", {"config": {"depth": 2}, "tags": ["a", "b"], "one": [1, 2]})
    for result in _every_way(text, starts_in_reasoning=False):
        ((_, _, arguments),) = result.calls
        decoded = json.loads(arguments)
        assert isinstance(decoded, dict)
        assert decoded == {"config": {"depth": 2}, "tags": ["a", "b"], "one": [1, 2]}
