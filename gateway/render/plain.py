"""Which inputs MiniJinja renders exactly as transformers' Jinja2 does, with the bundled template.

The engines differ on the model's template itself (templates/README.md lists what we found):
MiniJinja hands an integral float to `tojson` as an int (1.0 -> 1), prints large floats and
integers differently, strips fewer characters in `str.strip()` (U+001C..U+001F), and its
chainable undefined lets through what Jinja2 rejects (indexing into a number or mapping
content, `.items()` on missing arguments). "Plain" input avoids every one of those: JSON without
floats or huge integers or those control characters, in the shapes an OpenAI client sends.
The differential tests (tests/gateway/render) check the claim on thousands of random cases.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.render.prepass import ORDER_VARIABLE

_INT_LIMIT = 2**53
_STRIP_DIFFERENCES = frozenset("\x1c\x1d\x1e\x1f")
_OWN_VARIABLES = frozenset(
    {"messages", "tools", "documents", "add_generation_prompt", ORDER_VARIABLE}
)


class _NotPlain(Exception):
    pass


def _json(value: Any) -> None:
    """Plain JSON: strings without the strip-difference characters, small ints, no floats."""
    if isinstance(value, str):
        if not _STRIP_DIFFERENCES.isdisjoint(value):
            raise _NotPlain
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int):
        if not -_INT_LIMIT < value < _INT_LIMIT:
            raise _NotPlain
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise _NotPlain
            _json(key)
            _json(item)
    elif isinstance(value, list):
        for item in value:
            _json(item)
    else:
        raise _NotPlain


def _string(value: Any) -> None:
    if not isinstance(value, str):
        raise _NotPlain


def _identifier(obj: Mapping[str, Any]) -> None:
    for key in ("tool_call_id", "id"):
        value = obj.get(key)
        if value is not None and not isinstance(value, str) and type(value) is not int:
            raise _NotPlain


def _parts(content: Any) -> bool:
    """Text or a list of string / {type, text, ...} parts; True when it holds a tool_reference."""
    if isinstance(content, str):
        return False
    if not isinstance(content, list):
        raise _NotPlain
    reference = False
    for part in content:
        if isinstance(part, str):
            continue
        if not isinstance(part, dict):
            raise _NotPlain
        kind = part.get("type")
        if kind is not None:
            _string(kind)
        if "text" in part:
            _string(part["text"])
        reference = reference or kind == "tool_reference"
    return reference


def _tool_content(message: Mapping[str, Any]) -> bool:
    content = message.get("content")
    if content is None:
        return False
    first = content[0] if isinstance(content, list) and content else None
    if isinstance(first, dict) and "output" in first:
        reference = False
        for entry in content:
            if not isinstance(entry, dict):
                raise _NotPlain
            _identifier(entry)
            output = entry.get("output")
            if output is not None:
                reference = _parts(output) or reference
        return reference
    return _parts(content)


def _message(message: Any) -> bool:
    if not isinstance(message, dict):
        raise _NotPlain
    _json(message)
    _string(message.get("role"))
    if message["role"] == "tool":
        _identifier(message)
        return _tool_content(message)
    content = message.get("content")
    if content is not None:
        _parts(content)
    reasoning = message.get("reasoning_content")
    if reasoning is not None:
        _string(reasoning)
    calls = message.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list):
            raise _NotPlain
        for call in calls:
            if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
                raise _NotPlain
            _identifier(call)
            _string(call["function"].get("name"))
            if not isinstance(call["function"].get("arguments"), dict):
                raise _NotPlain
    return False


def is_plain(context: Mapping[str, Any]) -> bool:
    """True when this render context is of the kind both engines render identically."""
    try:
        for key, value in context.items():
            if key in _OWN_VARIABLES:
                continue
            if key == "reasoning_content":
                raise _NotPlain
            _json(value)
        tools = context.get("tools")
        if tools is not None:
            if not isinstance(tools, list):
                raise _NotPlain
            for tool in tools:
                if not isinstance(tool, dict):
                    raise _NotPlain
                _json(tool)
        messages = context.get("messages")
        if not isinstance(messages, list):
            raise _NotPlain
        references = False
        for message in messages:
            references = _message(message) or references
        if references and not tools:
            raise _NotPlain
    except _NotPlain:
        return False
    return True
