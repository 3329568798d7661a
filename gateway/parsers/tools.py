"""The request's tools and tool_choice, resolved once per request (family-neutral).

`resolve_tool_choice` turns OpenAI's `tool_choice` into one of four modes and rejects what
cannot be honoured with a 400 that says what to fix. `ToolSet` maps each declared function to
its parameters schema and says which names the parser may turn into calls:

- "none": tools are not offered and no markup is parsed as a call (it stays text);
- "auto": any declared function; "required": the same, and the engine is constrained to call;
- "function": only the named one; a call to another declared tool is rejected ("not_chosen").

`check_tool_calls` validates what came back against the choice (the constrained decoding
should make it hold; a length cut-off or an engine without grammar support may not).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gateway.errors import InvalidRequestError

ToolChoiceMode = Literal["none", "auto", "required", "function"]


@dataclass(frozen=True, slots=True)
class ToolChoice:
    mode: ToolChoiceMode
    name: str | None = None


def function_of(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    """The function object of an OpenAI tool (`{"type": "function", "function": {...}}`)."""
    inner = tool.get("function")
    return inner if isinstance(inner, Mapping) else tool


def declared_functions(tools: Sequence[Mapping[str, Any]] | None) -> dict[str, object]:
    """Function name -> parameters schema (None when absent), first declaration wins."""
    declared: dict[str, object] = {}
    for tool in tools or ():
        function = function_of(tool)
        name = function.get("name")
        if isinstance(name, str) and name and name not in declared:
            declared[name] = function.get("parameters")
    return declared


def resolve_tool_choice(
    tools: Sequence[Mapping[str, Any]] | None, tool_choice: str | Mapping[str, Any] | None
) -> ToolChoice:
    declared = declared_functions(tools)
    if tool_choice is None:
        return ToolChoice("auto") if declared else ToolChoice("none")
    if isinstance(tool_choice, str):
        if tool_choice == "none":
            return ToolChoice("none")
        if tool_choice not in ("auto", "required"):
            raise InvalidRequestError(
                f"tool_choice {tool_choice!r} is not one of 'none', 'auto', 'required' "
                "or {'type': 'function', 'function': {'name': ...}}",
                param="tool_choice",
            )
        if not declared:
            if tool_choice == "auto":
                return ToolChoice("none")
            raise InvalidRequestError(
                "tool_choice 'required' needs at least one tool in `tools`", param="tool_choice"
            )
        return ToolChoice("auto") if tool_choice == "auto" else ToolChoice("required")
    function = tool_choice.get("function")
    name = function.get("name") if isinstance(function, Mapping) else None
    if tool_choice.get("type") != "function" or not isinstance(name, str):
        raise InvalidRequestError(
            "tool_choice object must be {'type': 'function', 'function': {'name': NAME}}",
            param="tool_choice",
        )
    if name not in declared:
        raise InvalidRequestError(
            f"tool_choice names function {name!r}, which is not in `tools`", param="tool_choice"
        )
    return ToolChoice("function", name)


@dataclass(frozen=True, slots=True)
class ToolSet:
    """What the parser needs: declared schemas and the names it may turn into calls."""

    schemas: Mapping[str, object]
    choice: ToolChoice

    @classmethod
    def from_request(
        cls,
        tools: Sequence[Mapping[str, Any]] | None,
        tool_choice: str | Mapping[str, Any] | None,
    ) -> ToolSet:
        return cls(declared_functions(tools), resolve_tool_choice(tools, tool_choice))

    @property
    def parses_calls(self) -> bool:
        return self.choice.mode != "none" and bool(self.schemas)

    def rejection(self, name: str) -> str | None:
        """Why a call to `name` is not a call ("undeclared", "not_chosen"), or None."""
        if name not in self.schemas:
            return "undeclared"
        if self.choice.mode == "function" and name != self.choice.name:
            return "not_chosen"
        return None


def check_tool_calls(choice: ToolChoice, called: Sequence[str]) -> str | None:
    """What is wrong with the calls made under `choice`, in words; None when they conform."""
    if choice.mode == "none" and called:
        return f"tool_choice 'none' but the output called {', '.join(called)}"
    if choice.mode == "required" and not called:
        return "tool_choice 'required' but the output made no tool call"
    if choice.mode == "function":
        if not called:
            return f"tool_choice named {choice.name!r} but the output made no tool call"
        others = sorted({name for name in called if name != choice.name})
        if others:
            return f"tool_choice named {choice.name!r} but the output called {', '.join(others)}"
    return None
