"""Shared helpers for the parser tests: tools, rendering calls as GLM writes them, assembling."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.parsers.base import (
    ContentDelta,
    ParsedDelta,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallStart,
)
from gateway.parsers.glm import GlmOutputParser, GlmParserFactory
from gateway.parsers.stream_core import ParserLimits


def tool(name: str, parameters: Mapping[str, Any] | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name, "description": f"the {name} tool"}
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


WEATHER = tool(
    "get_weather",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
    },
)
TYPED = tool(
    "typed",
    {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "flag": {"type": "boolean"},
            "maybe": {"type": ["integer", "null"]},
            "label": {"type": "string", "nullable": True},
            "either": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]},
            "one": {"oneOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "null"}]},
            "mode": {"enum": ["fast", "slow", 3]},
            "config": {"type": "object", "properties": {"depth": {"type": "integer"}}},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
    },
)
NO_PARAMS = tool("ping")
FREE = tool("free", {"type": "object"})
TOOLS = [WEATHER, TYPED, NO_PARAMS, FREE]


@dataclass
class Assembled:
    """What an OpenAI client reconstructs from the deltas."""

    reasoning: str = ""
    content: str = ""
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # id, name, arguments

    def arguments(self) -> list[Any]:
        return [json.loads(arguments) for _, _, arguments in self.calls]


def assemble(deltas: Iterable[ParsedDelta]) -> Assembled:
    result = Assembled()
    for delta in deltas:
        if isinstance(delta, ReasoningDelta):
            assert delta.text, "empty reasoning delta"
            result.reasoning += delta.text
        elif isinstance(delta, ContentDelta):
            assert delta.text, "empty content delta"
            result.content += delta.text
        elif isinstance(delta, ToolCallStart):
            assert delta.index == len(result.calls), "tool-call indices must count up from 0"
            result.calls.append((delta.id, delta.name, ""))
        elif isinstance(delta, ToolCallArgumentsDelta):
            assert delta.index == len(result.calls) - 1, "arguments for a call not started"
            call_id, name, arguments = result.calls[-1]
            result.calls[-1] = (call_id, name, arguments + delta.fragment)
    return result


def counting_ids() -> Callable[[], str]:
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


def make_parser(
    tools: Sequence[Mapping[str, Any]] | None = TOOLS,
    tool_choice: str | Mapping[str, Any] | None = None,
    *,
    starts_in_reasoning: bool = True,
    limits: ParserLimits | None = None,
) -> GlmOutputParser:
    factory = GlmParserFactory(limits=limits, new_call_id=counting_ids())
    return factory(tools=tools, tool_choice=tool_choice, starts_in_reasoning=starts_in_reasoning)


def parse_chunks(chunks: Iterable[str], parser: GlmOutputParser | None = None) -> Assembled:
    parser = parser or make_parser()
    deltas: list[ParsedDelta] = []
    for chunk in chunks:
        deltas.extend(parser.feed(chunk))
    deltas.extend(parser.finish())
    return assemble(deltas)


def parse(text: str, **kwargs: Any) -> Assembled:
    return parse_chunks([text], make_parser(**kwargs))


def split_at(text: str, cuts: Iterable[int]) -> list[str]:
    points = [0, *sorted(set(c for c in cuts if 0 < c < len(text))), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(points)]


def render_value(value: Any) -> str:
    """As the chat template writes a value: a string raw, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def render_call(name: str, arguments: Mapping[str, Any], *, newlines: bool = False) -> str:
    """A call in GLM-4.7 markup, or the GLM-4.5/4.6 layout with newlines."""
    nl = "\n" if newlines else ""
    parts = [f"<tool_call>{name}{nl}"]
    for key, value in arguments.items():
        parts.append(
            f"<arg_key>{key}</arg_key>{nl}<arg_value>{render_value(value)}</arg_value>{nl}"
        )
    parts.append("</tool_call>")
    return "".join(parts)


def canonical(value: Any) -> str:
    """Equality that tells 1 from 1.0 from True (Python's == does not)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)
