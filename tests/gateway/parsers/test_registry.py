"""The registry is the one place family names live; the chat route only looks them up."""

from __future__ import annotations

import pytest

from gateway.parsers.base import OutputParser, ParserFactory, ToolCallStart
from gateway.parsers.registry import family_names, get_constraint_builder, get_parser_factory
from gateway.parsers.stream_core import ParserLimits
from tests.gateway.parsers.support import TOOLS, render_call


@pytest.mark.parametrize("family", ["glm47", "glm45"])
def test_each_family_parses_both_glm_layouts(family: str) -> None:
    factory: ParserFactory = get_parser_factory(family)
    for newlines in (False, True):
        parser: OutputParser = factory(tools=TOOLS, tool_choice="auto", starts_in_reasoning=True)
        text = "r</think>" + render_call("get_weather", {"city": "Oslo"}, newlines=newlines)
        deltas = parser.feed(text) + parser.finish()
        assert [d.name for d in deltas if isinstance(d, ToolCallStart)] == ["get_weather"]
        assert parser.made_tool_calls


def test_limits_are_passed_through() -> None:
    factory = get_parser_factory("glm47", ParserLimits(max_name_chars=3))
    parser = factory(tools=TOOLS, tool_choice=None, starts_in_reasoning=False)
    parser.feed(render_call("ping", {}))
    parser.finish()
    assert [r.reason for r in parser.rejected_tool_calls] == ["malformed"]


def test_family_layouts_differ_only_in_the_grammar() -> None:
    grammars = {
        family: get_constraint_builder(family)(
            tools=TOOLS, tool_choice="required", starts_in_reasoning=True
        ).sampling_params["ebnf"]
        for family in family_names()
    }
    assert '"\\n"' in grammars["glm45"]
    assert '"\\n"' not in grammars["glm47"]


def test_unknown_family_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="glm45, glm47"):
        get_parser_factory("llama")
    with pytest.raises(ValueError, match="unknown parser family"):
        get_constraint_builder("llama")
