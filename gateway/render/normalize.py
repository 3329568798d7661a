"""Message and tool normalisation before rendering, as transformers 5 does it.

Two things make a request's JSON renderable by a chat template: keys whose value is None are
dropped (a request model dumped with or without `exclude_none` then renders the same, and
`content: null` reads as "no content", not as the text "None"), and OpenAI's JSON-string
tool-call `arguments` become mappings (templates iterate them with `.items()`).
Tool-call arguments and tool parameter schemas are data: their nulls are kept.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.errors import TemplateInputError


def _drop_none(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_drop_none(v) for v in value]
    return value


def _parse_arguments(arguments: Any, index: int, call: int) -> Any:
    if not isinstance(arguments, str):
        return arguments
    try:
        parsed = json.loads(arguments)
    except (ValueError, RecursionError) as exc:
        raise TemplateInputError(
            f"messages[{index}].tool_calls[{call}].function.arguments is not valid JSON ({exc}); "
            "send the arguments as a JSON object string",
            param=f"messages[{index}].tool_calls[{call}].function.arguments",
        ) from None
    if not isinstance(parsed, dict):
        raise TemplateInputError(
            f"messages[{index}].tool_calls[{call}].function.arguments must be a JSON object, "
            f"got {type(parsed).__name__}",
            param=f"messages[{index}].tool_calls[{call}].function.arguments",
        )
    return parsed


def _normalise_call(call: Any, index: int, position: int) -> Any:
    if not isinstance(call, Mapping):
        return _drop_none(call)
    out: dict[str, Any] = {}
    for key, value in call.items():
        if value is None:
            continue
        if key == "function" and isinstance(value, Mapping):
            out[key] = {
                k: (_parse_arguments(v, index, position) if k == "arguments" else _drop_none(v))
                for k, v in value.items()
                if v is not None
            }
        elif key == "arguments":
            out[key] = _parse_arguments(value, index, position)
        else:
            out[key] = _drop_none(value)
    return out


def normalise_message(message: Any, index: int) -> Any:
    if not isinstance(message, Mapping):
        return message
    out: dict[str, Any] = {}
    for key, value in message.items():
        if value is None:
            continue
        if key == "tool_calls" and isinstance(value, list | tuple):
            out[key] = [_normalise_call(c, index, i) for i, c in enumerate(value)]
        else:
            out[key] = _drop_none(value)
    return out


def normalise_messages(messages: Sequence[Any]) -> list[Any]:
    return [normalise_message(m, i) for i, m in enumerate(messages)]


def normalise_tools(tools: Sequence[Any] | None) -> list[Any] | None:
    """Drop None-valued keys of each tool and its `function` (not inside `parameters`)."""
    if tools is None:
        return None
    out: list[Any] = []
    for tool in tools:
        if not isinstance(tool, Mapping):
            out.append(tool)
            continue
        clean = {k: v for k, v in tool.items() if v is not None}
        function = clean.get("function")
        if isinstance(function, Mapping):
            clean["function"] = {k: v for k, v in function.items() if v is not None}
        out.append(clean)
    return out
