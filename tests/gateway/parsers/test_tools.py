"""tool_choice resolution and validation of the calls made."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.errors import InvalidRequestError
from gateway.parsers.tools import ToolChoice, ToolSet, check_tool_calls, resolve_tool_choice
from tests.gateway.parsers.support import TOOLS, WEATHER

NAMED = {"type": "function", "function": {"name": "get_weather"}}


@pytest.mark.parametrize(
    ("tools", "choice", "expected"),
    [
        (TOOLS, None, ToolChoice("auto")),
        (None, None, ToolChoice("none")),
        ([], "auto", ToolChoice("none")),
        (TOOLS, "auto", ToolChoice("auto")),
        (TOOLS, "none", ToolChoice("none")),
        (TOOLS, "required", ToolChoice("required")),
        (TOOLS, NAMED, ToolChoice("function", "get_weather")),
        ([WEATHER["function"]], NAMED, ToolChoice("function", "get_weather")),
    ],
)
def test_resolve(tools: Any, choice: Any, expected: ToolChoice) -> None:
    assert resolve_tool_choice(tools, choice) == expected


@pytest.mark.parametrize(
    ("tools", "choice", "message"),
    [
        (None, "required", "needs at least one tool"),
        (TOOLS, "always", "is not one of"),
        (TOOLS, {"type": "function", "function": {"name": "nope"}}, "not in `tools`"),
        (TOOLS, {"type": "function"}, "must be"),
        (TOOLS, {"type": "allowed_tools", "function": {"name": "ping"}}, "must be"),
    ],
)
def test_resolve_rejects_what_cannot_be_honoured(tools: Any, choice: Any, message: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        resolve_tool_choice(tools, choice)
    assert message in caught.value.message
    assert caught.value.param == "tool_choice"
    assert caught.value.status_code == 400


def test_tool_set_rejections() -> None:
    named = ToolSet.from_request(TOOLS, NAMED)
    assert named.rejection("get_weather") is None
    assert named.rejection("ping") == "not_chosen"
    assert named.rejection("nope") == "undeclared"
    assert not ToolSet.from_request(TOOLS, "none").parses_calls
    assert ToolSet.from_request(TOOLS, "required").parses_calls


@pytest.mark.parametrize(
    ("choice", "called", "problem"),
    [
        (ToolChoice("auto"), [], None),
        (ToolChoice("auto"), ["ping"], None),
        (ToolChoice("none"), [], None),
        (ToolChoice("none"), ["ping"], "tool_choice 'none'"),
        (ToolChoice("required"), [], "made no tool call"),
        (ToolChoice("required"), ["ping", "free"], None),
        (ToolChoice("function", "ping"), ["ping"], None),
        (ToolChoice("function", "ping"), [], "made no tool call"),
        (ToolChoice("function", "ping"), ["ping", "free"], "called free"),
    ],
)
def test_check_tool_calls(choice: ToolChoice, called: list[str], problem: str | None) -> None:
    result = check_tool_calls(choice, called)
    if problem is None:
        assert result is None
    else:
        assert result is not None
        assert problem in result
